"""The GPT-2, OPT, BERT, RoBERTa and BLOOM twins against their libraries: logit parity (float32 and float64, the
library's SDPA and eager attention, our SDPA and eager paths, no / left / right padding), Gradient x Input through
our sinks = plain autograd on the unmodified library model, batch and padding invariance of every method, and
one-line refusals (issue "PA-LRP for the models people use now", tests 1, 2 and 7).

Tolerances: float32 1e-5 absolute on logits of magnitude ~5; float64 1e-10. Two library forwards take the
attention softmax in float32 whatever the model dtype (``F.softmax(..., dtype=torch.float32)``): BLOOM (its only
attention; it also builds the ALiBi tensor in float32) and OPT's eager attention. Their float64 logits and
gradients carry float32 rounding, so those comparisons use 16 float32 ulps relative to the largest value
(measured <= 1e-7 relative), while our own BLOOM paths agree with each other to 1e-12 in float64. In float64 with
left padding these library forwards even return NaN (their fully masked padding rows), so there each sequence run
alone is the reference.
"""
import pytest
import torch
import transformers

from palrp_bench import explain
from palrp_bench.errors import BadInputError, UnsupportedModelError
from palrp_bench.lrp.attribution import attribute
from palrp_bench.lrp.composites import ATTNLRP, GRAD_X_INPUT
from palrp_bench.models.registry import twin_for
from models.families import (CASES, LIBRARY_ATTENTION, POSITIONS, library_position_ids, make_text, padded_batch,
                             random_ids)

F32_FLOOR = 16 * torch.finfo(torch.float32).eps  # BLOOM's float64 library forward (module docstring)
#: every rule set and both positional aggregations (pe_only shares pa_lrp's pass)
METHODS = ("attnlrp", "pa_lrp", "pa_lrp_no_multisink", "grad_x_input", "cp_lrp")


#: library forwards whose attention softmax is float32 whatever the model dtype (module docstring)
FLOAT32_SOFTMAX = {("bloom", "eager"), ("opt", "eager")}


def tolerance(family: str, attn: str, dtype, scale: float) -> float:
    if dtype == torch.float32:
        return 1e-5
    return F32_FLOOR * scale if (family, attn) in FLOAT32_SOFTMAX else 1e-10


def explained_positions(head: str, mask: torch.Tensor) -> torch.Tensor | None:
    """The ``position=`` of a masked LM in these tests: the third real token of each sample."""
    if head != "masked_lm":
        return None
    return (mask.cumsum(-1) == 3).long().argmax(-1)


def library_logits(model, family: str, head: str, ids, mask, types=None):
    """The library's logits: every position (causal / masked LM) or pooled (classifier). A first-token
    classifier (BERT, RoBERTa) pools position 0 in the library; with left padding the twin pools the first real
    token, so the library's encoder output is read there and sent through the library's own pooler and head."""
    extra = library_position_ids(family, mask)
    if types is not None:
        extra["token_type_ids"] = types
    with torch.no_grad():
        if head == "classifier" and family in ("bert", "roberta"):
            hidden = model.base_model(input_ids=ids, attention_mask=mask, **extra).last_hidden_state
            first = hidden[torch.arange(ids.shape[0]), (mask * (ids.shape[1] - torch.arange(ids.shape[1]))).argmax(-1)]
            if family == "bert":
                return model.classifier(model.bert.pooler(first[:, None]))
            return model.classifier(first[:, None])
        return model(input_ids=ids, attention_mask=mask, **extra).logits


def unpadded_library_logits(model, family, head, ids, mask):
    """The library's logits of each sequence run alone, laid out like the padded batch."""
    rows = []
    for i in range(ids.shape[0]):
        real = mask[i].bool()
        one = library_logits(model, family, head, ids[i][real][None], torch.ones_like(ids[i][real][None]))[0]
        if head == "classifier":
            rows.append(one)
        else:
            full = one.new_full((ids.shape[1], one.shape[-1]), float("nan"))
            full[real] = one
            rows.append(full)
    return torch.stack(rows)


