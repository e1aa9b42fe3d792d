"""The relevance accounting identity (docs/design.md section 4): logit = sum(semantic) + sum(positional) + absorbed,
where the
absorbed part is what the softmax rules (relevance entering minus leaving) and the biases (b * grad_b) keep.
Checked in float64 to 1e-6 on the full LLaMA twin; CP-LRP with zero biases conserves exactly. Also paper Eq. 10:
per layer, the cos/sin sinks receive exactly half of the relevance of the rotated queries and keys."""
import pytest
import torch

from palrp_bench.lrp import rules
from palrp_bench.lrp.composites import get_composite
from palrp_bench.lrp.positional import RoPE
from palrp_bench.models.decoder import DecoderTwin
from models.tiny_llama import make_llama, random_ids


def ledger(model, ids, mask, composite, positional_sinks):
    twin = DecoderTwin(model)
    rec = rules.AttentionRecorder()
    embeds = twin.embed(ids)
    out = twin.forward(embeds, mask, twin.last_index(ids, mask), get_composite(composite),
                       positional_sinks=positional_sinks, attention="eager", recorder=rec)
    logit = out.logits.max(-1).values
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    leaves = [embeds, *out.cos, *out.sin]
    grads = torch.autograd.grad(logit.sum(), leaves + biases, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(leaves + biases, grads)]
    semantic = (embeds * grads[0]).flatten(1).sum(1)
    n = len(out.cos)
    positional = sum(((x * g).flatten(1).sum(1) for x, g in zip(leaves[1:], grads[1:1 + 2 * n])),
                     torch.zeros_like(semantic))
    # a bias is shared by the whole batch: its relevance sums over samples (single-sample use below for biases)
    bias = sum(((b * g).sum() for b, g in zip(biases, grads[len(leaves):])), torch.tensor(0.0, dtype=torch.float64))
    return logit.detach(), semantic, positional, rec.absorbed(), bias


@pytest.mark.parametrize("variant", ["gqa", "mqa_tied", "llama3_rope"])
@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("composite,sinks", [("attnlrp", False), ("attnlrp", True)])
def test_accounting_identity_float64(variant, kind, composite, sinks):
    model = make_llama(variant, kind, dtype=torch.float64)
    ids = random_ids(3, 9)
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0  # right padding in one sample
    logit, sem, pos, absorbed, _ = ledger(model, ids, mask, composite, sinks)
    assert absorbed.abs().min() > 1e-4, "the softmax rule should absorb something (non-trivial test)"
    if sinks:
        assert pos.abs().min() > 1e-6
    else:
        assert pos.abs().max() == 0
    assert torch.allclose(sem + pos + absorbed, logit, atol=1e-6, rtol=0)


def test_accounting_identity_with_biases():
    model = make_llama("linear_rope_bias", "causal", dtype=torch.float64)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.normal_(0, 0.3)
    ids = random_ids(1, 8)
    logit, sem, pos, absorbed, bias = ledger(model, ids, None, "attnlrp", True)
    assert bias.abs() > 1e-4
    assert torch.allclose(sem + pos + absorbed + bias, logit, atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", ["causal", "classifier"])
def test_cp_lrp_conserves_exactly(kind):
    model = make_llama("gqa", kind, dtype=torch.float64)
    ids = random_ids(2, 10)
    logit, sem, pos, absorbed, _ = ledger(model, ids, None, "cp_lrp", True)
    assert absorbed.abs().max() == 0 and pos.abs().max() == 0
    assert torch.allclose(sem, logit, atol=1e-10, rtol=0)


def test_rope_sinks_receive_half_of_the_rotated_qk_relevance(monkeypatch):
    """Paper Eq. 10: R(R_{i,k}) = 1/2 R(Q~_i) + 1/2 R(K~_i), per layer k and token i."""
    captured = []
    original = RoPE.apply

    def spy(x, cos, sin, rule, **stabilizer):
        out = original(x, cos, sin, rule, **stabilizer)
        out.retain_grad()
        captured.append(out)
        return out

    monkeypatch.setattr(RoPE, "apply", staticmethod(spy))
    model = make_llama("gqa", "causal", dtype=torch.float64)
    ids = random_ids(2, 7)
    twin = DecoderTwin(model)
    embeds = twin.embed(ids)
    out = twin.forward(embeds, None, twin.last_index(ids, None), get_composite("attnlrp"), positional_sinks=True)
    out.logits.max(-1).values.sum().backward()
    assert len(captured) == 2 * twin.num_layers  # q then k, per layer
    for layer in range(twin.num_layers):
        q_rot, k_rot = captured[2 * layer], captured[2 * layer + 1]
        r_rot = (q_rot * q_rot.grad).sum(dim=(1, 3)) + (k_rot * k_rot.grad).sum(dim=(1, 3))   # [B, T]
        c, s = out.cos[layer], out.sin[layer]
        r_pe = (c * c.grad).sum(-1) + (s * s.grad).sum(-1)
        assert r_rot.abs().max() > 1e-6
        assert torch.allclose(r_pe, 0.5 * r_rot, atol=1e-12)
