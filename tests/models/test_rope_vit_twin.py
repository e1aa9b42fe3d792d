"""The RoPE ViT twin (timm ``Eva``: RoPE-Axial with and without a learned table, SBB register + average pooling,
EVA-02 with a gated MLP, the half rotation layout, DINOv3 with a dynamic image size) against timm: logit parity (float32 1e-5, float64 1e-10, every
composite, SDPA and eager), Gradient x Input through our sinks = autograd on the unmodified timm model (float64),
the explanation's layout and aggregation, batch invariance, and one-line refusals (issue "PA-LRP for the models
people use now", tests 1, 2 and 7)."""
import pytest
import timm
import torch

from palrp_bench import explain
from palrp_bench.errors import BadInputError, UnsupportedModelError
from palrp_bench.lrp.attribution import attribute
from palrp_bench.lrp.composites import GRAD_X_INPUT
from palrp_bench.methods.pixel_aggregation import paint_patches
from palrp_bench.models.registry import twin_for
from models.families import VIT, VIT_VARIANTS, images, make_rope_vit

COMPOSITES = ["attnlrp", "official_vit", "attnlrp_gamma", "cp_lrp", "grad_x_input"]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
@pytest.mark.parametrize("variant", sorted(VIT_VARIANTS))
def test_logit_parity_with_timm(variant, dtype, tol):
    model = make_rope_vit(variant, dtype=dtype)
    x = images(3, dtype=dtype)
    with torch.no_grad():
        expected = model(x)
    twin = twin_for(model)
    for composite in COMPOSITES:
        for attention in ("sdpa", "eager"):
            with torch.no_grad():
                logits = twin.forward(x.clone().requires_grad_(True), composite, attention=attention).logits
            assert (logits - expected).abs().max() <= tol, (composite, attention)


def test_dynamic_image_size_parity():
    """DINOv3 takes any multiple of the patch size: the rotary table is built for the image's grid, as in timm."""
    model = make_rope_vit("dinov3")
    twin = twin_for(model)
    x = torch.randn(2, 3, 40, 24, dtype=torch.float64)
    with torch.no_grad():
        expected = model(x)
        logits = twin.forward(twin.prepare(x).pixels, "attnlrp").logits
    assert (logits - expected).abs().max() <= 1e-10
    e = explain(model, x, method="pa_lrp")
    assert e.scores.shape == (2, 40, 24) and e.positional.shape == (2, VIT["depth"], 2, 5, 3)


@pytest.mark.parametrize("variant", ["rope_ape", "eva02", "reg_gap"])
def test_gradient_x_input_equals_autograd_on_the_timm_model(variant):
    """float64: pixels, the learned table and the rotary table (the sum over layers of our per-layer sinks) under
    ``grad_x_input`` equal ``x * grad`` of the unmodified timm model."""
    model = make_rope_vit(variant)
    x = images(2)
    twin = twin_for(model)
    ours = attribute(lambda: twin.run(twin.prepare(x), GRAD_X_INPUT, positional_sinks=True), None,
                     starting_relevance="unit")
    emb = model.rope.get_embed().detach().clone().requires_grad_(True)
    model.rope.get_embed = lambda *args, **kwargs: emb          # this model object only
    pixels = x.clone().requires_grad_(True)
    logits = model(pixels)
    explained = logits.gather(1, ours.target[:, None])[:, 0]
    (explained / explained.detach()).sum().backward()            # starting relevance 1 per image
    tol = 1e-10 * float(ours.relevance["pixels"].abs().max())
    assert (ours.relevance["pixels"] - pixels.detach() * pixels.grad).abs().max() <= tol
    sin, cos = emb.chunk(2, -1)
    g_sin, g_cos = emb.grad.chunk(2, -1)
    rope_cos = torch.stack(ours.relevance["cos"]).sum((0, 1))     # summed over layers and the batch
    rope_sin = torch.stack(ours.relevance["sin"]).sum((0, 1))
    assert (rope_cos - cos.detach() * g_cos).abs().max() <= tol
    assert (rope_sin - sin.detach() * g_sin).abs().max() <= tol
    assert rope_cos.abs().max() > 1e-6
    if model.pos_embed is not None:
        table = ours.relevance["pos_embed"].sum(0)
        assert (table - model.pos_embed.detach()[0] * model.pos_embed.grad[0]).abs().max() <= tol


