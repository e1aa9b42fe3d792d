"""The relevance accounting identity and the positional identities of the GPT-2, OPT, BERT, RoBERTa and BLOOM twins
and of the RoPE ViT twin (issue "PA-LRP for the models people use now", tests 3 and 4; docs/design.md).

Accounting, float64, AttnLRP rules: ``logit = semantic + positional + token types / prefix tokens + absorbed``, where
the absorbed part is what the softmax rules keep (relevance entering minus leaving, eager attention recorder) plus
``b * grad_b`` of every bias (linear, Conv1D and LayerNorm biases). Checked to 1e-6 (measured ~1e-15).

Positional identities:

* learned PE (GPT-2, OPT, BERT, RoBERTa, the ViT's table): token + position (+ token type) relevance = relevance of
  the embedding sum, because the sum passes one gradient to every addend (paper Eq. 5);
* ALiBi (BLOOM): the query side is zero under ``paper`` (softmax ignores a row constant); per layer, both rules
  give the same total, ``sum P * g`` of the distance-form bias, which equals the total of BLOOM's own ``m j`` form;
  ``relative_half`` does not change when every position is shifted, ``paper`` does (its map depends on the
  counting origin) while its totals do not;
* 2D RoPE (ViT): per layer, ``R(cos) + R(sin) = (R(q~) + R(k~)) / 2`` over the patch tokens (paper Eq. 10).
"""
import pytest
import torch

from palrp_bench.lrp import rules
from palrp_bench.lrp.composites import get_composite
from palrp_bench.lrp.positional import Rope2D
from palrp_bench.models.registry import twin_for
from models.families import CASES, LIBRARY_ATTENTION, make_rope_vit, images, make_text, padded_batch

D = torch.float64


def biases(model) -> list[torch.Tensor]:
    return [p for n, p in model.named_parameters() if n.endswith("bias")]


def text_ledger(model, head, composite="attnlrp", alibi_rule="paper", positions=None, side="right"):
    """Per-sample ``(logit, semantic, positional, other sinks, softmax absorbed, bias absorbed)`` of one batch and
    the forward record. Biases are shared by the batch, so their total is per batch (``[1]``)."""
    twin = twin_for(model)
    ids, mask, _ = padded_batch([8, 5], side, seed=11)
    inputs = twin.prepare(ids, mask)
    index = twin.resolve_position(inputs, (mask.cumsum(-1) == 2).long().argmax(-1) if head == "masked_lm" else None)
    rec = rules.AttentionRecorder()
    options = {"alibi_rule": alibi_rule, "positions": positions} if twin.family_name == "bloom" else {}
    out = twin.forward(inputs, index, get_composite(composite), positional_sinks=True, attention="eager",
                       recorder=rec, **options)
    logit = out.logits.max(-1).values
    names = list(out.other_sinks)
    leaves = [out.embeds] + [t for n in names for t in (out.other_sinks[n] if isinstance(out.other_sinks[n], list)
                                                       else [out.other_sinks[n]])]
    bs = biases(model)
    grads = torch.autograd.grad(logit.sum(), leaves + bs, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(leaves + bs, grads)]
    leaves = [x.detach() for x in leaves]
    rel = {"semantic": (leaves[0] * grads[0]).flatten(1).sum(1)}
    k = 1
    for n in names:
        group = out.other_sinks[n] if isinstance(out.other_sinks[n], list) else [out.other_sinks[n]]
        rel[n] = sum(((x.detach() * g).flatten(1).sum(1) for x, g in zip(group, grads[k:k + len(group)])),
                     torch.zeros_like(rel["semantic"]))
        k += len(group)
    bias = sum(((b * g).sum() for b, g in zip(bs, grads[k:])), torch.tensor(0.0, dtype=D)).detach()
    return logit.detach(), rel, rec.absorbed().detach(), bias


@pytest.mark.parametrize("family,head", CASES)
def test_accounting_identity_float64(family, head):
    model = make_text(family, head, D, attn=LIBRARY_ATTENTION.get(family, ("sdpa",))[0])
    logit, rel, absorbed, bias = text_ledger(model, head)
    positional = sum(v for n, v in rel.items() if n.startswith("alibi") or n == "positions")
    assert positional.abs().min() > 1e-6, "positional relevance must be non-trivial"
    assert absorbed.abs().min() > 1e-4 and bias.abs() > 1e-4, "softmax and biases must absorb something"
    total = sum(rel.values()) + absorbed
    assert abs(float(total.sum() + bias - logit.sum())) < 1e-6


@pytest.mark.parametrize("family,head", [("gpt2", "causal"), ("bert", "masked_lm")])
def test_cp_lrp_with_zero_biases_conserves_exactly(family, head):
    model = make_text(family, head, D)
    with torch.no_grad():
        for b in biases(model):
            b.zero_()
    logit, rel, absorbed, bias = text_ledger(model, head, composite="cp_lrp")
    assert absorbed.abs().max() == 0 and bias == 0
    assert torch.allclose(sum(rel.values()), logit, atol=1e-10, rtol=0)


