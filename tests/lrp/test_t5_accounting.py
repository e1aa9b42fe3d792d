"""The accounting identity and the relative-bias identities of the T5 twin (issue "Encoder-decoders"; docs/design.md,
docs/positional.md "Relative position bias (T5)"), float64, both variants, padding on both stacks.

* Accounting, AttnLRP rules: ``logit = semantic (encoder + decoder tokens) + positional (both stacks' bias sinks) +
  absorbed`` (what the softmax rules keep: relevance entering minus leaving, eager attention recorder; T5's linear
  layers have no biases). Checked to 1e-10 relative to the logit (measured ~1e-15). CP-LRP sends nothing through
  the attention weights: nothing is absorbed, the bias sinks get nothing, and the token embeddings conserve the
  logit exactly.
* Bias identities: per layer and stack, the positional relevance is ``sum_hij B_hij g_hij`` (``g`` the recorded
  gradient at the scores) under both rules; ``relative_half`` gives the query and key sides equal totals and each
  key half of what ``key`` gives it; the semantic relevance does not depend on the rule.
"""
import pytest
import torch

from palrp_bench.lrp import rules
from palrp_bench.lrp.attribution import attribute
from palrp_bench.lrp.composites import get_composite
from palrp_bench.models.registry import twin_for
from palrp_bench.models.token_inputs import key_padding_mask
from models.tiny_t5 import PAD, VARIANTS, make_t5, padded

D = torch.float64
TOL = 1e-10


def ledger(model, composite="attnlrp", rule="relative_half"):
    """The attribution of one padded batch under ``composite`` on the eager path, with its recorder."""
    twin = twin_for(model)
    ids, mask, _ = padded(model, [9, 6], "left", seed=3)
    dec, dmask, _ = padded(model, [3, 5], "right", seed=5, start=PAD)
    inputs = twin.prepare(ids, mask, dec, dmask)
    rec = rules.AttentionRecorder()
    att = attribute(lambda: twin.forward(inputs, get_composite(composite), attention="eager", recorder=rec,
                                         relative_bias_rule=rule), None, starting_relevance="logit")
    return twin, inputs, att, rec


def totals(att, prefix: str) -> torch.Tensor:
    """``[L, B]`` per-layer positional relevance of one stack (both sides)."""
    sides = [torch.stack(att.relevance[f"{prefix}_{s}"]).sum(-1).sum(-1) for s in ("query", "key")
             if att.relevance.get(f"{prefix}_{s}")]
    return sum(sides)


def side(att, name: str) -> torch.Tensor:
    """``[L, B, T]`` one side of one stack, summed over heads."""
    return torch.stack(att.relevance[name]).sum(2)


