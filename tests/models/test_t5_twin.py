"""The T5 twin against the library's ``T5ForConditionalGeneration`` (issue "Encoder-decoders"; docs/engine.md,
"T5"): logit parity with padding on both stacks (float32; float64 once the library's float32 norm statistics are
emulated away), Gradient x Input through our sinks = plain autograd on the unmodified library model (token
embeddings of both stacks and the relative position bias), batch and padding invariance of every method, and
one-line refusals. Both variants: T5 v1.1 / Flan-T5 (gated GELU, untied head) and the original T5 (ReLU, tied head
with the ``d_model ** -0.5`` rescale).

Tolerances: float32 32 epsilons relative to the largest logit (magnitude ~4 original, ~20 v1.1: 1.5e-5 / 7.6e-5;
measured <= 8.1e-6, i.e. 4e-7 = 3.4 epsilons relative; the sums of the two stacks' matmuls round in another order
on every kernel set); float64 1e-10 (measured <= 1.8e-14) with the library's ``T5LayerNorm`` statistics in float64
(:func:`models.tiny_t5.float64_library_norm`; without it the float64 library forward carries float32 rounding,
measured ~3e-6).
"""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.errors import BadInputError, UnsupportedModelError
from palrp_bench.lrp.attribution import attribute
from palrp_bench.lrp.composites import ATTNLRP, GRAD_X_INPUT
from palrp_bench.models.registry import twin_for
from models.tiny_t5 import PAD, VARIANTS, float64_library_norm, make_t5, padded

F32_REL = 32 * torch.finfo(torch.float32).eps
F64_TOL = 1e-10
METHODS = ("attnlrp", "cp_lrp", "pa_lrp", "pe_only", "pa_lrp_no_multisink", "grad_x_input")


def batch(model, enc_side="right", dec_side="right"):
    """Encoder lengths 9 and 6, decoder lengths 3 and 5 (start token first), padded on the given sides."""
    ids, mask, _ = padded(model, [9, 6], enc_side, seed=3)
    dec, dmask, _ = padded(model, [3, 5], dec_side, seed=5, start=PAD)
    return ids, mask, dec, dmask


def library_logits(model, ids, mask, dec, dmask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dmask).logits


def twin_logits(model, ids, mask, dec, dmask, attention):
    twin = twin_for(model)
    inputs = twin.prepare(ids, mask, dec, dmask)
    with torch.no_grad():
        return twin.forward(inputs, ATTNLRP, attention=attention, return_all_logits=True).all_logits


