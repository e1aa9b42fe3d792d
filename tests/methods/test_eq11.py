"""``aggregation="eq11"`` (paper Eq. 11) against an independent computation on the official tiny LLaMAs.

The reference here does not use the aggregation code (``lrp/positional.py`` reductions, ``models/decoder.py``
summaries, ``methods/token_aggregation.py``, ``api.py``): it runs the twin's LRP-aware forward once, takes the
element relevances ``x * dlogit/dx`` of the input-embedding leaf and of every layer's cos / sin leaf with
``torch.autograd.grad``, checks that their per-token sums are the official code's semantic and positional terms
(``tests/data/official/nlp``), and then writes Eq. 11 out:

    R_i = sum_d E_i[d]^+ + sum_k sum_d' P_{i,k}[d']^+        (P_{i,k}: the cos and sin elements of token i, layer k)

without multi-sink (one shared sink) ``sum_d' (sum_k P_{i,k}[d'])^+``; scores divided by their max.
"""
import json

import numpy as np
import pytest
import torch
import transformers

from conftest import OFFICIAL
from palrp_bench import explain
from palrp_bench.lrp.composites import get_composite
from palrp_bench.models.decoder import DecoderTwin

NLP = OFFICIAL / "nlp"
CASES = [("llama_causal", "ids_causal.json", "nlp_causal_fixed_f64.npz", transformers.LlamaForCausalLM),
         ("llama_cls", "ids_cls.json", "nlp_cls.npz", transformers.LlamaForSequenceClassification)]


def element_relevance(model, ids: torch.Tensor, positional_sinks: bool):
    """``(E [T, D], cos [L, T, d], sin [L, T, d])`` element relevances of one sequence, by plain autograd."""
    twin = DecoderTwin(model)
    embeds = twin.embed(ids)
    out = twin.forward(embeds, None, twin.last_index(ids, None), get_composite("attnlrp"),
                       positional_sinks=positional_sinks)
    logit = out.logits.max(-1).values.sum()
    leaves = [embeds, *out.cos, *out.sin] if positional_sinks else [embeds]
    grads = torch.autograd.grad(logit, leaves)
    rel = [(x * g).detach()[0] for x, g in zip(leaves, grads)]
    n = len(out.cos) if positional_sinks else 0
    return rel[0], torch.stack(rel[1:1 + n]) if n else None, torch.stack(rel[1 + n:]) if n else None


def eq11_by_hand(E, cos, sin, use_semantic: bool, use_positional: bool, multisink: bool = True) -> torch.Tensor:
    total = torch.zeros(E.shape[0], dtype=E.dtype)
    if use_semantic:
        total += E.clamp(min=0).sum(-1)
    if use_positional:
        if multisink:
            total += cos.clamp(min=0).sum(dim=(0, 2)) + sin.clamp(min=0).sum(dim=(0, 2))
        else:
            total += cos.sum(0).clamp(min=0).sum(-1) + sin.sum(0).clamp(min=0).sum(-1)
    return total / total.max()


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def official(request):
    folder, ids_file, fixture, cls = request.param
    model = cls.from_pretrained(NLP / folder, dtype=torch.float64).eval()
    return model, json.loads((NLP / ids_file).read_text()), np.load(NLP / fixture)


def test_eq11_scores_equal_the_formula_on_official_element_relevances(official):
    model, seqs, ref = official
    off = ref["offsets"]
    for i, seq in enumerate(seqs):
        ids = torch.tensor([seq])
        E, cos, sin = element_relevance(model, ids, positional_sinks=True)
        E_base, _, _ = element_relevance(model, ids, positional_sinks=False)
        # the elements are the official code's quantities: their per-token sums are its sem / pos terms (exact rules
        # here, the official ones carry stabilisers: ~1e-3 relative, tests/methods/test_official_agreement.py)
        sl = slice(off[i], off[i + 1])
        for ours, theirs in ((E.sum(-1), ref["sem_pe"][sl]), (E_base.sum(-1), ref["sem_attnlrp"][sl]),
                             (cos.sum(-1), ref["pos_cos"][:, sl]), (sin.sum(-1), ref["pos_sin"][:, sl])):
            theirs = np.asarray(theirs)
            assert np.abs(ours.numpy() - theirs).max() <= 2e-3 * np.abs(theirs).max()
        expected = {
            "pa_lrp": eq11_by_hand(E, cos, sin, True, True),
            "pe_only": eq11_by_hand(E, cos, sin, False, True),
            "pa_lrp_no_multisink": eq11_by_hand(E, cos, sin, True, True, multisink=False),
            "attnlrp": eq11_by_hand(E_base, None, None, True, False),
        }
        for method, want in expected.items():
            got = explain(model, ids, method=method, aggregation="eq11", stabilizers="none").scores[0]
            torch.testing.assert_close(got, want, rtol=0, atol=1e-10, msg=f"{method}, sequence {i}")


def test_the_formula_is_not_a_relu_of_token_sums(official):
    """Self-check: Eq. 11's per-element ReLU differs from a ReLU of per-token sums (and from the official
    aggregation) on these sequences, so the comparison above can tell them apart."""
    model, seqs, _ = official
    ids = torch.tensor([seqs[1]])
    E, cos, sin = element_relevance(model, ids, positional_sinks=True)
    per_element = eq11_by_hand(E, cos, sin, True, True)
    per_token = E.sum(-1).clamp(min=0) + cos.sum(-1).clamp(min=0).sum(0) + sin.sum(-1).clamp(min=0).sum(0)
    assert (per_element - per_token / per_token.max()).abs().max() > 1e-2
    official_scores = explain(model, ids, method="pa_lrp").scores[0]
    assert (per_element - official_scores).abs().max() > 1e-2
