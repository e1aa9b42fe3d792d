"""Every RoPE decoder family reproduces its library model (docs/design.md section 5, parity), gives the library's own
Gradient x Input, explains batches exactly as single samples, and refuses what it does not reproduce.

Families and their tiny configs: tests/models/tiny_families.py (sliding windows shorter than the sequences, biases,
q/k norms, soft-capping, two RoPE tables, fused projections, partial rotary, LongRoPE, parallel residual).

Tolerances. float32: 1e-5 absolute on logits of magnitude ~1-5 (measured <= 2.5e-6). float64: transformers computes
RMSNorm statistics (Gemma: the whole norm) and the eager softmax in float32 even for a float64 model, while the twin
keeps float64; with those float32 steps emulated in the twin's rules (tests/reference/library_numerics.py) the
twin equals the library to 1e-10 (measured <= 2.7e-15), and without the emulation to float32 rounding (measured
<= 2.3e-6; GPT-NeoX with SDPA is float64 end to end in the library: 2.7e-15 as is).
"""
from dataclasses import replace

import pytest
import torch
import transformers

from palrp_bench import explain
from palrp_bench.errors import UnsupportedModelError
from palrp_bench.lrp.composites import ATTNLRP, GRAD_X_INPUT
from palrp_bench.models.decoder import DECODER_SPECS, DecoderTwin, spec_for
from palrp_bench.models.registry import twin_for
from palrp_bench.models.vlm import VisionLanguageTwin
from models.tiny_families import (FAMILIES, MOE_FAMILIES, VOCAB, WINDOW, family_config, make_model, random_ids,
                                  variants)
from reference.library_numerics import emulate_library_float32_steps

CASES = [(f, v) for f in FAMILIES for v in variants(f)]
F32_TOL = 1e-5
F64_TOL = 1e-10


def twin_logits(model, ids, mask=None, attention="sdpa", composite=ATTNLRP):
    twin = DecoderTwin(model)
    mask_ = mask if mask is not None else torch.ones_like(ids)
    out = twin.forward(twin.embed(ids), mask, twin.last_index(ids, mask), composite, positional_sinks=True,
                       attention=attention, return_all_logits=True)
    return out, twin.position_ids(mask_)


def library_logits(model, ids, mask=None, position_ids=None):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits


def max_diff(out, ref, kind, real=None):
    if kind == "classifier":
        return float((out.logits.detach() - ref).abs().max())
    ours = out.all_logits.detach()
    if real is None:
        return float((ours - ref).abs().max())
    return float((ours[real] - ref[real]).abs().max())


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family,variant", CASES)
def test_float32_logits_match_the_library(family, variant, kind, attention):
    model = make_model(family, kind, variant, attn=attention)
    ids = random_ids(2, 11)  # longer than every sliding window (4, 6) and than LongRoPE's original context (8)
    out, _ = twin_logits(model, ids, attention=attention)
    ref = library_logits(model, ids)
    assert max_diff(out, ref, kind) < F32_TOL
    if kind == "causal":
        assert (out.logits - ref[:, -1]).abs().max() < F32_TOL


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_float32_logits_match_with_padding(family, kind, side):
    model = make_model(family, kind)
    ids = random_ids(2, 12)
    mask = torch.ones_like(ids)
    pad = slice(0, 4) if side == "left" else slice(8, 12)
    mask[0, pad] = 0
    ids[0, pad] = 2
    out, pos = twin_logits(model, ids, mask)
    ref = library_logits(model, ids, mask, pos)
    assert max_diff(out, ref, kind, real=mask.bool()) < F32_TOL


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_float64_logits_match_the_library(monkeypatch, family, attention):
    model = make_model(family, "causal", dtype=torch.float64, attn=attention)
    ids = random_ids(2, 11)
    ref = library_logits(model, ids)
    plain, _ = twin_logits(model, ids, attention=attention)
    assert max_diff(plain, ref, "causal") < F32_TOL  # the library's own float32 steps, nothing else
    emulate_library_float32_steps(monkeypatch)
    emulated, _ = twin_logits(model, ids, attention=attention)
    assert max_diff(emulated, ref, "causal") < F64_TOL


@pytest.mark.parametrize("family,variant", [(f, v) for f, v in CASES if getattr(family_config(f, v), "sliding_window", None)])
def test_the_sliding_window_is_exercised(family, variant):
    """Parity above is only evidence for the window if the window changes the logits of these sequences."""
    model = make_model(family, "causal", variant)
    ids = random_ids(2, 11)
    out, _ = twin_logits(model, ids)
    model.config.sliding_window = 64  # now the library attends to everything
    assert (out.all_logits - library_logits(model, ids)).abs().max() > 1e-3