# ---------------------------------------------------------------------------------------------------- 1. parity
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("family,head", CASES)
def test_logits_match_the_library(family, head, dtype):
    for attn in LIBRARY_ATTENTION.get(family, ("sdpa", "eager")):
        model = make_text(family, head, dtype, attn=attn)
        twin = twin_for(model)
        for side in ("none", "left", "right"):
            ids, mask, _ = padded_batch([9, 6, 9] if side != "none" else [9, 9, 9], "right" if side == "none"
                                        else side, seed=3)
            types = None
            if family == "bert":
                types = (torch.arange(9) >= 5).long().expand(3, -1) * mask
            ref = library_logits(model, family, head, ids, mask, types)
            if (family, attn) in FLOAT32_SOFTMAX and dtype == torch.float64 and side == "left":
                # the library's fully masked padding rows become NaN (float64 minimum -> -inf in its float32
                # softmax) and reach the real rows as NaN * 0: compare with each sequence run unpadded instead
                ref = unpadded_library_logits(model, family, head, ids, mask)
            inputs = twin.prepare({"input_ids": ids, "attention_mask": mask,
                                   **({"token_type_ids": types} if types is not None else {})})
            index = twin.resolve_position(inputs, explained_positions(head, mask))
            for attention in ("sdpa", "eager"):
                with torch.no_grad():
                    out = twin.forward(inputs, index, ATTNLRP, attention=attention, return_all_logits=True)
                if head == "classifier":
                    ours, theirs = out.logits, ref
                else:  # every real position (the library's padding rows may be NaN: fully masked in float32)
                    ours, theirs = out.all_logits[mask.bool()], ref[mask.bool()]
                err = float((ours - theirs).abs().max())
                assert err <= tolerance(family, attn, dtype, float(theirs.abs().max())), (attn, side, attention, err)


def test_bloom_paths_agree_in_float64():
    """Our BLOOM twin is float64 throughout: SDPA and eager, both ALiBi rules, give the same logits to 1e-12."""
    model = make_text("bloom", "causal", torch.float64, attn="eager")
    twin = twin_for(model)
    ids, mask, _ = padded_batch([9, 6], "left", seed=1)
    inputs = twin.prepare(ids, mask)
    outs = [twin.forward(inputs, inputs.explained_index, ATTNLRP, attention=a, alibi_rule=r).logits
            for a in ("sdpa", "eager") for r in ("paper", "relative_half")]
    for other in outs[1:]:
        assert (other - outs[0]).abs().max() < 1e-12


@pytest.mark.parametrize("family", ["gpt2", "opt", "bert", "roberta"])
def test_sequences_longer_than_the_position_table_are_refused(family):
    head = "causal" if family in ("gpt2", "opt") else "classifier"
    model = make_text(family, head, torch.float32)
    with pytest.raises(BadInputError, match=f"longer than the model context \\({POSITIONS}\\)") as err:
        explain(model, random_ids(1, POSITIONS + 1), method="pa_lrp")
    assert "\n" not in str(err.value)
    explain(model, random_ids(1, POSITIONS), method="pa_lrp")  # the full table is fine


def test_bloom_has_no_window():
    """ALiBi has no position table: longer inputs than any tiny test uses run (and stay finite)."""
    model = make_text("bloom", "causal", torch.float32, attn="eager")
    e = explain(model, random_ids(1, 3 * POSITIONS), method="pa_lrp")
    assert torch.isfinite(e.scores).all()