# ------------------------------------------------------------------------------------------------ 1. parity
@pytest.mark.parametrize("sides", [("right", "right"), ("left", "left"), ("right", "left")])
@pytest.mark.parametrize("library", ["sdpa", "eager"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_the_library_float32(variant, library, sides):
    model = make_t5(variant, torch.float32, attn=library)
    ids, mask, dec, dmask = batch(model, *sides)
    theirs = library_logits(model, ids, mask, dec, dmask)
    real = dmask.bool()
    assert theirs[real].abs().max() > 0.5
    for attention in ("sdpa", "eager"):
        ours = twin_logits(model, ids, mask, dec, dmask, attention)
        assert (ours - theirs)[real].abs().max() <= F32_REL * theirs[real].abs().max(), attention


@pytest.mark.parametrize("library", ["sdpa", "eager"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_match_the_library_float64(monkeypatch, variant, library):
    float64_library_norm(monkeypatch)
    model = make_t5(variant, torch.float64, attn=library)
    ids, mask, dec, dmask = batch(model, "left", "right")
    theirs = library_logits(model, ids, mask, dec, dmask)
    real = dmask.bool()
    for attention in ("sdpa", "eager"):
        ours = twin_logits(model, ids, mask, dec, dmask, attention)
        assert (ours - theirs)[real].abs().max() <= F64_TOL, attention


@pytest.mark.parametrize("variant", VARIANTS)
def test_bfloat16_with_float32_wo_follows_the_library(variant):
    """Flan-T5-XL runs in bfloat16 with the feed-forward output projections ``wo`` kept in float32 (the library's
    ``_keep_in_fp32_modules``): the residual stream turns float32 after the first block in both, and the logits agree
    to 2 bfloat16 epsilons relative to the largest logit (measured: one bfloat16 ulp, 0.11 at 21.6); every T5
    method gives finite relevance."""
    model = make_t5(variant, torch.float32).to(torch.bfloat16)
    for name, module in model.named_modules():
        if name.endswith(".wo"):
            module.float()
    ids, mask, dec, dmask = batch(model, "right", "left")
    theirs = library_logits(model, ids, mask, dec, dmask).float()
    ours = twin_logits(model, ids, mask, dec, dmask, "sdpa").float()
    real = dmask.bool()
    scale = float(theirs[real].abs().max())
    assert (ours - theirs)[real].abs().max() <= 2 * torch.finfo(torch.bfloat16).eps * scale
    for method in METHODS:
        e = explain(model, ids, mask, decoder_input_ids=dec, decoder_attention_mask=dmask, method=method)
        assert e.scores.isfinite().all() and e.extras["decoder_scores"].isfinite().all(), method


def test_the_variants_differ_where_the_issue_says():
    v11, original = twin_for(make_t5("tiny_t5_random")), twin_for(make_t5("tiny_t5_original"))
    assert not v11.scale_outputs and original.scale_outputs
    assert hasattr(v11.decoder.block[0].layer[-1].DenseReluDense, "wi_0")
    assert not hasattr(original.decoder.block[0].layer[-1].DenseReluDense, "wi_0")


# ------------------------------------------------------------------------------------- 2. Gradient x Input
@pytest.mark.parametrize("variant", VARIANTS)
def test_gradient_x_input_equals_autograd_on_the_library_model(monkeypatch, variant):
    """float64: ``grad_x_input`` relevance of the encoder and decoder token embeddings equals ``x * grad`` of the
    unmodified library model, and the relative-bias sinks' key sides hold ``B * grad_B`` of the library's bias
    tensor of each stack summed over queries (its query sides the same summed over keys)."""
    float64_library_norm(monkeypatch)
    model = make_t5(variant, torch.float64, attn="eager")
    twin = twin_for(model)
    ids, mask, dec, dmask = batch(model, "right", "right")
    inputs = twin.prepare(ids, mask, dec, dmask)
    ours = attribute(lambda: twin.run(inputs, GRAD_X_INPUT, positional_sinks=True), None,
                     starting_relevance="logit")

    leaves = {}
    for stack_name, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        attn = stack.block[0].layer[0].SelfAttention
        original = attn.compute_bias

        def compute_bias(*args, _original=original, _name=stack_name, **kwargs):
            leaves[_name] = _original(*args, **kwargs).detach().requires_grad_(True)
            return leaves[_name]

        monkeypatch.setattr(attn, "compute_bias", compute_bias)  # this model object only
    embeds = model.encoder.embed_tokens(ids).detach().requires_grad_(True)
    dembeds = model.decoder.embed_tokens(dec).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds, attention_mask=mask, decoder_inputs_embeds=dembeds,
                   decoder_attention_mask=dmask).logits
    logits = logits[torch.arange(2), inputs.explained_index]
    logits.gather(1, ours.target[:, None]).sum().backward()
    scale = float(ours.relevance["embeds"].abs().max())
    assert (ours.relevance["embeds"] - embeds.detach() * embeds.grad).abs().max() <= F64_TOL * scale
    assert (ours.relevance["decoder_embeds"] - dembeds.detach() * dembeds.grad).abs().max() <= F64_TOL * scale
    for stack_name in ("encoder", "decoder"):
        leaf = leaves[stack_name]
        relevance = leaf.detach() * leaf.grad                                   # [1, H, T, T], batch summed
        key = torch.stack(ours.relevance[f"{stack_name}_bias_key"]).sum((0, 1))      # [H, T]
        query = torch.stack(ours.relevance[f"{stack_name}_bias_query"]).sum((0, 1))
        assert relevance.abs().max() > 1e-6
        assert (key - relevance[0].sum(-2)).abs().max() <= F64_TOL * scale, stack_name
        assert (query - relevance[0].sum(-1)).abs().max() <= F64_TOL * scale, stack_name


# ------------------------------------------------------------------------------- 3. batch / padding invariance
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_batch_and_padding_invariance(variant, method):
    """Each sample explained alone (no padding) = the same sample in a batch padded left (encoder) and right
    (decoder), and the reverse sides for the second half; scores, parts and the decoder's share."""
    model = make_t5(variant, torch.float64)
    for sides in (("left", "right"), ("right", "left")):
        ids, mask, dec, dmask = batch(model, *sides)
        e = explain(model, ids, mask, decoder_input_ids=dec, decoder_attention_mask=dmask, method=method)
        for i in range(2):
            enc_real, dec_real = mask[i].bool(), dmask[i].bool()
            alone = explain(model, ids[i:i + 1, enc_real], decoder_input_ids=dec[i:i + 1, dec_real], method=method)
            assert int(alone.target[0]) == int(e.target[i])
            assert torch.allclose(e.logit[i], alone.logit[0], atol=1e-10, rtol=0)
            for ours, theirs, real in ((e.scores, alone.scores, enc_real), (e.semantic, alone.semantic, enc_real),
                                       (e.extras["decoder_scores"], alone.extras["decoder_scores"], dec_real)):
                assert torch.allclose(ours[i, real], theirs[0], atol=1e-10, rtol=0), (method, sides)
                assert ours[i, ~real].abs().max() == 0 if (~real).any() else True
            assert torch.allclose(e.positional[i][..., enc_real], alone.positional[0], atol=1e-10, rtol=0)


def test_explain_returns_encoder_tokens_and_the_decoders_apart():
    model = make_t5("tiny_t5_random", torch.float64)
    ids, mask, dec, dmask = batch(model)
    e = explain(model, ids, mask, decoder_input_ids=dec, decoder_attention_mask=dmask, method="pa_lrp")
    layers = (len(model.encoder.block), len(model.decoder.block))
    assert e.scores.shape == e.semantic.shape == ids.shape
    assert e.positional.shape == (2, layers[0], 1, ids.shape[1])
    assert e.extras["decoder_scores"].shape == e.extras["decoder_semantic"].shape == dec.shape
    assert e.extras["decoder_positional"].shape == (2, layers[1], 1, dec.shape[1])
    assert e.extras["relative_bias_query"].shape == (2, layers[0], ids.shape[1])
    assert torch.equal(e.extras["explained_index"], torch.tensor([2, 4]))
    # the positional part is the two sides' sum
    assert torch.allclose(e.positional[:, :, 0], e.extras["relative_bias_query"] + e.extras["relative_bias_key"])
    assert e.positional.abs().max() > 1e-6 and e.extras["decoder_positional"].abs().max() > 1e-6
    # one scale over both stacks: PA-LRP's largest |score| over encoder and decoder tokens is 1
    top = torch.maximum(e.scores.abs().amax(-1), e.extras["decoder_scores"].abs().amax(-1))
    assert torch.allclose(top, torch.ones(2, dtype=top.dtype))


def test_attnlrp_reads_no_positional_sinks_and_keeps_the_same_semantic_relevance():
    """The bias enters under the epsilon rule: making it a sink changes no other relevance, so AttnLRP (no sinks
    read: their gradient costs a [B, H, T, T] tensor per layer) and PA-LRP share the semantic part."""
    model = make_t5("tiny_t5_random", torch.float64)
    ids, mask, dec, dmask = batch(model)
    a = explain(model, ids, mask, decoder_input_ids=dec, decoder_attention_mask=dmask, method="attnlrp")
    p = explain(model, ids, mask, decoder_input_ids=dec, decoder_attention_mask=dmask, method="pa_lrp")
    assert a.positional.abs().max() == 0 and p.positional.abs().max() > 0
    assert torch.allclose(a.semantic, p.semantic, atol=1e-12, rtol=0)
    assert torch.allclose(a.extras["decoder_semantic"], p.extras["decoder_semantic"], atol=1e-12, rtol=0)


# ------------------------------------------------------------------------------------------------ 4. refusals
def test_bad_inputs_and_options_are_refused_in_one_line():
    model = make_t5("tiny_t5_random", torch.float32)
    ids, mask, dec, dmask = batch(model)
    cases = [
        (dict(), "decoder_input_ids is required"),
        (dict(decoder_input_ids=dec[:1]), "decoder_input_ids has 1 rows"),
        (dict(decoder_input_ids=dec + 1000), "out of range .* in decoder_input_ids"),
        (dict(decoder_input_ids=dec, decoder_attention_mask=dmask * 2), "decoder_attention_mask must contain"),
        (dict(decoder_input_ids=dec, relative_bias_rule="paper"), "unknown relative_bias_rule"),
        (dict(decoder_input_ids=dec, alibi_rule="paper"), "takes no option alibi_rule"),
        (dict(decoder_input_ids=dec, method="alti_logit"), "does not support encoder-decoders"),
        (dict(decoder_input_ids=dec, method="alti"), "does not support encoder-decoders"),
    ]
    for kwargs, match in cases:
        kwargs = {"method": "pa_lrp", **kwargs}
        with pytest.raises(BadInputError, match=match) as err:
            explain(model, ids, mask, **kwargs)
        assert "\n" not in str(err.value)


def test_decoder_inputs_are_refused_for_other_models():
    from models.families import make_text

    model = make_text("gpt2", "causal", torch.float32)
    with pytest.raises(BadInputError, match="not an encoder-decoder"):
        explain(model, torch.tensor([[5, 6, 7]]), decoder_input_ids=torch.tensor([[1]]))


def test_float16_and_other_t5_heads_are_refused():
    model = make_t5("tiny_t5_random", torch.float16)
    with pytest.raises(UnsupportedModelError, match="float16"):
        twin_for(model)
    import transformers

    encoder_only = transformers.T5EncoderModel(make_t5("tiny_t5_random").config)
    with pytest.raises(UnsupportedModelError, match="no LRP twin"):
        twin_for(encoder_only)


def test_twin_leaves_the_model_untouched():
    model = make_t5("tiny_t5_random", torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ids, mask, dec, dmask = batch(model)
    explain(model, ids, mask, decoder_input_ids=dec, decoder_attention_mask=dmask, method="pa_lrp")
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.parameters())


def test_the_shipped_configs_load_offline_and_name_their_checkpoints():
    from palrp_bench import catalog
    from palrp_bench.models.loading import load_model, loader_spec

    for name, gated in (("tiny_t5_random", True), ("tiny_t5_original", False)):
        cfg = catalog.load("model", name)
        assert loader_spec(cfg.loader).offline and cfg.kind.value == "seq2seq"
        model, tokenizer = load_model(cfg, "cpu")
        assert type(model).__name__ == "T5ForConditionalGeneration" and not model.training
        assert model.config.is_gated_act == gated and len(tokenizer) <= model.config.vocab_size
        again, _ = load_model(cfg, "cpu")  # seeded: the same weights every time
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    for name, dtype in (("flan_t5_base", "float32"), ("flan_t5_xl", "bfloat16")):
        cfg = catalog.load("model", name)
        assert cfg.loader == "hf" and cfg.kind.value == "seq2seq" and cfg.dtype.value == dtype
        assert cfg.source.startswith("google/flan-t5-")
