"""Agreement with AttnLRP's authors on a mixture-of-experts model: upstream lxt's Qwen3-MoE map
(``lxt/efficient/models/qwen3_moe.py``, not in lxt 2.1; docs/reference_lxt.md, "Qwen3-MoE").

The tiny Qwen3-MoE (2 layers, hidden 64, 6 experts of which 2 are chosen, renormalised gates) and lxt's relevance
were produced in a SEPARATE virtualenv (lxt at the repository commit that added the map, transformers 5.9) by
``scripts/reference_lxt_moe.py``; this test never imports lxt. lxt's map: the router unpatched (its softmax, top-k
choice and renormalisation under the plain gradient, i.e. the softmax rule), the gradient at each expert's
``act(gate) * up`` and at ``expert(x) * gate`` halved (the uniform rule), identity rule on SiLU, RMSNorms with a
constant normaliser, attention q/k 1/4 and v 1/2.

What the tests establish, for float32 and float64 and both attention implementations:

* ``explain(..., method="attnlrp" | "grad_x_input", stabilizers="none").semantic`` (lxt has no stabilisers; ``none``
  is also this family's default) equals lxt's AttnLRP / the unpatched model's Gradient x Input within the LLaMA
  comparison's tolerances (relative 5e-6 / 2e-5; measured 3.0e-7 / 1.2e-6), far inside the 1e-4 the comparison
  asks for; the model loads in this venv's transformers and predicts and scores as it did there;
* in float64 the remaining difference is lxt's and transformers' numerics (identity-rule epsilon 1e-10, float32
  norm statistics, eager softmax and router softmax): emulated, the agreement is float32 rounding (measured 0);
* the agreement is specific: plain Gradient x Input and AttnLRP with constant router gates
  (``attnlrp_constant_router``) are far from lxt's AttnLRP, so the gate's half of the relevance is lxt's too.
"""
import json

import numpy as np
import pytest
import torch
import transformers

from conftest import DATA
from palrp_bench import explain
from methods.test_lxt_agreement import TOL, assert_float64_gap_is_lxts_numerics, per_sequence, rel_diff

REF_FILE = DATA / "reference_lxt" / "lxt_qwen3_moe.npz"
MODEL_DIR = DATA / "reference_lxt" / "models" / "qwen3_moe_causal"
NAME = "qwen3_moe_causal"
DTYPES = {"float32": torch.float32, "float64": torch.float64}
OUR_METHOD = {"attnlrp": "attnlrp", "gxi": "grad_x_input"}   # lxt phase -> palrp method (lxt has no CP-LRP map here)

_models: dict = {}


@pytest.fixture(scope="module")
def ref():
    with np.load(REF_FILE) as data:
        return {k: data[k] for k in data.files}


def load(dtype: str):
    if dtype not in _models:
        _models[dtype] = transformers.AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=DTYPES[dtype]).eval()
    return _models[dtype]


def sequences(ref) -> list[list[int]]:
    off, ids = ref[f"{NAME}.offsets"], ref[f"{NAME}.ids"]
    return [ids[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]


def test_reference_file_describes_an_lxt_moe_run(ref):
    versions = json.loads(str(ref["versions"]))
    assert versions["transformers"].startswith("5.") and len(versions["lxt_commit"]) == 40
    patched = json.loads(str(ref["patch_map"]))
    assert "Qwen3MoeExperts" in patched and "experts_forward" in patched["Qwen3MoeExperts"]
    assert "logit.backward()" in str(ref["recipe"])
    assert type(load("float32")).__name__ == "Qwen3MoeForCausalLM"
    for dtype in DTYPES:
        for attn in ("eager", "sdpa"):
            base, patched_key = f"{NAME}.{dtype}.{attn}.gxi", f"{NAME}.{dtype}.{attn}.attnlrp"
            assert ref[f"{patched_key}.pred"].tolist() == ref[f"{base}.pred"].tolist()


@pytest.mark.parametrize("phase", sorted(OUR_METHOD))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_public_explain_matches_lxt(ref, dtype, attn, phase):
    model = load(dtype)
    key = f"{NAME}.{dtype}.{attn}.{phase}"
    for i, (seq, theirs) in enumerate(zip(sequences(ref), per_sequence(ref, NAME, key))):
        rel = explain(model, torch.tensor([seq]), method=OUR_METHOD[phase], attention=attn, stabilizers="none")
        assert int(rel.target[0]) == int(ref[f"{key}.pred"][i])
        assert abs(float(rel.logit[0]) - float(ref[f"{key}.logit"][i])) < 1e-5
        assert rel_diff(rel.semantic[0].double().numpy(), theirs) < TOL[phase], (key, i)


def test_default_rules_agree_and_the_agreement_is_specific(ref):
    model = load("float32")
    for i, seq in enumerate(sequences(ref)):
        ids = torch.tensor([seq])
        lxt_attnlrp = per_sequence(ref, NAME, f"{NAME}.float32.sdpa.attnlrp")[i]
        default = explain(model, ids, method="attnlrp")
        assert default.stabilizers == "none"
        assert rel_diff(default.semantic[0].double().numpy(), lxt_attnlrp) < TOL["attnlrp"]
        ours = default.semantic[0].double().numpy()
        assert rel_diff(ours, per_sequence(ref, NAME, f"{NAME}.float32.sdpa.gxi")[i]) > 100 * TOL["attnlrp"]
        constant = explain(model, ids, method="attnlrp", rules="attnlrp_constant_router")
        assert rel_diff(constant.semantic[0].double().numpy(), lxt_attnlrp) > 100 * TOL["attnlrp"]


@pytest.mark.parametrize("phase", sorted(OUR_METHOD))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_float64_difference_is_exactly_lxts_numerics(ref, monkeypatch, attn, phase):
    theirs = per_sequence(ref, NAME, f"{NAME}.float64.{attn}.{phase}")
    assert_float64_gap_is_lxts_numerics(monkeypatch, load("float64"), sequences(ref), theirs, phase, attn)