@pytest.mark.parametrize("variant", VARIANTS)
def test_accounting_identity_float64(variant):
    twin, inputs, att, rec = ledger(make_t5(variant, D))
    r = att.relevance
    semantic = r["embeds"].sum((1, 2)) + r["decoder_embeds"].sum((1, 2))
    positional = totals(att, "encoder_bias").sum(0) + totals(att, "decoder_bias").sum(0)
    absorbed = rec.absorbed()
    assert positional.abs().min() > 1e-4 and absorbed.abs().min() > 1e-4 and r["decoder_embeds"].abs().max() > 1e-4
    assert ((semantic + positional + absorbed - att.logit).abs() <= TOL * att.logit.abs()).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_explain_accounts_for_the_logit_with_both_stacks(variant):
    """The same ledger through :func:`palrp_bench.explain`'s parts (pa_lrp reads the sinks): encoder + decoder
    semantic + encoder + decoder positional + absorbed = logit."""
    from palrp_bench import explain

    model = make_t5(variant, D)
    twin, inputs, att, rec = ledger(model)
    e = explain(model, inputs.input_ids, inputs.attention_mask, decoder_input_ids=inputs.decoder_input_ids,
                decoder_attention_mask=inputs.decoder_attention_mask, method="pa_lrp")
    parts = (e.semantic.sum(-1) + e.extras["decoder_semantic"].sum(-1) + e.positional.sum((1, 2, 3))
             + e.extras["decoder_positional"].sum((1, 2, 3)))
    assert torch.allclose(e.logit, att.logit, atol=1e-12, rtol=0)
    assert ((parts + rec.absorbed() - e.logit).abs() <= TOL * e.logit.abs()).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_cp_lrp_conserves_on_the_token_embeddings(variant):
    twin, inputs, att, rec = ledger(make_t5(variant, D), composite="cp_lrp")
    r = att.relevance
    assert rec.absorbed().abs().max() == 0
    assert all(t.abs().max() == 0 for name in ("encoder_bias_query", "encoder_bias_key") for t in r[name])
    semantic = r["embeds"].sum((1, 2)) + r["decoder_embeds"].sum((1, 2))
    assert ((semantic - att.logit).abs() <= TOL * att.logit.abs()).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_both_rules_give_each_layer_the_bias_relevance(variant):
    model = make_t5(variant, D)
    twin, inputs, half, rec = ledger(model, rule="relative_half")
    _, _, key, _ = ledger(model, rule="key")
    # per layer: sum B * g from the recorded scores' gradient (eager path), self-attention sites only
    stacks = {"encoder": (twin.encoder, inputs.mask, False), "decoder": (twin.decoder, inputs.decoder_mask, True)}
    expected = {}
    for name, (stack, mask, causal) in stacks.items():
        bias = twin.stack_bias(stack, mask.shape[1], key_padding_mask(mask), causal=causal)
        layers = []
        for (scores, _, valid), site in zip(rec.records, rec.sites):
            if site == name:
                g = torch.where(valid, scores.grad, torch.zeros_like(scores.grad))
                layers.append((torch.where(valid, bias, torch.zeros_like(g)) * g).sum((1, 2, 3)))
        expected[name] = torch.stack(layers)
    assert [s for s in rec.sites if s == "cross"] and len(rec.sites) == len(rec.records)
    for name in stacks:
        prefix = f"{name}_bias"
        assert expected[name].abs().min() > 1e-6, name
        assert torch.allclose(totals(half, prefix), expected[name], atol=TOL * float(expected[name].abs().max()))
        assert torch.allclose(totals(key, prefix), expected[name], atol=TOL * float(expected[name].abs().max()))
        scale = float(side(key, f"{prefix}_key").abs().max())
        # relative_half: query total = key total per layer, and each key gets half of the key rule's share
        q, k = side(half, f"{prefix}_query"), side(half, f"{prefix}_key")
        assert torch.allclose(q.sum(-1), k.sum(-1), atol=TOL * scale)
        assert torch.allclose(2 * k, side(key, f"{prefix}_key"), atol=TOL * scale)
        assert q.abs().max() > 1e-3 * scale  # unlike ALiBi's, the query side is not zero
        assert f"{prefix}_query" not in key.relevance  # the key rule makes the query ones constants
    for name in ("embeds", "decoder_embeds"):
        assert torch.allclose(half.relevance[name], key.relevance[name], atol=1e-14, rtol=0)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("method", ["pa_lrp", "attnlrp"])
def test_the_result_alone_accounts_for_the_logit(variant, method):
    """:func:`palrp_bench.explain` returns what the softmax rules absorbed (``extras["absorbed"]``): with it the
    parts of the result add up to the logit, and it equals the recorder's measurement (relevance entering minus
    leaving each softmax; under ``attnlrp``, which holds the relative bias constant, plus the bias's relevance)."""
    from palrp_bench import explain

    model = make_t5(variant, D)
    twin, inputs, att, rec = ledger(model)
    e = explain(model, inputs.input_ids, inputs.attention_mask, decoder_input_ids=inputs.decoder_input_ids,
                decoder_attention_mask=inputs.decoder_attention_mask, method=method)
    parts = (e.semantic.sum(-1) + e.extras["decoder_semantic"].sum(-1) + e.positional.sum((1, 2, 3))
             + e.extras["decoder_positional"].sum((1, 2, 3)))
    absorbed = e.extras["absorbed"]
    assert absorbed.dtype == D and absorbed.shape == (2,) and (absorbed.abs() > 0.01 * e.logit.abs()).all()
    assert ((parts + absorbed - e.logit).abs() <= TOL * e.logit.abs()).all()
    measured = rec.absorbed()
    if method == "attnlrp":
        assert e.positional.abs().max() == 0
        measured = measured + totals(att, "encoder_bias").sum(0) + totals(att, "decoder_bias").sum(0)
    assert ((absorbed - measured).abs() <= TOL * e.logit.abs()).all()
