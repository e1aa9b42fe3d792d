"""The relevance accounting identity and RoPE's Eq. 10 identity on every RoPE decoder family (float64).

docs/design.md section 4: ``logit = sum(semantic) + sum(positional) + absorbed``, where the softmax rules absorb the
relevance
entering minus the relevance leaving them and every bias absorbs ``b * grad_b``. What the families add keeps the
books closed without new terms: the identity rule on soft-capping (Gemma 2) passes relevance unchanged, ``(1 + w)``
gains, q/k norms, sandwich norms and LayerNorm centring are linear once the normaliser is constant, the fused
projections and the partial-rotary pass-through dimensions are linear, and GPT-NeoX's LayerNorm biases are biases.
Checked to 1e-6 (measured <= 1e-14). Paper Eq. 10: per layer and token, the cos/sin sinks receive half of the
relevance of the rotated query and key dimensions (partial rotary: only those), to 1e-12.
"""
import pytest
import torch

from palrp_bench.lrp.composites import get_composite
from palrp_bench.lrp.positional import RoPE
from palrp_bench.models.decoder import DecoderTwin
from lrp.test_accounting import ledger
from models.tiny_families import FAMILIES, make_model, random_ids, variants

CASES = [(f, v) for f in FAMILIES for v in variants(f)]


def books(model, ids, mask, composite, sinks):
    """One sample's books as floats: explained logit, semantic, positional, softmax- and bias-absorbed relevance
    (the LLaMA test's ledger, whose bias term sums over the batch: one sample per call)."""
    return tuple(float(x.detach().sum()) for x in ledger(model, ids, mask, composite, sinks))


@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family,variant", CASES)
def test_accounting_identity_float64(family, variant, kind, sinks):
    model = make_model(family, kind, variant, dtype=torch.float64)
    padded = torch.ones(1, 10, dtype=torch.long)
    padded[0, 7:] = 0  # right padding
    for ids, mask in ((random_ids(1, 10), None), (random_ids(1, 10, seed=1), padded)):
        logit, sem, pos, absorbed, bias = books(model, ids, mask, "attnlrp", sinks)
        assert abs(absorbed) > 1e-4, "the softmax rule should absorb something (non-trivial test)"
        assert (abs(pos) > 1e-6) if sinks else pos == 0
        assert abs(sem + pos + absorbed + bias - logit) < 1e-6


@pytest.mark.parametrize("family", ["qwen2", "gpt_neox"])
def test_biases_are_booked(family):
    """Qwen2's q/k/v biases and GPT-NeoX's projection and LayerNorm biases absorb relevance (the term is needed)."""
    model = make_model(family, "causal", dtype=torch.float64)
    logit, sem, pos, absorbed, bias = books(model, random_ids(1, 9), None, "attnlrp", True)
    assert abs(bias) > 1e-4
    assert abs(sem + pos + absorbed + bias - logit) < 1e-6


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_cp_lrp_conserves_exactly_without_biases(family, kind):
    model = make_model(family, kind, dtype=torch.float64)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    logit, sem, pos, absorbed, bias = books(model, random_ids(1, 10), None, "cp_lrp", True)
    assert absorbed == 0 and pos == 0 and bias == 0
    assert abs(sem - logit) < 1e-10


@pytest.mark.parametrize("family,variant", CASES)
def test_rope_sinks_receive_half_of_the_rotated_qk_relevance(monkeypatch, family, variant):
    """Paper Eq. 10 per layer and token: R(cos_k) + R(sin_k) = 1/2 R(Q~_k) + 1/2 R(K~_k) over rotated dimensions."""
    captured = []
    original = RoPE.apply

    def spy(x, cos, sin, rule, **stabilizer):
        out = original(x, cos, sin, rule, **stabilizer)
        out.retain_grad()
        captured.append((out, cos.shape[-1]))
        return out

    monkeypatch.setattr(RoPE, "apply", staticmethod(spy))
    model = make_model(family, "causal", variant, dtype=torch.float64)
    ids = random_ids(2, 9)
    twin = DecoderTwin(model)
    out = twin.forward(twin.embed(ids), None, twin.last_index(ids, None), get_composite("attnlrp"),
                       positional_sinks=True)
    out.logits.max(-1).values.sum().backward()
    assert len(captured) == 2 * twin.num_layers  # q then k, per layer
    for layer in range(twin.num_layers):
        r_rot = 0
        for rotated, width in captured[2 * layer:2 * layer + 2]:
            r_rot = r_rot + (rotated * rotated.grad)[..., :width].sum(dim=(1, 3))  # [B, T]
        c, s = out.cos[layer], out.sin[layer]
        r_pe = (c * c.grad).sum(-1) + (s * s.grad).sum(-1)
        assert r_rot.abs().max() > 1e-6
        assert torch.allclose(r_pe, 0.5 * r_rot, atol=1e-12)


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_result_alone_accounts_for_the_logit(family, method):
    """:func:`palrp_bench.explain` returns the absorbed share (``extras["absorbed"]``): the result's semantic and
    positional parts and it add up to the logit, and it is what the softmax rules and the biases absorbed (the
    recorder's measurement; one sample: biases are shared by a batch)."""
    from palrp_bench import explain

    model = make_model(family, "causal", dtype=torch.float64)
    ids = random_ids(1, 9, seed=4)
    logit, sem, pos, absorbed, bias = books(model, ids, None, "attnlrp", method == "pa_lrp")
    e = explain(model, ids, method=method, stabilizers="none")
    reached = float(e.semantic.sum() + e.positional.sum())
    assert abs(float(e.logit[0]) - logit) < 1e-12 and abs(absorbed) > 1e-4
    assert abs(reached + float(e.extras["absorbed"][0]) - float(e.logit[0])) < 1e-10 * max(1.0, abs(logit))
    assert abs(float(e.extras["absorbed"][0]) - absorbed - bias) < 1e-9