# ----------------------------------------------------------------------------------------------- learned PE
@pytest.mark.parametrize("family,head", [c for c in CASES if c[0] != "bloom"])
def test_token_plus_position_is_the_relevance_of_the_embedding_sum(family, head):
    model = make_text(family, head, D)
    twin = twin_for(model)
    ids, mask, _ = padded_batch([7, 4], "left", seed=2)
    inputs = twin.prepare(ids, mask)
    index = twin.resolve_position(inputs, torch.tensor([4, 5]) if head == "masked_lm" else None)
    out = twin.forward(inputs, index, get_composite("attnlrp"), positional_sinks=True)
    addends = [out.embeds] + list(out.other_sinks.values())
    grads = torch.autograd.grad(out.logits.max(-1).values.sum(), addends)
    summed = sum(a.detach() for a in addends)
    for g in grads[1:]:
        assert torch.equal(g, grads[0])  # the sum passes one gradient to every addend
    parts = sum(a.detach() * g for a, g in zip(addends, grads))
    assert torch.allclose(parts, summed * grads[0], atol=1e-14)
    assert (out.other_sinks["positions"].detach() * grads[1]).abs().max() > 1e-6


# ----------------------------------------------------------------------------------------------------- ALiBi
def bloom_scores_relevance(model, rule, positions=None):
    """Per layer the recorded masked scores and their gradient (eager path) and the sinks' relevance."""
    twin = twin_for(model)
    ids, mask, _ = padded_batch([8, 5], "left", seed=4)
    inputs = twin.prepare(ids, mask)
    rec = rules.AttentionRecorder()
    out = twin.forward(inputs, inputs.explained_index, get_composite("attnlrp"), attention="eager", recorder=rec,
                       alibi_rule=rule, positions=positions)
    leaves = {n: v for n, v in out.other_sinks.items()}
    flat = [t for v in leaves.values() for t in v]
    grads = torch.autograd.grad(out.logits.max(-1).values.sum(), flat)
    rel, k = {}, 0
    for n, v in leaves.items():
        rel[n] = [(x * g).detach() for x, g in zip(v, grads[k:k + len(v)])]
        k += len(v)
    return twin, mask, rec, rel


def side_totals(rel, names):
    layers = len(next(iter(rel.values())))
    return torch.stack([sum(rel[n][layer].sum((1, 2)) for n in names if n in rel) for layer in range(layers)])


def test_alibi_rules_conserve_the_bias_relevance_and_agree_on_totals():
    model = make_text("bloom", "causal", D, attn="eager")
    twin, mask, rec, paper = bloom_scores_relevance(model, "paper")
    _, _, _, half = bloom_scores_relevance(model, "relative_half")
    slopes = twin.slopes().to(D)
    pos = twin.positional.positions(mask).to(D)
    query_names, key_names = ("alibi_query_one", "alibi_query_pos"), ("alibi_key_pos", "alibi_key_one")
    for layer, (scores, weights, valid) in enumerate(rec.records):
        g = scores.grad                                                  # [B, H, T, T]: the LRP gradient at S
        g = torch.where(valid, g, torch.zeros_like(g)) if valid is not None else g
        m = slopes.view(1, -1, 1, 1)
        distance = (m * (pos[:, None, None, :] - pos[:, None, :, None]) * g).sum((1, 2, 3))   # sum P g, m (j - i)
        bloom_form = (m * pos[:, None, None, :] * g).sum((1, 2, 3))                        # BLOOM's m j
        assert distance.abs().min() > 1e-6
        assert torch.allclose(distance, bloom_form, atol=1e-12)
        for rel in (paper, half):
            total = side_totals(rel, query_names)[layer] + side_totals(rel, key_names)[layer]
            assert torch.allclose(total, distance, atol=1e-12)
    # paper: everything on the keys (the query side is a row constant)
    assert side_totals(paper, query_names).abs().max() < 1e-13
    # relative_half: half of each term on each side, summed over the sequence the two sides are equal
    assert torch.allclose(side_totals(half, query_names), side_totals(half, key_names), atol=1e-12)


def test_relative_half_is_independent_of_the_counting_origin_and_paper_is_not():
    model = make_text("bloom", "classifier", D, attn="eager")
    twin, mask, _, _ = bloom_scores_relevance(model, "paper")
    shifted = twin.positional.positions(mask) + 5
    for rule in ("relative_half", "paper"):
        base = bloom_scores_relevance(model, rule)[3]
        moved = bloom_scores_relevance(model, rule, positions=shifted)[3]
        per_token = lambda rel: sum(torch.stack(v).sum(2) for v in rel.values())   # [L, B, T]
        totals = lambda rel: per_token(rel).sum(-1)
        assert torch.allclose(totals(base), totals(moved), atol=1e-12)
        same = torch.allclose(per_token(base), per_token(moved), atol=1e-12)
        assert same == (rule == "relative_half"), rule


