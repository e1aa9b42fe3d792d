"""Every vision-language family reproduces its library model (logits), gives the library's own Gradient x Input on
the text tokens and on the image's pixels, conserves under CP-LRP without biases, explains batches exactly as single
samples, and returns finite AttnLRP / PA-LRP maps with a positional part in both the language model and the tower.

Families and their tiny configs: tests/models/tiny_vlms.py. Tolerances as tests/models/test_decoder_families.py:
float32 1e-5 on logits of magnitude ~1; float64 1e-10 once the library's float32 steps (norm statistics, the eager
softmax, the vision tower's rotary products) are emulated in the rules (tests/reference/library_numerics.py), float32
rounding without.
"""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.errors import BadInputError, UnsupportedModelError
from palrp_bench.lrp.composites import ATTNLRP, Composite
from palrp_bench.models.vlm import VisionLanguageTwin
from models.tiny_vlms import (FAMILIES, IMAGE, batch_inputs, image_token_count, inputs_of, library_logits, make_vlm,
                              pixel_values_of, random_images, sample_ids, samples)
from reference.library_numerics import emulate_library_float32_steps

F32_TOL = 1e-5
F64_TOL = 1e-10
ALL = sorted(FAMILIES)
#: Gradient x Input in float64, relative to the largest value: Gemma 3's projector norm rounds its output to float32 in
#: the library (``Gemma3RMSNorm``, emulated here), and the float64 differences of the tower in front of it (the twin's
#: LayerNorm computes the mean and variance itself) can move one element across a float32 rounding boundary: one
#: float32 step (measured 1.6e-7 on a value of 2.3); every other family's float32 steps see identical inputs
GXI_RTOL = {"gemma3": 1e-6}


def twin_logits(model, inputs, attention="sdpa"):
    twin = VisionLanguageTwin(model)
    prepared = twin.prepare(inputs)
    return twin.run(prepared, ATTNLRP, positional_sinks=True, attention=attention, return_all_logits=True).lm


def real(inputs):
    return inputs["attention_mask"].bool()


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("family", ALL)
def test_float32_logits_match_the_library(family, attention):
    model = make_vlm(family, attn=attention)
    inputs = inputs_of(family, 2)
    out = twin_logits(model, inputs, attention)
    ref = library_logits(model, inputs)
    keep = real(inputs)
    assert (out.all_logits[keep] - ref[keep]).abs().max() < F32_TOL
    last = inputs["attention_mask"].sum(1) - 1
    assert (out.logits - ref[torch.arange(2), last]).abs().max() < F32_TOL


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", ALL)
def test_float32_logits_match_with_padding(family, side):
    model = make_vlm(family)
    inputs = inputs_of(family, 3, side=side)
    out = twin_logits(model, inputs)
    ref = library_logits(model, inputs)
    keep = real(inputs)
    assert (out.all_logits[keep] - ref[keep]).abs().max() < F32_TOL


@pytest.mark.parametrize("family", ALL)
def test_float64_logits_match_the_library(monkeypatch, family):
    model = make_vlm(family, dtype=torch.float64)
    inputs = inputs_of(family, 2, dtype=torch.float64)
    ref = library_logits(model, inputs)
    keep = real(inputs)
    plain = twin_logits(model, inputs)
    assert (plain.all_logits[keep] - ref[keep]).abs().max() < F32_TOL  # the library's float32 steps, nothing else
    emulate_library_float32_steps(monkeypatch)
    emulated = twin_logits(model, inputs)
    assert (emulated.all_logits[keep] - ref[keep]).abs().max() < F64_TOL