def _sparse_routers(model):
    twin = DecoderTwin(model)
    blocks = [getattr(layer, twin.spec.mlp_block) for layer in twin.layers]
    return [getattr(b, twin.spec.moe.router) for b in blocks if twin.spec.moe.is_sparse(b)]


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_the_routing_is_exercised(family):
    """Parity above is evidence for the router only if its choice changes the logits: the library choosing one
    expert per token instead of two does; so do DeepSeek's selection bias and its limit to the best group."""
    model = make_model(family, "causal")
    ids = random_ids(2, 11)
    out, _ = twin_logits(model, ids)
    changes = [("top_k", 1)]
    if family == "deepseek_v3":
        changes += [("e_score_correction_bias", None), ("topk_group", model.config.n_group)]
    for name, value in changes:
        changed = make_model(family, "causal")
        for router in _sparse_routers(changed):
            if value is None:
                getattr(router, name).zero_()
            else:
                setattr(router, name, value)
        assert (out.all_logits - library_logits(changed, ids)).abs().max() > 1e-3, name


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gradient_x_input_equals_autograd_on_the_library_model(monkeypatch, family, kind):
    """``grad_x_input`` through the twin's sinks = ``inputs_embeds * grad`` of the unmodified library model."""
    emulate_library_float32_steps(monkeypatch)
    model = make_model(family, kind, dtype=torch.float64)
    ids = random_ids(2, 10)
    ours = explain(model, ids, method="grad_x_input")
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds).logits
    explained = logits[:, -1] if kind == "causal" else logits
    grad, = torch.autograd.grad(explained.gather(1, ours.target[:, None]).sum(), embeds)
    theirs = (embeds * grad).sum(-1).detach()
    assert ours.semantic.dtype == torch.float64
    assert (ours.semantic - theirs).abs().max() < F64_TOL
    assert theirs.abs().max() > 1e-3


def padded_batch(seqs, side):
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), 2)
    mask = torch.zeros(len(seqs), t, dtype=torch.long)
    for i, s in enumerate(seqs):
        sl = slice(t - len(s), t) if side == "left" else slice(0, len(s))
        ids[i, sl] = s
        mask[i, sl] = 1
    return ids, mask


def assert_batch_equals_singles(model, seqs, side, method):
    ids, mask = padded_batch(seqs, side)
    batched = explain(model, ids, attention_mask=mask, method=method)
    for i, s in enumerate(seqs):
        single = explain(model, s[None], method=method)
        real = mask[i].bool()
        assert torch.allclose(batched.scores[i][real], single.scores[0], atol=2e-5, rtol=1e-4)
        assert torch.allclose(batched.positional[i][..., real], single.positional[0], atol=2e-5, rtol=1e-4)
        assert torch.allclose(batched.logit[i], single.logit[0], atol=1e-5)
        assert not batched.scores[i][~real].any()


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp", "pa_lrp_no_multisink", "grad_x_input", "cp_lrp"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_batch_and_padding_invariance(family, side, method):
    """Lengths around the sliding windows (4, 6): windows slide over indices, equal to positions among real tokens."""
    model = make_model(family, "causal")
    assert_batch_equals_singles(model, [random_ids(1, n, seed=i)[0] for i, n in enumerate([7, 11, 4])], side, method)


def test_longrope_is_batch_invariant_within_one_regime():
    """LongRoPE picks its factors from the longest position of the whole batch (the library's rotary module does),
    so a batch mixing lengths on both sides of the original context (8) is not per-sample; within one regime it is."""
    model = make_model("phi3", "causal", "longrope")
    assert_batch_equals_singles(model, [random_ids(1, n, seed=i)[0] for i, n in enumerate([9, 12, 10])], "left",
                                "pa_lrp")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_sdpa_and_eager_give_the_same_relevance(family):
    model = make_model(family, "causal", dtype=torch.float64)
    ids = random_ids(2, 10)
    # exact rules: the official stabilisers on the scores exist on the eager path only (lrp/stabilizers.py)
    a = explain(model, ids, method="pa_lrp", attention="sdpa", stabilizers="none")
    b = explain(model, ids, method="pa_lrp", attention="eager", stabilizers="none")
    assert torch.allclose(a.scores, b.scores, atol=1e-10)
    assert torch.allclose(a.positional, b.positional, atol=1e-10)


