"""Agreement of the GPT-2 and BERT twins with AttnLRP as its authors implement it (``lxt`` 2.1; issue "PA-LRP for the
models people use now", test 6).

The reference outputs (tests/data/reference_lxt/lxt_families.npz) and the tiny models (``models/gpt2_causal``,
``bert_mlm``, ``bert_cls``) come from scripts/reference_lxt.py ``--suite families`` in a SEPARATE virtualenv
(docs/reference_lxt.md, "Other families"); this test never imports lxt. lxt's relevance covers the word embeddings
(``relevance``); the script also stores the position rows' (``relevance_pos``) and, for BERT, the token types'
(``relevance_type``), all read off the gradient at the embedding sum, which is exactly our three sinks
(``semantic``, ``positional`` and ``extras["token_type"]``).

What the tests establish (relative = max |ours - lxt| / max |lxt word relevance| per sequence):

* float32: every phase (AttnLRP, CP-LRP for GPT-2, unpatched Gradient x Input) agrees within ``F32_TOL``
  (measured <= 5.5e-6, the token types under SDPA);
* float64: GPT-2 and BERT are float64 end to end in both libraries; the only difference left is lxt's identity rule
  ``f(x) / (x + 1e-10)`` (GELU, the pooler's tanh): measured ~1e-8 as is, and ~1e-15 once it is emulated, asserted
  to 512 float64 ulps. Gradient x Input needs no emulation (~1e-15).
"""
import numpy as np
import pytest
import torch
import transformers

from methods.test_lxt_family_models import MODELS_DIR, inputs, ref  # noqa: F401 - the reference's fixtures
from palrp_bench import explain
from palrp_bench.lrp import rules

MODELS = {"gpt2_causal": transformers.AutoModelForCausalLM, "bert_mlm": transformers.AutoModelForMaskedLM,
          "bert_cls": transformers.AutoModelForSequenceClassification}
DTYPES = {"float32": torch.float32, "float64": torch.float64}
OUR_METHOD = {"attnlrp": "attnlrp", "cp_lrp": "cp_lrp", "gxi": "grad_x_input"}
PARTS = {"relevance": lambda e: e.semantic[0], "relevance_pos": lambda e: e.positional[0, 0, 0],
         "relevance_type": lambda e: e.extras["token_type"][0]}
F32_TOL = 2e-5                                           # >= 3.5x the worst float32 measurement (5.5e-6)
AS_IS_F64_TOL = 1e-7                                     # lxt's identity-rule epsilon (measured <= 1.2e-8)
EMULATED_F64_TOL = 512 * torch.finfo(torch.float64).eps  # 1.1e-13
LXT_IDENTITY_EPS = 1e-10

_models: dict = {}


def load(name: str, dtype: str):
    if (name, dtype) not in _models:
        _models[name, dtype] = MODELS[name].from_pretrained(MODELS_DIR / name, dtype=DTYPES[dtype]).eval()
    return _models[name, dtype]


def explain_sequences(ref, inputs, name, dtype, method, attention):
    """Our explanation of every reference sequence, as lxt ran it (batch size 1, unpadded)."""
    model, seqs = load(name, dtype), inputs[name]
    out = []
    for i, ids in enumerate(seqs["input_ids"]):
        batch = {"input_ids": torch.tensor([ids])}
        if "token_type_ids" in seqs:
            batch["token_type_ids"] = torch.tensor([seqs["token_type_ids"][i]])
        position = int(ref[f"{name}.explained_position"][i]) if name == "bert_mlm" else None
        out.append(explain(model, batch, method=method, attention=attention, position=position))
    return out


def worst_difference(ref, name, key, explanations) -> float:
    off, worst = ref[f"{name}.offsets"], 0.0
    for i, e in enumerate(explanations):
        scale = np.abs(ref[f"{key}.relevance"][off[i]:off[i + 1]]).max()
        for part, read in PARTS.items():
            if f"{key}.{part}" in ref:
                ours = read(e).double().numpy()
                worst = max(worst, float(np.abs(ours - ref[f"{key}.{part}"][off[i]:off[i + 1]]).max() / scale))
    return worst


def phases(name):
    return ("attnlrp", "gxi") if name.startswith("bert") else ("attnlrp", "cp_lrp", "gxi")


CASES = [(n, p) for n in MODELS for p in phases(n)]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("name,phase", CASES)
def test_float32_agrees_with_lxt(ref, inputs, name, phase, attn):
    key = f"{name}.float32.{attn}.{phase}"
    explanations = explain_sequences(ref, inputs, name, "float32", OUR_METHOD[phase], attn)
    for i, e in enumerate(explanations):
        assert int(e.target[0]) == int(ref[f"{key}.pred"][i])
        assert abs(float(e.logit[0]) - float(ref[f"{key}.logit"][i])) < 1e-5
    assert worst_difference(ref, name, key, explanations) < F32_TOL


def lxt_identity_activation(x, fn, rule, _original=rules.activation):
    """lxt's identity rule: forward ``fn(x)`` exactly, gradient ``fn(x) / (x + 1e-10)`` (ours: ``fn(x) / x``)."""
    if rule != "identity":
        return _original(x, fn, rule)
    y = fn(x)
    ratio = (y / (x + LXT_IDENTITY_EPS)).detach()
    return y.detach() + (x * ratio - (x * ratio).detach())


@pytest.mark.parametrize("name,phase", CASES)
def test_float64_difference_is_exactly_lxts_identity_epsilon(ref, inputs, monkeypatch, name, phase):
    for attn in ("eager", "sdpa"):
        key = f"{name}.float64.{attn}.{phase}"
        as_is = worst_difference(ref, name, key, explain_sequences(ref, inputs, name, "float64", OUR_METHOD[phase],
                                                                   attn))
        assert as_is < (EMULATED_F64_TOL if phase == "gxi" else AS_IS_F64_TOL), (attn, as_is)
        with monkeypatch.context() as m:
            m.setattr(rules, "activation", lxt_identity_activation)
            emulated = worst_difference(ref, name, key, explain_sequences(ref, inputs, name, "float64",
                                                                          OUR_METHOD[phase], attn))
        assert emulated < EMULATED_F64_TOL, (attn, emulated)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_tolerance_separates_rule_sets(ref, inputs, name):
    """Agreement is specific: our AttnLRP is far (> 100x the float32 tolerance) from lxt's Gradient x Input."""
    ours = explain_sequences(ref, inputs, name, "float32", "attnlrp", "sdpa")
    assert worst_difference(ref, name, f"{name}.float32.sdpa.gxi", ours) > 100 * F32_TOL