def library_grad_x_input(model, family, ids, images, target):
    """Gradient x Input of the unmodified library model: on the text embeddings (captured at the embedding module's
    output) and on the normalised images themselves (``[n, H, W]``, summed over channels)."""
    leaves = [im.detach().clone().requires_grad_(True) for im in images]
    inputs = batch_inputs(family, ids, leaves, pixels=pixel_values_of(family, leaves))
    captured = {}

    def hook(module, args, output):
        captured["embeds"] = output.detach().requires_grad_(True)
        return captured["embeds"]

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        logits = model(**inputs).logits
    finally:
        handle.remove()
    last = inputs["attention_mask"].sum(1) - 1
    explained = logits[torch.arange(len(ids)), last].gather(1, target[:, None]).sum()
    explained.backward()
    embeds = captured["embeds"]
    text = (embeds * embeds.grad).sum(-1).detach()
    return text, [(im * im.grad).sum(0).detach() for im in leaves], inputs


@pytest.mark.parametrize("family", ALL)
def test_gradient_x_input_equals_autograd_on_the_library_model(monkeypatch, family):
    """``grad_x_input`` through the twin's sinks = ``x * grad`` of the library model: per text token, per pixel of
    each image (``extras["image_pixel_semantic"]``), and per image token the sum over the pixels of its patches."""
    emulate_library_float32_steps(monkeypatch)
    model = make_vlm(family, dtype=torch.float64)
    drawn = samples(family, 2, dtype=torch.float64)
    ids, images = [s for s, _ in drawn], [im for _, im in drawn]
    ours = explain(model, batch_inputs(family, ids, images), method="grad_x_input")
    text, pixels, inputs = library_grad_x_input(model, family, ids, images, ours.target)
    image_mask = inputs["input_ids"] == IMAGE
    keep = real(inputs) & ~image_mask
    assert ours.semantic.dtype == torch.float64
    scale = max(float(text[keep].abs().max()), max(float(p.abs().max()) for p in pixels))
    tol = max(F64_TOL, GXI_RTOL.get(family, 0.0) * scale)
    assert (ours.semantic[keep] - text[keep]).abs().max() < tol
    assert text[keep].abs().max() > 1e-3
    for i, theirs in enumerate(pixels):
        h, w = theirs.shape
        assert (ours.extras["image_pixel_semantic"][i, :h, :w] - theirs).abs().max() < tol
        assert (ours.semantic[i][image_mask[i]].sum() - theirs.sum()).abs() < tol * theirs.numel() ** 0.5
        assert theirs.abs().max() > 1e-4


def parts_total(e):
    """Everything the result attributes: tokens, positions, and CLIP's CLS token and its position row."""
    total = e.semantic.sum(1) + e.positional.sum((1, 2, 3))
    for name in ("cls_semantic", "cls_positional"):
        if name in e.extras:
            total = total + e.extras[name]
    return total


@pytest.mark.parametrize("family", ALL)
def test_cp_lrp_conserves_exactly_without_biases(family):
    model = make_vlm(family, dtype=torch.float64)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    e = explain(model, inputs_of(family, 2, dtype=torch.float64), method="cp_lrp")
    assert e.extras["absorbed"].abs().max() < 1e-10
    assert (parts_total(e) - e.logit).abs().max() < 1e-10 * max(1.0, float(e.logit.abs().max()))
    assert e.semantic[e.extras["image_mask"]].abs().max() > 1e-6  # relevance reached the pixels


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp"])
@pytest.mark.parametrize("family", ALL)
def test_the_result_alone_accounts_for_the_logit(family, method):
    """Every sink's relevance lands on one token (or the CLS terms): semantic + positional + absorbed = logit."""
    model = make_vlm(family, dtype=torch.float64)
    e = explain(model, inputs_of(family, 2, dtype=torch.float64), method=method)
    assert (parts_total(e) + e.extras["absorbed"] - e.logit).abs().max() < 1e-10
    assert e.extras["absorbed"].abs().min() > 1e-6  # the softmax rules absorb (a non-trivial identity)


