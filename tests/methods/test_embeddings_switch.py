"""The ``embeddings`` switch (docs/positional.md, "Full and partial embeddings"): on text models with a learned
absolute position embedding, ``full`` scores the full embedding (token + position) with ``attnlrp``, ``cp_lrp`` and
``grad_x_input``, ``partial`` the token embedding alone (the behaviour before the switch existed). ``pa_lrp`` is
``attnlrp`` with ``full`` up to a positive factor per sample, so every score-order and sign metric agrees; RoPE,
ALiBi, ViTs and the baselines do not change; BERT's token types stay out."""
import pytest
import torch

from models.families import make_text, padded_batch
from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids
from palrp_bench import explain
from palrp_bench.api import embeddings_used
from palrp_bench.errors import BadInputError
from palrp_bench.methods.registry import METHODS

D = torch.float64
SWITCHED = sorted(m.name for m in METHODS.values() if m.reads_embeddings_switch and "tokens" in m.modalities)
LEARNED = [("gpt2", "causal"), ("gpt2", "classifier"), ("opt", "causal"), ("bert", "masked_lm"),
           ("bert", "classifier"), ("roberta", "masked_lm")]


def batch(head: str):
    ids, mask, _ = padded_batch([7, 5], "right", seed=9)
    return ids, mask, ({"position": torch.tensor([2, 3])} if head == "masked_lm" else {})


def test_the_switched_methods_are_the_semantic_only_lrp_rows():
    assert SWITCHED == ["attnlrp", "cp_lrp", "grad_x_input"]


@pytest.mark.parametrize("family,head", LEARNED)
@pytest.mark.parametrize("method", SWITCHED)
@pytest.mark.parametrize("aggregation", ["official", "eq11"])
def test_full_adds_the_position_relevance_partial_keeps_the_token_relevance(family, head, method, aggregation):
    model = make_text(family, head, D)
    ids, mask, options = batch(head)
    full = explain(model, ids, mask, method=method, aggregation=aggregation, **options)  # the default
    partial = explain(model, ids, mask, method=method, aggregation=aggregation, embeddings="partial", **options)
    assert full.extras["embeddings"] == "full" and partial.extras["embeddings"] == "partial"
    assert torch.equal(full.semantic, partial.semantic) and torch.equal(full.positional, partial.positional)
    position = full.positional.sum(dim=(1, 2))  # the single learned-PE sink [B, 1, 1, T]
    assert position.abs().max() > 1e-6
    if aggregation == "official":  # raw scores
        assert torch.allclose(partial.scores, full.semantic * mask, atol=0, rtol=0)
        assert torch.allclose(full.scores, (full.semantic + position) * mask, atol=1e-12, rtol=0)
    else:  # Eq. 11: per-element ReLU sums, the position's added like pa_lrp's, then divided by the max
        def normalised(x):
            return x / x.amax(-1, keepdim=True)

        relu_pos = full.extras["positional_relu"].sum(dim=(1, 2))
        assert torch.allclose(partial.scores, normalised(full.extras["semantic_relu"]) * mask, atol=1e-12)
        assert torch.allclose(full.scores, normalised(full.extras["semantic_relu"] + relu_pos) * mask, atol=1e-12)
    if "token_type" in full.extras:  # BERT's token types: relevance exists, and stays out
        assert full.extras["token_type"].abs().max() > 1e-6
        assert not torch.allclose(full.scores, (full.semantic + position + full.extras["token_type"]) * mask)


@pytest.mark.parametrize("family,head", [("gpt2", "causal"), ("bert", "masked_lm")])
def test_gradient_x_input_of_the_full_embedding_equals_autograd_on_the_library_model(family, head):
    """``grad_x_input`` with ``full``: ``sum_d (E + P)[d] * df/dz[d]``, ``z`` the summed embedding, from the Hugging
    Face model itself (the gradient w.r.t. ``inputs_embeds`` is the one w.r.t. ``E + P``)."""
    model = make_text(family, head, D)
    ids, mask, options = batch(head)
    rel = explain(model, ids, mask, method="grad_x_input", **options)
    base = model.base_model
    table = base.wpe if family == "gpt2" else base.embeddings.position_embeddings
    for b in range(2):
        n = int(mask[b].sum())
        embeds = model.get_input_embeddings()(ids[b:b + 1, :n]).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds).logits[0]
        row = logits[n - 1] if head == "causal" else logits[int(options["position"][b])]
        (g,) = torch.autograd.grad(row[int(rel.target[b])], embeds)
        full = ((embeds + table.weight[:n]) * g).sum(-1)[0].detach()
        assert torch.allclose(rel.scores[b, :n], full, atol=1e-10 * float(full.abs().max()), rtol=0)


def _pointing_game(scores, evidence, valid):
    return evidence.gather(1, torch.where(valid, scores, -torch.inf).argmax(-1, keepdim=True))[:, 0].double()