def test_partial_rotary_sinks_cover_only_the_rotated_dimensions():
    model = make_model("gpt_neox", "causal")  # head 8, partial_rotary_factor 0.25: 2 rotated dimensions
    out, _ = twin_logits(model, random_ids(1, 6))
    assert [c.shape[-1] for c in out.cos] == [2, 2]
    # the pre-5.x name of the factor (rotary_pct) still reaches the library's rotary module, hence the twin
    model = make_model("gpt_neox", "causal", rope_parameters=None, rotary_pct=0.5)
    ids = random_ids(1, 6)
    out, _ = twin_logits(model, ids)
    assert [c.shape[-1] for c in out.cos] == [4, 4]
    assert max_diff(out, library_logits(model, ids), "causal") < F32_TOL
    model = make_model("phi3", "causal")  # head 8, factor 0.5
    out, _ = twin_logits(model, random_ids(1, 6))
    assert [s.shape[-1] for s in out.sin] == [4, 4]


def test_gemma3_layers_use_their_own_rope_table():
    """Layer 0 is local (base 1e4), layer 1 global (base 1e6, linear x8): their sinks differ."""
    model = make_model("gemma3", "causal")
    out, _ = twin_logits(model, random_ids(1, 9))
    rotary = model.model.rotary_emb
    pos = torch.arange(9)[None]
    for layer, kind in enumerate(["sliding_attention", "full_attention"]):
        cos, sin = rotary(out.embeds, pos, kind)
        assert torch.equal(out.cos[layer], cos) and torch.equal(out.sin[layer], sin)
    assert (out.cos[0] - out.cos[1]).abs().max() > 0.1


def test_gemma3_multimodal_model_is_explained_on_text():
    """``Gemma3ForConditionalGeneration`` (e.g. Gemma 3 4B) on text only: the vision-language twin's language model at
    ``model.language_model``, no logit soft-capping (its head applies none); the baselines get its decoder twin
    (tests/models/test_vlm_families.py explains it with images)."""
    text = family_config("gemma3")
    vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=16, patch_size=8)
    cfg = transformers.Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
                                    image_token_id=VOCAB - 1, boi_token_index=VOCAB - 2, eoi_token_index=VOCAB - 3)
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    ids = random_ids(2, 10) % (VOCAB - 3)
    ids[:, 0] = 1
    twin = twin_for(model)
    assert isinstance(twin, VisionLanguageTwin)
    language = twin.language_twin({"input_ids": ids})
    out = language.forward(language.embed(ids), None, language.last_index(ids, None), ATTNLRP, positional_sinks=True,
                           return_all_logits=True)
    assert language.spec.family == "gemma3" and language.final_softcap is None
    assert max_diff(out, library_logits(model, ids), "causal") < F32_TOL
    assert explain(model, ids, method="pa_lrp").positional.abs().max() > 0
    assert torch.isfinite(explain(model, ids, method="gradient_l2").scores).all()


def one_line_refusal(model, *needles):
    with pytest.raises(UnsupportedModelError) as err:
        explain(model, random_ids(1, 5), method="pa_lrp")
    message = str(err.value)
    assert "\n" not in message and all(n in message for n in needles), message


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_other_heads_are_refused_in_one_line(family):
    """A head the twin does not explain (token classification; Gemma 3 has none: its headless backbone)."""
    name = FAMILIES[family][1]["causal"].replace("ForCausalLM", "ForTokenClassification")
    torch.manual_seed(0)
    if hasattr(transformers, name):
        model = getattr(transformers, name)(family_config(family)).eval()
    else:
        model = transformers.AutoModel.from_config(family_config(family)).eval()
    one_line_refusal(model, type(model).__name__)


@pytest.mark.parametrize("family,overrides,needle", [
    ("gemma2", dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
    ("gemma3", dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
    ("qwen2", dict(layer_types=["full_attention", "chunked_attention"]), "chunked_attention"),
    ("qwen3", dict(layer_types=["full_attention", "chunked_attention"]), "chunked_attention"),
    ("olmoe", dict(clip_qkv=8.0), "clip_qkv"),
])
def test_unsupported_configurations_are_refused_in_one_line(family, overrides, needle):
    model = make_model(family, "causal")
    for key, value in overrides.items():
        setattr(model.config, key, value)
    one_line_refusal(model, needle)


def test_an_expert_layout_the_twin_does_not_read_is_refused_in_one_line():
    model = make_model("mixtral", "causal")
    model.model.layers[1].mlp.experts.is_transposed = True  # e.g. GPT-OSS stores [E, D, 2I]
    one_line_refusal(model, "is_transposed=True", "MixtralExperts")


def test_a_spec_option_the_twin_lacks_is_refused_in_one_line(monkeypatch):
    spec = DECODER_SPECS["mistral"]
    monkeypatch.setitem(DECODER_SPECS, "mistral", replace(spec, norm="batch", qkv_layout="interleaved"))
    one_line_refusal(make_model("mistral", "causal"), "norm 'batch'", "qkv_layout 'interleaved'")


def test_every_family_has_a_spec():
    for family in FAMILIES:
        assert spec_for(make_model(family, "causal")).family == family
    assert WINDOW < 11