# --------------------------------------------------------------------------------------------------- RoPE ViT
def vit_ledger(model, composite="attnlrp"):
    twin = twin_for(model)
    pixels = images(2).requires_grad_(True)
    rec = rules.AttentionRecorder()
    out = twin.forward(pixels, composite, positional_sinks=True, attention="eager", recorder=rec)
    logit = out.logits.max(-1).values
    leaves = [pixels, out.prefix] + ([out.pos_embed] if out.pos_embed is not None else []) + out.cos + out.sin
    bs = biases(model)  # incl. EvaAttention's q_bias / v_bias
    grads = torch.autograd.grad(logit.sum(), leaves + bs, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(leaves + bs, grads)]
    per_sample = sum((x.detach() * g).flatten(1).sum(1) for x, g in zip(leaves, grads[:len(leaves)]))
    bias = sum((b.detach() * g).sum() for b, g in zip(bs, grads[len(leaves):]))
    rope = sum((x.detach() * g).flatten(1).sum(1) for x, g in zip(out.cos + out.sin, grads[len(leaves) - 2 * len(out.cos):
                                                                                     len(leaves)]))
    return logit.detach(), per_sample, rec.absorbed().detach(), bias, rope


@pytest.mark.parametrize("variant", ["rope_ape", "reg_gap", "eva02"])
def test_rope_vit_accounting_identity_float64(variant):
    model = make_rope_vit(variant)
    logit, sinks, absorbed, bias, rope = vit_ledger(model)
    assert rope.abs().min() > 1e-6 and absorbed.abs().min() > 1e-4
    assert abs(float((sinks + absorbed).sum() + bias - logit.sum())) < 1e-6


@pytest.mark.parametrize("variant", ["rope_ape", "rope_half", "reg_gap"])
def test_rope_2d_sinks_receive_half_of_the_rotated_patch_qk_relevance(monkeypatch, variant):
    """Paper Eq. 10 on the patch tokens: per layer, R(cos) + R(sin) = (R(q~) + R(k~)) / 2."""
    captured = []
    original = Rope2D.apply

    def spy(x, cos, sin, num_prefix, layout, rule):
        out = original(x, cos, sin, num_prefix, layout, rule)
        out.retain_grad()
        captured.append((out, num_prefix))
        return out

    monkeypatch.setattr(Rope2D, "apply", staticmethod(spy))
    model = make_rope_vit(variant)
    twin = twin_for(model)
    out = twin.forward(images(2).requires_grad_(True), "attnlrp", positional_sinks=True)
    out.logits.max(-1).values.sum().backward()
    assert len(captured) == 2 * len(out.cos)
    for layer in range(len(out.cos)):
        (q, npt), (k, _) = captured[2 * layer], captured[2 * layer + 1]
        rotated = sum((t * t.grad)[:, :, npt:].sum(dim=(1, 3)) for t in (q, k))      # [B, Np]
        c, s = out.cos[layer], out.sin[layer]
        pe = (c * c.grad).sum(-1) + (s * s.grad).sum(-1)
        assert rotated.abs().max() > 1e-6
        assert torch.allclose(pe, 0.5 * rotated, atol=1e-12)


@pytest.mark.parametrize("family,head", CASES)
def test_explain_returns_what_the_softmax_rules_and_the_biases_absorbed(family, head):
    """``extras["absorbed"]`` of :func:`palrp_bench.explain` (the logit minus every sink's relevance) equals the
    recorder's measurement: softmax relevance entering minus leaving plus ``b * grad_b`` (batch totals: the biases
    are shared by the batch)."""
    from palrp_bench import explain

    model = make_text(family, head, D, attn=LIBRARY_ATTENTION.get(family, ("sdpa",))[0])
    logit, _, absorbed, bias = text_ledger(model, head, alibi_rule="relative_half")
    ids, mask, _ = padded_batch([8, 5], "right", seed=11)
    options = {"position": (mask.cumsum(-1) == 2).long().argmax(-1)} if head == "masked_lm" else {}
    if family == "bloom":
        options["alibi_rule"] = "relative_half"
    e = explain(model, ids, mask, method="pa_lrp", stabilizers="none", **options)
    assert torch.allclose(e.logit, logit, atol=1e-12, rtol=0)
    assert e.extras["absorbed"].shape == (2,) and e.extras["absorbed"].abs().min() > 1e-4
    assert abs(float(e.extras["absorbed"].sum() - absorbed.sum() - bias)) < 1e-6