# ------------------------------------------------------------------------------------- 2. Gradient x Input
@pytest.mark.parametrize("family,head", CASES)
def test_gradient_x_input_equals_autograd_on_the_library_model(family, head):
    """float64: the elementwise relevance of our sinks under ``grad_x_input`` equals ``x * grad`` of the unmodified
    library model (word embeddings; position rows and token types through the gradient at their sum; BLOOM's ALiBi
    tensor, whose relevance is the paper rule's key side)."""
    model = make_text(family, head, torch.float64, attn=LIBRARY_ATTENTION.get(family, ("sdpa",))[0])
    twin = twin_for(model)
    ids, mask, _ = padded_batch([8, 8], "right", seed=5)
    types = (torch.arange(8) >= 4).long().expand(2, -1).contiguous() if family == "bert" else None
    inputs = twin.prepare({"input_ids": ids, "attention_mask": mask,
                           **({"token_type_ids": types} if types is not None else {})})
    position = explained_positions(head, mask)
    ours = attribute(lambda: twin.run(inputs, GRAD_X_INPUT, positional_sinks=True, position=position), None,
                     starting_relevance="logit")

    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    extra = library_position_ids(family, mask)
    if types is not None:
        extra["token_type_ids"] = types
    alibi = {}
    if family == "bloom":
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor
        leaf = build_alibi_tensor(mask, model.config.n_head, torch.float64).requires_grad_(True)
        model.transformer.build_alibi_tensor = lambda *args, **kwargs: leaf  # this model object only
        alibi["leaf"] = leaf
    logits = model(inputs_embeds=embeds, attention_mask=mask, **extra).logits
    if head == "causal":
        logits = logits[:, -1]
    elif head == "masked_lm":
        logits = logits[torch.arange(2), position]
    explained = logits.gather(1, ours.target[:, None])[:, 0]
    explained.sum().backward()
    grad = embeds.grad
    scale = float(ours.relevance["embeds"].abs().max())
    tol = F32_FLOOR * scale if family == "bloom" else 1e-10
    assert (ours.relevance["embeds"] - embeds.detach() * grad).abs().max() <= tol
    if "positions" in ours.relevance:
        rows = ours.forward.other_sinks["positions"].detach()
        assert (ours.relevance["positions"] - rows * grad).abs().max() <= tol
    if "token_type" in ours.relevance:
        rows = ours.forward.other_sinks["token_type"].detach()
        assert (ours.relevance["token_type"] - rows * grad).abs().max() <= tol
    if alibi:
        leaf = alibi["leaf"]
        theirs = (leaf.detach() * leaf.grad).view(2, model.config.n_head, -1).sum(1)   # [B, T]
        key = torch.stack(ours.relevance["alibi_key_pos"]).sum((0, 2))
        query = torch.stack(ours.relevance["alibi_query_pos"]).sum((0, 2))
        assert theirs.abs().max() > 1e-6
        assert (key - theirs).abs().max() <= F32_FLOOR * float(theirs.abs().max())
        assert query.abs().max() < 1e-12  # softmax ignores the row constant: no query-side relevance


# ------------------------------------------------------------------------------- 7. batch / padding invariance
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family,head", CASES)
def test_batch_and_padding_invariance(family, head, side):
    model = make_text(family, head, torch.float64, attn=LIBRARY_ATTENTION.get(family, ("sdpa",))[0])
    multi_sink = twin_for(model).positional.multi_sink
    ids, mask, seqs = padded_batch([7, 11, 4], side, seed=7)
    position = explained_positions(head, mask)
    for method in METHODS:
        if method == "pa_lrp_no_multisink" and not multi_sink:
            continue
        batched = explain(model, ids, attention_mask=mask, method=method, position=position)
        for i, s in enumerate(seqs):
            single = explain(model, s[None], method=method,
                             position=None if position is None else int((mask[i, :position[i]]).sum()))
            real = mask[i].bool()
            for part in ("scores", "semantic"):
                assert torch.allclose(getattr(batched, part)[i][real], getattr(single, part)[0], atol=1e-9), \
                    (method, part, i)
            assert torch.allclose(batched.positional[i][..., real], single.positional[0], atol=1e-9), (method, i)
            assert torch.allclose(batched.logit[i], single.logit[0], atol=1e-9)
            assert batched.scores[i][~real].abs().max() == 0 if (~real).any() else True


# ----------------------------------------------------------------------------------------- 7. refusals
@pytest.mark.parametrize("family,head,overrides,match", [
    ("gpt2", "causal", dict(add_cross_attention=True), "cross-attention"),
    ("bert", "masked_lm", dict(is_decoder=True), "decoder configurations"),
    ("bloom", "causal", dict(pretraining_tp=2, slow_but_exact=True), "slow_but_exact"),
])
def test_unsupported_configurations_are_refused_in_one_line(family, head, overrides, match):
    model = make_text(family, head, torch.float32, attn=LIBRARY_ATTENTION.get(family, ("sdpa",))[0], **overrides)
    with pytest.raises(UnsupportedModelError, match=match) as err:
        explain(model, random_ids(1, 5), method="pa_lrp")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("family", ["opt", "bloom"])