@pytest.mark.parametrize("family", ALL)
def test_pa_lrp_is_finite_with_a_positional_part_in_both_models(family):
    model = make_vlm(family)
    inputs = inputs_of(family, 2)
    e = explain(model, inputs, method="pa_lrp")
    lm = e.extras["language_positional_sinks"]
    assert torch.isfinite(e.scores).all() and torch.isfinite(e.positional).all()
    assert e.positional[:, :lm].abs().sum() > 0, "the language model's position"
    assert e.positional[:, lm:].abs().sum() > 0, "the vision tower's position"
    tower = e.positional[:, lm:].abs().sum((1, 2))
    assert tower[~e.extras["image_mask"]].max() == 0  # the tower's positions sit on image tokens
    assert e.extras["image_scores"].shape[0] == 2 and torch.isfinite(e.extras["image_scores"]).all()
    a = explain(model, inputs, method="attnlrp")
    assert torch.isfinite(a.scores).all() and a.positional[:, :lm].abs().max() == 0


@pytest.mark.parametrize("family", ALL)
def test_image_scores_are_the_image_tokens_scores_on_the_grid(family):
    model = make_vlm(family)
    inputs = inputs_of(family, 2)
    e = explain(model, inputs, method="pa_lrp")
    for i, (h, w) in enumerate(e.extras["image_grid"].tolist()):
        tokens = e.scores[i][e.extras["image_mask"][i]]
        assert torch.equal(e.extras["image_scores"][i, :h, :w].reshape(-1), tokens)


def assert_batch_equals_singles(model, family, drawn, side, method):
    batched = explain(model, batch_inputs(family, [s for s, _ in drawn], [im for _, im in drawn], side),
                      method=method)
    mask = batched.attention_mask.bool()
    for i, (ids, image) in enumerate(drawn):
        single = explain(model, batch_inputs(family, [ids], [image]), method=method)
        keep = mask[i]
        assert torch.allclose(batched.scores[i][keep], single.scores[0], atol=2e-5, rtol=1e-4)
        assert torch.allclose(batched.positional[i][..., keep], single.positional[0], atol=2e-5, rtol=1e-4)
        assert torch.allclose(batched.logit[i], single.logit[0], atol=1e-5)
        h, w = single.extras["image_grid"][0].tolist()
        assert torch.allclose(batched.extras["image_scores"][i, :h, :w], single.extras["image_scores"][0],
                              atol=2e-5, rtol=1e-4)
        assert not batched.scores[i][~keep].any()


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp", "pa_lrp_no_multisink", "grad_x_input", "cp_lrp"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", ALL)
def test_batch_and_padding_invariance(family, side, method):
    """Samples of different lengths and image grids in one batch, padded on either side."""
    model = make_vlm(family)
    assert_batch_equals_singles(model, family, samples(family, 3, seed=5), side, method)


@pytest.mark.parametrize("family", ALL)
def test_sdpa_and_eager_give_the_same_relevance(family):
    model = make_vlm(family, dtype=torch.float64)
    inputs = inputs_of(family, 2, dtype=torch.float64)
    a = explain(model, inputs, method="pa_lrp", attention="sdpa")
    b = explain(model, inputs, method="pa_lrp", attention="eager")
    assert torch.allclose(a.scores, b.scores, atol=1e-10)
    assert torch.allclose(a.positional, b.positional, atol=1e-10)


@pytest.mark.parametrize("family", ALL)
def test_text_only_inputs_are_the_language_model_alone(family):
    model = make_vlm(family)
    ids = sample_ids(family, None, 4, 3)[None]
    e = explain(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, method="pa_lrp")
    assert "image_scores" not in e.extras and e.positional.shape[1] == e.extras["language_positional_sinks"]
    with torch.no_grad():
        ref = model(input_ids=ids).logits[:, -1]
    assert (e.logit - ref.gather(1, e.target[:, None])[:, 0]).abs().max() < F32_TOL


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_mrope_sections_add_up_to_the_layer_terms(family):
    """M-RoPE's split by section (temporal, height, width) adds up to each layer's cos + sin term, and every section
    receives relevance."""
    model = make_vlm(family, dtype=torch.float64)
    e = explain(model, inputs_of(family, 2, dtype=torch.float64), method="pa_lrp")
    lm = e.extras["language_positional_sinks"]
    sections = e.extras["positional_sections"]
    assert sections.shape == (2, lm, 3, e.scores.shape[1])
    assert torch.allclose(sections.sum(2), e.positional[:, :lm].sum(2), atol=1e-12)
    assert (sections.abs().sum((0, 1, 3)) > 1e-6).all()


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_the_3d_positions_are_exercised(family):
    """Parity is evidence for M-RoPE only if the 3-D positions change the logits: 1-D positions do."""
    model = make_vlm(family)
    inputs = inputs_of(family, 2)
    ref = library_logits(model, inputs)
    flat = torch.arange(inputs["input_ids"].shape[1])[None].expand(2, -1)
    with torch.no_grad():
        changed = model(**inputs, position_ids=flat).logits
    assert (ref - changed)[real(inputs)].abs().max() > 1e-3