def test_explanation_layout_and_aggregation():
    model = make_rope_vit("rope_ape")
    x = images(2)
    e = explain(model, x, method="pa_lrp")
    assert e.rules == "attnlrp"                            # the RoPE ViT's default rules
    assert e.scores.shape == e.semantic.shape == (2, 32, 32)
    assert e.positional.shape == (2, 1 + VIT["depth"], 2, 4, 4)   # the table, then (cos, sin) per layer
    assert e.positional[:, 0, 1].abs().max() == 0            # the table has one component
    per_patch = e.positional.abs().sum((1, 2))
    assert torch.allclose(e.scores, (e.semantic + paint_patches(per_patch, (8, 8), (32, 32))).clamp(min=0))
    signed = explain(model, x, method="pa_lrp_no_multisink")  # a multi-sink kind: the ablation is defined
    assert torch.allclose(signed.scores, (e.semantic + paint_patches(e.positional.sum((1, 2)), (8, 8),
                                                                     (32, 32))).clamp(min=0))
    assert not torch.allclose(signed.scores, e.scores)
    attn = explain(model, x, method="attnlrp")               # rotary tables constant: only the learned table
    assert attn.positional[:, 1:].abs().max() == 0 and attn.positional[:, 0].abs().max() > 0
    ex = e.extras
    assert torch.allclose(ex["positional_total"], e.positional.sum((1, 2, 3, 4)))
    assert torch.allclose(ex["semantic_total_incl_prefix"], ex["semantic_total"] + ex["cls_semantic"])
    assert ex["cls_positional"].abs().max() == 0             # no_embed_class: the table skips the CLS token


def test_batch_invariance():
    model = make_rope_vit("reg_gap")
    x = images(3)
    for method in ("attnlrp", "pa_lrp", "pa_lrp_no_multisink", "pe_only"):
        batched = explain(model, x, method=method)
        for i in range(3):
            single = explain(model, x[i:i + 1], method=method)
            for part in ("scores", "semantic", "positional"):
                assert torch.allclose(getattr(batched, part)[i], getattr(single, part)[0], atol=1e-12), (method, part)


@pytest.mark.parametrize("name,kwargs,match", [
    ("vit_small_patch16_rope_mixed_224", {}, "mixed"),
    ("vit_small_patch16_rope_ape_224", dict(qk_norm=True), "qk-norm"),
    ("vit_small_patch16_rope_ape_224", dict(use_post_norm=True, init_values=None), "post-norm"),
    ("eva02_tiny_patch14_224", dict(patch_size=8, ref_feat_shape=(4, 4), scale_mlp=True), "MLP"),
    ("vit_small_patch16_rope_ape_224", dict(global_pool="map"), "global_pool"),
])
def test_unsupported_models_are_refused_in_one_line(name, kwargs, match):
    model = timm.create_model(name, **{**VIT, "depth": 1, **kwargs}).eval()
    with pytest.raises(UnsupportedModelError, match=match) as err:
        explain(model, images(1, dtype=torch.float32), method="pa_lrp")
    assert "\n" not in str(err.value)


def test_bad_inputs_are_refused_in_one_line():
    model = make_rope_vit("rope_ape", dtype=torch.float32)
    x = images(1, dtype=torch.float32)
    for kwargs, match in ((dict(aggregation="eq11"), "not defined for vision"),
                          (dict(attention="flash"), "unknown attention"),
                          (dict(attention_mask=torch.ones(1, 17)), "attention_mask")):
        with pytest.raises(BadInputError, match=match) as err:
            explain(model, x, method="pa_lrp", **kwargs)
        assert "\n" not in str(err.value)