def test_non_causal_read_out_is_refused_where_the_library_needs_a_2d_mask(family):
    from palrp_bench.evaluation.procedures.nlp_perturbation import readout_logits

    model = make_text(family, "causal", torch.float32, attn="eager")
    with pytest.raises(UnsupportedModelError, match="non-causal") as err:
        readout_logits(model, random_ids(2, 5), task="mcqa", causal=False)
    assert "\n" not in str(err.value)


def test_other_heads_are_refused():
    cfg = transformers.GPT2Config(vocab_size=96, n_positions=16, n_embd=32, n_layer=1, n_head=4)
    with pytest.raises(UnsupportedModelError, match="no LRP twin"):
        explain(transformers.GPT2Model(cfg).eval(), random_ids(1, 5), method="pa_lrp")


@pytest.mark.parametrize("family,head", [("gpt2", "causal"), ("opt", "classifier"), ("bert", "classifier"),
                                         ("roberta", "masked_lm")])
def test_multisink_ablation_is_refused_for_a_single_position_sink(family, head):
    model = make_text(family, head, torch.float32)
    with pytest.raises(BadInputError, match="single sink") as err:
        explain(model, random_ids(1, 6), method="pa_lrp_no_multisink", position=2 if head == "masked_lm" else None)
    assert "\n" not in str(err.value)


def test_bad_inputs_and_options_are_refused_in_one_line():
    mlm = make_text("bert", "masked_lm", torch.float32)
    causal = make_text("bloom", "causal", torch.float32, attn="eager")
    ids = random_ids(2, 6)
    cases = [
        (mlm, dict(), "position= was not given"),
        (mlm, dict(position=6), "position must be"),
        (mlm, dict(position=1, attention_mask=torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])), "padding token"),
        (mlm, dict(position=1, token_type_ids=torch.full((2, 6), 2)), "token type out of range"),
        (causal, dict(position=1), "only defined for masked LMs"),
        (causal, dict(alibi_rule="half"), "unknown alibi_rule"),
        (causal, dict(rope_theta=1.0), "takes no option rope_theta"),
        (causal, dict(attention="flash"), "unknown attention"),
        (causal, dict(token_type_ids=torch.ones(2, 6, dtype=torch.long)), "has no token types"),  # zeros: ignored
    ]
    for model, kwargs, match in cases:
        inputs = ids
        if "token_type_ids" in kwargs:
            inputs = {"input_ids": ids, "token_type_ids": kwargs.pop("token_type_ids")}
        with pytest.raises(BadInputError, match=match) as err:
            explain(model, inputs, method="pa_lrp", **kwargs)
        assert "\n" not in str(err.value)


def test_masked_lm_explains_the_mask_token():
    """``position=`` selects the explained token; without it, the config's ``mask_token_id`` does."""
    model = make_text("bert", "masked_lm", torch.float64)
    ids = random_ids(2, 7)
    ids[0, 3] = ids[1, 5] = 3
    by_position = explain(model, ids, method="pa_lrp", position=torch.tensor([3, 5]))
    model.config.mask_token_id = 3
    by_mask = explain(model, ids, method="pa_lrp")
    assert torch.equal(by_mask.extras["explained_index"], torch.tensor([3, 5]))
    assert torch.allclose(by_mask.scores, by_position.scores, atol=1e-12)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[torch.arange(2), torch.tensor([3, 5])]
    assert torch.equal(by_mask.target, logits.argmax(-1))
    assert torch.allclose(by_mask.logit, logits.max(-1).values, atol=1e-10)


def test_twin_leaves_the_model_untouched():
    for family, head in (("gpt2", "classifier"), ("bert", "masked_lm"), ("bloom", "causal")):
        model = make_text(family, head, torch.float32, attn="eager")
        before = {k: v.clone() for k, v in model.state_dict().items()}
        explain(model, random_ids(2, 6), method="pa_lrp", position=2 if head == "masked_lm" else None)
        assert all(p.grad is None for p in model.parameters())
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