def test_qwen2_5_vl_windows_are_exercised():
    """Parity is evidence for the windowed vision attention only if the windows change the logits."""
    model = make_vlm("qwen2_5_vl")
    inputs = inputs_of("qwen2_5_vl", 2)
    ref = library_logits(model, inputs)
    model.model.visual.window_size = 64  # one window per image: full attention in every block
    assert (ref - library_logits(model, inputs))[real(inputs)].abs().max() > 1e-3


def test_the_vision_gamma_rule_applies_per_layer_group():
    """A composite naming the vision roles puts the gamma rule on them (and changes the map); an unknown role is a
    one-line error."""
    model = make_vlm("qwen2_vl", dtype=torch.float64)
    inputs = inputs_of("qwen2_vl", 1, dtype=torch.float64)
    plain = explain(model, inputs, method="attnlrp")
    gamma = Composite("vision_gamma_test", linear_gamma={"vision_patch_embed": 0.25, "vision_mlp": 0.05,
                                                        "projector": 0.05})
    with_gamma = explain(model, inputs, method="attnlrp", rules=gamma)
    assert torch.isfinite(with_gamma.scores).all()
    assert not torch.allclose(plain.scores, with_gamma.scores, atol=1e-6)
    with pytest.raises(BadInputError, match="head"):
        explain(model, inputs, method="attnlrp", rules="attnlrp_gamma")


def test_refusals_are_one_line():
    model = make_vlm("qwen2_vl")
    inputs = inputs_of("qwen2_vl", 1)

    def refused(bad, *needles):
        with pytest.raises(BadInputError) as err:
            explain(model, bad, method="pa_lrp")
        message = str(err.value)
        assert "\n" not in message and all(n in message for n in needles), message

    refused({k: v for k, v in inputs.items() if k != "mm_token_type_ids"}, "mm_token_type_ids")
    refused({**inputs, "image_grid_thw": torch.tensor([[2, 4, 6]])}, "t = 2")
    refused({k: v for k, v in inputs.items() if k not in ("pixel_values", "image_grid_thw")}, "pixel_values")
    short = dict(inputs, input_ids=inputs["input_ids"][:, :-4], attention_mask=inputs["attention_mask"][:, :-4],
                 mm_token_type_ids=inputs["mm_token_type_ids"][:, :-4])
    refused({**short, "input_ids": torch.where(short["input_ids"] == IMAGE, 5, short["input_ids"]),
             "mm_token_type_ids": torch.zeros_like(short["input_ids"])}, "image tokens")
    refused({**inputs, "labels": inputs["input_ids"]}, "labels")
    with pytest.raises(BadInputError, match="LRP methods only"):
        explain(model, inputs, method="integrated_gradients")
    assert image_token_count("qwen2_vl", random_images(1, (4, 6), "qwen2_vl")[0]) == 6


def test_llava_reads_the_selected_feature_layer():
    """Parity is evidence for ``vision_feature_layer`` only if the layer changes the logits: the last one does; the CLS
    token and its position row receive relevance (reported apart)."""
    model = make_vlm("llava")
    inputs = inputs_of("llava", 2)
    ref = library_logits(model, inputs)
    with torch.no_grad():
        changed = model(**inputs, vision_feature_layer=-1).logits
    assert (ref - changed)[real(inputs)].abs().max() > 1e-3
    e = explain(model, inputs, method="pa_lrp")
    assert e.extras["cls_semantic"].abs().min() > 0 and e.extras["cls_positional"].abs().min() > 0