def _relevance_mass(scores, evidence, valid):
    pos = torch.where(valid, scores, torch.zeros_like(scores)).clamp(min=0)
    total = pos.sum(-1)
    return torch.where(total > 0, (pos * evidence).sum(-1) / torch.where(total > 0, total, 1), 0.0)


def _best_rank(scores, evidence, valid):
    s = torch.where(valid, scores, -torch.inf)
    ranks = (s[:, None, :] > s[:, :, None]).sum(-1) + 1  # 1 + number of strictly larger scores
    return torch.where(evidence, ranks, ranks.new_full(ranks.shape, 10**6)).amin(-1)


@pytest.mark.parametrize("head", ["causal", "classifier"])
def test_pa_lrp_is_attnlrp_with_full_embeddings_up_to_a_positive_factor_per_sample(head):
    model = make_text("gpt2", head, D)
    ids, mask, _ = padded_batch([9, 7, 6, 8], "right", seed=13)
    valid = mask.bool()
    attn = explain(model, ids, mask, method="attnlrp")
    pa = explain(model, ids, mask, method="pa_lrp")
    ratio = torch.where(valid & (attn.scores.abs() > 1e-12), pa.scores / attn.scores, torch.nan)
    factor = ratio.nanmean(-1)
    assert bool((factor > 0).all())
    assert torch.allclose(pa.scores, attn.scores * factor[:, None], atol=1e-12, rtol=0)
    g = torch.Generator().manual_seed(0)
    evidence = (torch.rand(ids.shape, generator=g) < 0.4) & valid
    evidence[:, 0] = True  # non-empty
    for metric in (_pointing_game, _best_rank):  # orders: exactly the same
        assert torch.equal(metric(pa.scores, evidence, valid), metric(attn.scores, evidence, valid)), metric
    rma = [_relevance_mass(s, evidence, valid) for s in (pa.scores, attn.scores)]  # a ratio: to rounding
    assert torch.allclose(rma[0], rma[1], atol=1e-12, rtol=0) and rma[0].min() < rma[0].max()
    assert torch.equal((pa.scores > 0) & valid, (attn.scores > 0) & valid)  # per-token accuracy's decisions
    partial = explain(model, ids, mask, method="attnlrp", embeddings="partial")
    assert not torch.equal(partial.scores > 0, attn.scores > 0) or not torch.equal(
        partial.scores.argmax(-1), attn.scores.argmax(-1))  # the switch matters on this batch
    eq11 = [explain(model, ids, mask, method=m, aggregation="eq11") for m in ("attnlrp", "pa_lrp")]
    assert torch.allclose(eq11[0].scores, eq11[1].scores, atol=1e-12, rtol=0)


@pytest.mark.parametrize("method", SWITCHED + ["pa_lrp"])
def test_rope_and_alibi_models_do_not_change(method):
    ids = random_ids(2, 7, seed=1)
    for model in (make_llama("gqa", "causal", dtype=D), make_text("bloom", "causal", D, attn="eager")):
        full = explain(model, ids, method=method)
        partial = explain(model, ids, method=method, embeddings="partial")
        assert torch.equal(full.scores, partial.scores) and "embeddings" not in full.extras
        assert embeddings_used(model, method, "full") is None


@pytest.mark.parametrize("method", ["attnlrp", "grad_x_input", "pa_lrp", "integrated_gradients", "gradient_l2"])
def test_vision_models_do_not_change(method):
    model = make_vit("plain", dtype=D)
    x = images(2)
    params = {"n_steps": 3} if method == "integrated_gradients" else None
    full = explain(model, x, method=method, params=params)
    partial = explain(model, x, method=method, params=params, embeddings="partial")
    assert torch.equal(full.scores, partial.scores) and "embeddings" not in full.extras


@pytest.mark.parametrize("method", ["pa_lrp", "pe_only", "integrated_gradients", "gradient_l1", "gradient_l2",
                                    "attn_rollout"])
def test_other_methods_on_learned_positions_do_not_change(method):
    model = make_text("gpt2", "causal", D)
    ids, mask, _ = batch("causal")
    params = {"n_steps": 3} if method == "integrated_gradients" else None
    full = explain(model, ids, mask, method=method, params=params)
    partial = explain(model, ids, mask, method=method, params=params, embeddings="partial")
    assert torch.equal(full.scores, partial.scores) and "embeddings" not in full.extras
    assert embeddings_used(model, method, "partial") is None
    assert embeddings_used(model, "cp_lrp", "partial") == "partial"


def test_an_unknown_embeddings_value_is_a_one_line_error():
    model = make_text("gpt2", "causal", D)
    ids, mask, _ = batch("causal")
    for method in ("attnlrp", "gradient_l2"):
        with pytest.raises(BadInputError, match="unknown embeddings 'token' -- use one of: full, partial"):
            explain(model, ids, mask, method=method, embeddings="token")
