"""Agreement with the official PA-LRP code (its outputs on tiny models, tests/data/official/nlp, produced by
github.com/YardenBakish/PE-AWARE-LRP at 51eb418 -- an AttnLRP (lxt) fork, so its `attnlrp` row is also the AttnLRP
authors' rule set). The official rules carry epsilons (linear 1e-8, A@V 1e-6); we are eps-free, which explains
relative differences up to ~1e-3 on these random models (identical in float64, so not a precision effect)."""
import json

import numpy as np
import pytest
import torch
import transformers

from conftest import OFFICIAL
from palrp_bench import explain

NLP = OFFICIAL / "nlp"
KEYS = {"attnlrp": "attnlrp", "pe_only": "pe_only", "pa_lrp": "pa_lrp", "pa_lrp_no_multisink": "pa_lrp_no_abs"}
CASES = [  # fixture, model folder, ids, dtype, causal
    ("nlp_causal_fixed.npz", "llama_causal", "ids_causal.json", torch.float32, True),
    ("nlp_causal_fixed_f64.npz", "llama_causal", "ids_causal.json", torch.float64, True),
    ("nlp_causal_official_noncausal.npz", "llama_causal", "ids_causal.json", torch.float32, False),
    ("nlp_cls.npz", "llama_cls", "ids_cls.json", torch.float32, True),
]
_models = {}


def load(folder, dtype):
    key = (folder, dtype)
    if key not in _models:
        cls = transformers.LlamaForSequenceClassification if folder == "llama_cls" else transformers.LlamaForCausalLM
        _models[key] = cls.from_pretrained(NLP / folder, dtype=dtype).eval()
    return _models[key]


def rel_err(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", CASES)
@pytest.mark.parametrize("method", sorted(KEYS))
def test_scores_match_official(fixture, folder, ids_file, dtype, causal, method):
    ref = np.load(NLP / fixture)
    model = load(folder, dtype)
    seqs = json.loads((NLP / ids_file).read_text())
    off = ref["offsets"]
    for i, seq in enumerate(seqs):
        rel = explain(model, torch.tensor([seq]), method=method, causal=causal)
        assert int(rel.target[0]) == int(ref["pred"][i])
        assert abs(float(rel.logit[0]) - float(ref["logit"][i])) < 1e-5
        assert rel_err(rel.scores[0].double(), ref[KEYS[method]][off[i]:off[i + 1]]) < 2e-3, (method, i)


@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", CASES)
def test_semantic_and_positional_terms_match_official(fixture, folder, ids_file, dtype, causal):
    ref = np.load(NLP / fixture)
    model = load(folder, dtype)
    seqs = json.loads((NLP / ids_file).read_text())
    off = ref["offsets"]
    for i, seq in enumerate(seqs):
        base = explain(model, torch.tensor([seq]), method="attnlrp", causal=causal)
        pa = explain(model, torch.tensor([seq]), method="pa_lrp", causal=causal)
        sl = slice(off[i], off[i + 1])
        assert rel_err(base.semantic[0].double(), ref["sem_attnlrp"][sl]) < 2e-3
        assert rel_err(pa.semantic[0].double(), ref["sem_pe"][sl]) < 2e-3
        assert rel_err(pa.positional[0, :, 0].double(), ref["pos_cos"][:, sl]) < 2e-3
        assert rel_err(pa.positional[0, :, 1].double(), ref["pos_sin"][:, sl]) < 2e-3
        # the official ledger: sum(sem) + sum(pos) = logit - absorbed_softmax - eps_leak; ours (eps-free) agrees
        # to ~1e-4 of the logit (the epsilons also shift what the softmax absorbs)
        ours_total = float(pa.semantic.sum() + pa.positional.sum())
        official_total = float(ref["sem_pe"][sl].sum() + ref["pos_cos"][:, sl].sum() + ref["pos_sin"][:, sl].sum())
        assert abs(ours_total - official_total) < 1e-3 * abs(float(ref["logit"][i]))


def test_imdb_sign_hazard_reproduced_and_corrected():
    """PROTOCOL.md section 2: a negative explained logit flips the semantic map under the official code."""
    ref = np.load(NLP / "nlp_cls.npz")
    model = load("llama_cls", torch.float32)
    seq = json.loads((NLP / "ids_cls.json").read_text())[0]
    assert ref["logit"][0] < 0  # the fixture's first sample is a hazard case
    official = explain(model, torch.tensor([seq]), method="pa_lrp")
    fixed = explain(model, torch.tensor([seq]), method="pa_lrp", protocol="corrected")
    assert rel_err(official.scores[0].double(), ref["pa_lrp"][: ref["offsets"][1]]) < 2e-3
    assert torch.allclose(fixed.semantic, -official.semantic)
    assert not torch.allclose(fixed.scores, official.scores)