def test_llava_reads_any_decoder_language_model():
    model = make_vlm("llava", model_type="qwen2")
    inputs = inputs_of("llava", 2)
    out = twin_logits(model, inputs)
    ref = library_logits(model, inputs)
    assert type(model.model.language_model).__name__ == "Qwen2Model"
    assert (out.all_logits - ref)[real(inputs)].abs().max() < F32_TOL


@pytest.mark.parametrize("field,value,needle", [("vision_feature_layer", [-2, -1], "several layers"),
                                                ("vision_feature_select_strategy", "full", "'full'")])
def test_llava_configurations_it_does_not_reproduce_are_refused(field, value, needle):
    model = make_vlm("llava")
    setattr(model.config, field, value)
    with pytest.raises(UnsupportedModelError) as err:
        explain(model, inputs_of("llava", 1), method="pa_lrp")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_named_vision_gamma_composite_on_a_clip_tower():
    """``attnlrp_vision_gamma`` (the AttnLRP paper's ViT values on the tower and projector): the gamma rule on CLIP's
    patch convolution and MLPs; with CP-LRP's sharing and no biases it still conserves (the gamma rule does)."""
    model = make_vlm("llava", dtype=torch.float64)
    inputs = inputs_of("llava", 1, dtype=torch.float64)
    plain, gamma = (explain(model, inputs, method="attnlrp", rules=r) for r in ("attnlrp", "attnlrp_vision_gamma"))
    image = plain.extras["image_mask"]
    assert torch.isfinite(gamma.scores).all()
    assert not torch.allclose(plain.semantic[image], gamma.semantic[image], atol=1e-6)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    conserving = Composite("cp_vision_gamma_test", activation="constant", attn_weights_share=0.0, attn_value_share=1.0,
                           router="constant", linear_gamma={"vision_patch_embed": 0.25, "vision_mlp": 0.05,
                                                            "projector": 0.05})
    e = explain(model, inputs, method="cp_lrp", rules=conserving)
    assert e.extras["absorbed"].abs().max() < 1e-10


def test_gemma3_image_blocks_are_exercised():
    """Gemma 3's image tokens see their whole image when ``token_type_ids`` are given (as the processor returns them),
    causal attention without them: the two differ, and the twin follows the library either way."""
    model = make_vlm("gemma3")
    inputs = inputs_of("gemma3", 2)
    causal = {k: v for k, v in inputs.items() if k != "token_type_ids"}
    ref, ref_causal = library_logits(model, inputs), library_logits(model, causal)
    keep = real(inputs)
    assert (ref - ref_causal)[keep].abs().max() > 1e-3
    assert (twin_logits(model, causal).all_logits - ref_causal)[keep].abs().max() < F32_TOL
    model.config.text_config.sliding_window = 64  # no window: the window's bound on the image blocks mattered
    assert (library_logits(model, inputs) - ref)[keep].abs().max() > 1e-3


@pytest.mark.cuda
@pytest.mark.parametrize("family", ALL)
def test_a_model_on_the_gpu_takes_the_processors_cpu_tensors(family):
    """The way users run them: the model on a GPU, the processor's output on the CPU (every test above is the CPU
    twin of this path). The relevance stays on the GPU; the explained logit is the library's (float32 on the GPU:
    TF32 and kernel choices move it by float32 rounding)."""
    model = make_vlm(family).cuda()
    inputs = inputs_of(family, 2)
    e = explain(model, inputs, method="pa_lrp")
    assert e.scores.device.type == "cuda" and e.extras["image_scores"].device.type == "cuda"
    assert torch.isfinite(e.scores).all() and e.positional.abs().sum() > 0
    ref = library_logits(model, {k: v.cuda() for k, v in inputs.items()})
    last = inputs["attention_mask"].sum(1).cuda() - 1
    at = ref[torch.arange(2, device="cuda"), last].gather(1, e.target[:, None])[:, 0]
    assert (e.logit - at).abs().max() < 1e-3 * max(1.0, float(at.abs().max()))
