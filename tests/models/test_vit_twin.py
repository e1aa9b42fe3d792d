"""ViT / DeiT twin: logit parity with timm, explanation contents, targets, batch invariance, the relevance
accounting identity (float64), refusals of unsupported models and bad inputs, and the loader."""
import dataclasses
import math
import time
from pathlib import Path

import pytest
import torch
from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer

from palrp_bench import explain
from palrp_bench.errors import BadInputError, MissingDataError, UnsupportedModelError
from palrp_bench.lrp import rules
from palrp_bench.lrp.composites import OFFICIAL_VIT, Composite, get_composite
from palrp_bench.lrp.gamma import gamma_conv2d, gamma_linear
from palrp_bench.lrp.stabilizers import Stabilizers
from palrp_bench.methods.pixel_aggregation import paint_patches
from palrp_bench.lrp.attribution import seed_gradient
from palrp_bench.models.loading import load_timm_vit
from palrp_bench.models.vit import VitTwin
from palrp_bench.models.registry import twin_for

OFFICIAL_VISION = Path(__file__).resolve().parents[1] / "data" / "official" / "vision"
COMMON = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5)
COMPOSITES = ["official_vit", "attnlrp", "attnlrp_gamma", "cp_lrp", "grad_x_input", "attnlrp_gamma_b4",
              "cp_lrp_gamma_b4"]


def make_vit(kind: str = "plain", dtype=torch.float64, zero_bias: bool = False, seed: int = 0):
    """A tiny random timm ViT with every parameter randomised (non-trivial biases, norms, PE)."""
    torch.manual_seed(seed)
    if kind == "plain":
        model = VisionTransformer(**COMMON)
    elif kind == "distilled":
        model = VisionTransformerDistilled(**COMMON)
    elif kind == "size48":
        model = VisionTransformer(**{**COMMON, "img_size": 48, "patch_size": 16})
    elif kind == "dynamic":
        model = VisionTransformer(**COMMON, dynamic_img_size=True)
    elif kind == "deit3":  # DeiT-III layout: PE added before the CLS concat, LayerScale
        model = VisionTransformer(**COMMON, no_embed_class=True, init_values=0.5)
    else:
        raise ValueError(kind)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.zeros_like(p) if zero_bias else 0.2 * torch.randn_like(p))
            elif "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif p.dim() >= 2 and "embed" not in name and "token" not in name:
                fan_in = p[0].numel()
                p.copy_(torch.randn_like(p) / math.sqrt(fan_in))
            else:  # pos_embed, cls/dist token, layer scale
                p.copy_(0.5 * torch.randn_like(p))
    return model.to(dtype).eval()


def images(n: int, size=(32, 32), dtype=torch.float64, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, *size, generator=g).to(dtype)


SIZES = {"plain": (32, 32), "distilled": (32, 32), "size48": (48, 48), "dynamic": (40, 24), "deit3": (32, 32)}


# ------------------------------------------------------------------------------------------------ parity
@pytest.mark.parametrize("kind", list(SIZES))
def test_logit_parity_with_timm(kind):
    model = make_vit(kind, dtype=torch.float32)
    x = images(3, SIZES[kind], dtype=torch.float32)
    with torch.no_grad():
        expected = model(x)
    twin = VitTwin(model)
    for composite in COMPOSITES:
        for attention in ("sdpa", "eager"):
            leaf = x.clone().requires_grad_(True)
            logits = twin.forward(leaf, composite, attention=attention).logits
            assert torch.allclose(logits, expected, atol=1e-5, rtol=0), (composite, attention)


def test_twin_leaves_the_model_untouched():
    model = make_vit("plain")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    e = explain(model, images(2), method="pa_lrp", rules="official_vit")
    assert e.scores.shape == (2, 32, 32)
    assert all(p.grad is None for p in model.parameters()), "no gradient may accumulate in the wrapped model"
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# ------------------------------------------------------------------------------------------- explanation
def test_explanation_contents():
    model = make_vit("plain")
    x = images(3)
    e = explain(model, x, method="pa_lrp", rules="official_vit")
    with torch.no_grad():
        logits = model(x)
    assert e.scores.shape == e.semantic.shape == (3, 32, 32)
    assert e.positional.shape == (3, 4, 4)
    assert torch.equal(e.target, logits.argmax(-1))
    assert torch.allclose(e.logit, logits.gather(1, e.target[:, None])[:, 0], atol=1e-10)
    assert e.method == "pa_lrp" and e.rules == "official_vit" and e.aggregation == "official"
    # docs/protocol.md section 1: Ours = ReLU(sem_pixel + pos_pixel), the positional patch score spread over 8x8 pixels
    painted = e.positional.repeat_interleave(8, 1).repeat_interleave(8, 2) / 64
    assert torch.allclose(e.scores, (e.semantic + painted).clamp(min=0), atol=1e-15)
    assert bool((e.scores >= 0).all()) and bool((e.scores > 0).any())
    ex = e.extras
    for key in ("cls_semantic", "cls_positional", "semantic_total", "positional_total",
                "semantic_total_incl_prefix", "positional_total_incl_prefix"):
        assert ex[key].shape == (3,), key
    assert ex["patch_semantic"].shape == (3, 4, 4)
    assert torch.allclose(ex["semantic_total"], e.semantic.sum((1, 2)))
    assert torch.allclose(ex["positional_total_incl_prefix"], e.positional.sum((1, 2)) + ex["cls_positional"])
    assert torch.allclose(ex["semantic_total_incl_prefix"], ex["semantic_total"] + ex["cls_semantic"])
    assert ex["patch_size"] == (8, 8)
    assert ex["cls_positional"].abs().min() > 0 and ex["cls_semantic"].abs().min() > 0


def test_methods_share_one_pass_and_differ_only_in_aggregation():
    model = make_vit("plain")
    x = images(2)
    by_method = {m: explain(model, x, method=m, rules="official_vit") for m in ("attnlrp", "pe_only", "pa_lrp")}
    for m in ("pe_only", "pa_lrp"):
        assert torch.equal(by_method[m].semantic, by_method["attnlrp"].semantic)
        assert torch.equal(by_method[m].positional, by_method["attnlrp"].positional)
    painted = paint_patches(by_method["pa_lrp"].positional, (8, 8), (32, 32))
    assert torch.allclose(by_method["attnlrp"].scores, by_method["attnlrp"].semantic.clamp(min=0))
    assert torch.allclose(by_method["pe_only"].scores, painted.clamp(min=0))
    # different rules give different maps
    other = explain(model, x, method="pa_lrp", rules="attnlrp")
    assert not torch.allclose(other.semantic, by_method["pa_lrp"].semantic, atol=1e-6)


def test_targets():
    model = make_vit("plain")
    x = images(3)
    with torch.no_grad():
        logits = model(x)
    e = explain(model, x, method="pa_lrp", rules="official_vit", target=2)
    assert e.target.tolist() == [2, 2, 2]
    assert torch.allclose(e.logit, logits[:, 2])
    t = torch.tensor([4, 0, 1])
    e2 = explain(model, x, method="pa_lrp", rules="official_vit", target=t)
    assert e2.target.tolist() == [4, 0, 1]
    single = explain(model, x[1:2], method="pa_lrp", rules="official_vit", target=0)
    assert torch.allclose(single.semantic[0], e2.semantic[1], atol=1e-12)
    for bad in (5, -1, torch.tensor([0, 1])):
        with pytest.raises(BadInputError):
            explain(model, x, method="pa_lrp", rules="official_vit", target=bad)


@pytest.mark.parametrize("kind", ["plain", "distilled"])
def test_batch_invariance(kind):
    model = make_vit(kind, dtype=torch.float32)
    x = images(4, dtype=torch.float32)
    full = explain(model, x, method="pa_lrp", rules="official_vit")
    parts = [explain(model, x[a:b], method="pa_lrp", rules="official_vit") for a, b in ((0, 1), (1, 3), (3, 4))]
    for name in ("scores", "semantic", "positional", "logit"):
        joined = torch.cat([getattr(p, name) for p in parts])
        ref = getattr(full, name)
        assert torch.allclose(joined, ref, rtol=1e-5, atol=1e-6 * float(ref.abs().max())), name
    assert torch.equal(torch.cat([p.target for p in parts]), full.target)
    for key in ("cls_semantic", "cls_positional", "positional_total"):
        assert torch.allclose(torch.cat([p.extras[key] for p in parts]), full.extras[key], rtol=1e-5, atol=1e-7)


def test_public_explain_dispatches_to_the_twin_with_its_default_rules():
    model = make_vit("plain")
    x = images(2)
    assert isinstance(twin_for(model), VitTwin)
    e = explain(model, x, method="pe_only")
    assert e.rules == "official_vit" and e.stabilizers == "official"
    direct = explain(model, x, method="pe_only", rules="official_vit", stabilizers="official")
    assert torch.equal(e.scores, direct.scores)
    # protocol=corrected: the exact rules (stabilizers="none"); the forward is the same, the relevance moves
    exact = explain(model, x, method="pe_only", protocol="corrected")
    assert exact.stabilizers == "none"
    assert torch.equal(exact.scores, explain(model, x, method="pe_only", stabilizers="none").scores)
    assert torch.equal(exact.logit, e.logit), "stabilisers never change the forward"
    assert not torch.equal(exact.positional, e.positional)


# --------------------------------------------------------------------------------- accounting identity
def ledger(model, x, composite, attention="sdpa", with_biases=False):
    """Per-sample (sinks, absorbed-by-softmax, absorbed-by-biases) for a starting relevance of 1.0."""
    twin = VitTwin(model)
    rec = rules.AttentionRecorder() if attention == "eager" else None
    leaf = x.clone().requires_grad_(True)
    out = twin.forward(leaf, composite, attention=attention, recorder=rec)
    explained = out.logits.max(-1).values
    sinks = [out.pixels, out.prefix, out.pos_embed]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")] if with_biases else []
    grads = torch.autograd.grad(explained, sinks + biases, seed_gradient(explained, "unit"), allow_unused=True)
    sink_total = sum((s * g).flatten(1).sum(1) for s, g in zip(sinks, grads[:3]))
    softmax = rec.absorbed() if rec is not None else torch.zeros_like(sink_total)
    # a bias is shared by the batch: b * grad_b sums over samples (used with single-sample batches only)
    bias = sum(((b * g).sum() for b, g in zip(biases, grads[3:]) if g is not None),
               torch.tensor(0.0, dtype=torch.float64))
    return sink_total, softmax, bias


@pytest.mark.parametrize("kind", ["plain", "distilled", "deit3", "dynamic"])
def test_cp_lrp_conserves_exactly_without_biases(kind):
    model = make_vit(kind, zero_bias=True)
    x = images(3, SIZES[kind])
    total, _, _ = ledger(model, x, "cp_lrp")
    assert torch.allclose(total, torch.ones_like(total), atol=1e-10, rtol=0)
    # the same identity read off the Explanation (pixels + patch PE + CLS/dist terms)
    e = explain(model, x, method="pa_lrp", rules="cp_lrp", stabilizers="none")  # exact rules conserve exactly
    summed = e.extras["semantic_total_incl_prefix"] + e.extras["positional_total_incl_prefix"]
    assert torch.allclose(summed, torch.ones_like(summed), atol=1e-10, rtol=0)
    if kind == "distilled":
        assert e.extras["dist_semantic"].abs().min() > 1e-6 and e.extras["dist_positional"].abs().min() > 1e-6


@pytest.mark.parametrize("kind", ["plain", "distilled"])
def test_attnlrp_identity_with_softmax_absorption(kind):
    model = make_vit(kind, zero_bias=True)
    x = images(3)
    total, softmax, _ = ledger(model, x, "attnlrp", attention="eager")
    assert softmax.abs().min() > 1e-4, "the softmax rule should absorb something (non-trivial test)"
    assert torch.allclose(total + softmax, torch.ones_like(total), atol=1e-8, rtol=0)
    sdpa_total, _, _ = ledger(model, x, "attnlrp")
    assert torch.allclose(sdpa_total, total, atol=1e-10), "fused and eager attention give the same relevance"


def test_gamma_composite_conserves_without_biases_when_the_value_path_keeps_everything():
    """official_vit drops the A half of A@V; with the whole A@V relevance on V the only remaining leaks are
    biases, so a zero-bias model conserves exactly -- the gamma ops conserve inside the full model."""
    model = make_vit("plain", zero_bias=True)
    x = images(3)
    full_value = dataclasses.replace(OFFICIAL_VIT, name="official_vit_full_value", attn_value_share=1.0)
    total, _, _ = ledger(model, x, full_value)
    assert torch.allclose(total, torch.ones_like(total), atol=1e-10, rtol=0)
    halved, _, _ = ledger(model, x, "official_vit")
    assert bool((halved - 1).abs().min() > 1e-3), "official_vit drops relevance inside attention"


@pytest.mark.parametrize("composite", ["attnlrp", "cp_lrp"])
def test_identity_with_biases(composite):
    model = make_vit("plain")
    x = images(1)
    total, softmax, bias = ledger(model, x, composite, attention="eager", with_biases=True)
    assert bias.abs() > 1e-3
    assert torch.allclose(total + softmax + bias, torch.ones_like(total), atol=1e-8, rtol=0)
    # explain returns what no sink received (softmax and biases), and its parts add up to the starting relevance
    e = explain(model, x, method="pa_lrp", rules=composite, stabilizers="none")
    assert torch.allclose(e.extras["absorbed"], softmax + bias, atol=1e-8, rtol=0)
    reached = e.extras["semantic_total_incl_prefix"] + e.extras["positional_total_incl_prefix"]
    assert torch.allclose(reached + e.extras["absorbed"], torch.ones_like(reached), atol=1e-12, rtol=0)


# ------------------------------------------------------------------------------------ refusals and errors
@pytest.mark.parametrize("kwargs,match", [
    (dict(class_token=False, global_pool="avg"), "CLS token"),
    (dict(global_pool="avg"), "global_pool"),
    (dict(reg_tokens=2), "register tokens"),
    (dict(pos_embed="none"), "position embedding"),
    (dict(qk_norm=True), "qk-norm"),
    (dict(num_classes=0), "classifier head"),
])
def test_unsupported_models_are_refused(kwargs, match):
    model = VisionTransformer(**{**COMMON, **kwargs})
    with pytest.raises(UnsupportedModelError, match=match):
        twin_for(model)


def test_non_vit_model_is_refused():
    with pytest.raises(UnsupportedModelError, match="no LRP twin"):
        twin_for(torch.nn.Linear(3, 3))


def test_bad_inputs():
    model = make_vit("plain")
    x = images(2)
    cases = [
        (dict(pixel_values=x[:, :, :16]), "does not match the model's 32x32"),
        (dict(pixel_values=x[:, :2]), "shape"),
        (dict(pixel_values=x[:0]), "empty batch"),
        (dict(pixel_values=(x * 255).long()), "floating point"),
        (dict(pixel_values=x.numpy()), "must be a tensor"),
        (dict(pixel_values=x.clone().fill_(float("nan"))), "NaN"),
        (dict(pixel_values=x, aggregation="eq11"), "not defined for vision"),
        (dict(pixel_values=x, method="pa_lrp_no_multisink"), "single sink"),
        (dict(pixel_values=x, attention_mask=torch.ones(2, 17)), "attention_mask"),
        (dict(pixel_values=x, rules="no_such_rules"), "unknown rules"),
        (dict(pixel_values=x, attention="flash"), "unknown attention"),
        (dict(pixel_values=x, rules=Composite("bad_roles", linear_gamma={"fc1": 0.1})), "unknown layer roles"),
    ]
    for overrides, match in cases:
        kwargs = {"method": "pa_lrp", "rules": "official_vit", **overrides}
        pixels = kwargs.pop("pixel_values")
        with pytest.raises(BadInputError, match=match):
            explain(model, pixels, **kwargs)
    # a single image without batch dimension is accepted
    assert explain(model, x[0], method="pa_lrp", rules="official_vit").scores.shape == (1, 32, 32)
    with pytest.raises(BadInputError, match="multiple of the patch size"):
        explain(make_vit("dynamic"), images(1, (36, 32)), method="pa_lrp", rules="official_vit")


# ------------------------------------------------------------------------------------------------ loading
def test_load_local_official_checkpoint():
    ckpt = OFFICIAL_VISION / "deit_d2.pth"
    model = load_timm_vit("deit_tiny_patch16_224", checkpoint=ckpt, embed_dim=64, depth=2, num_heads=2, num_classes=10)
    assert not model.training
    state = torch.load(ckpt, map_location="cpu")["model"]
    assert torch.equal(model.pos_embed, state["pos_embed"]) and torch.equal(model.head.weight, state["head.weight"])
    assert isinstance(twin_for(model), VitTwin)


def test_load_errors(tmp_path):
    with pytest.raises(UnsupportedModelError, match="unknown timm model"):
        load_timm_vit("no_such_model_xyz", pretrained=False)
    with pytest.raises(MissingDataError, match="does not exist"):
        load_timm_vit(checkpoint=tmp_path / "missing.pth")
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(MissingDataError, match="cannot read"):
        load_timm_vit(checkpoint=garbage)
    with pytest.raises(BadInputError, match="does not fit deit_tiny_patch16_224"):  # 192-dim default vs 64-dim file
        load_timm_vit("deit_tiny_patch16_224", checkpoint=OFFICIAL_VISION / "deit_d2.pth", depth=2, num_classes=10)
    # the hub is offline in the tests (conftest): fail fast with a clear message, never hang
    start = time.monotonic()
    with pytest.raises(MissingDataError, match="fb_in1k"):
        load_timm_vit("deit_tiny_patch16_224", pretrained=True)
    assert time.monotonic() - start < 30


def test_load_random_distilled_model_is_supported():
    model = load_timm_vit("deit_tiny_distilled_patch16_224", pretrained=False, depth=1, embed_dim=24, num_heads=2,
                      num_classes=3)
    assert VitTwin(model).distilled
    assert get_composite("attnlrp_gamma").gamma_for("patch_embed") == 100.0


def test_pretrained_weights_come_from_the_local_hub_cache(tmp_path, monkeypatch):
    """The ``.fb_in1k`` route without network: a cached file is loaded through timm's pretrained machinery."""
    from palrp_bench.models import loading

    kwargs = dict(depth=1, embed_dim=24, num_heads=2)  # 1000 classes: timm re-initialises a head of another size
    source = load_timm_vit("deit_tiny_patch16_224", pretrained=False, **kwargs)
    cached = tmp_path / "pytorch_model.bin"
    torch.save(source.state_dict(), cached)
    asked = []
    monkeypatch.setattr(loading, "cached_hub_file", lambda repo: asked.append(repo) or str(cached))
    model = load_timm_vit("deit_tiny_patch16_224", pretrained=True, **kwargs)
    assert asked == ["timm/deit_tiny_patch16_224.fb_in1k"]
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), source.state_dict().values()))


# ------------------------------------------------------------------------------- stabilisers at their places
class _EpsRule(torch.autograd.Function):
    """Reference op (independent of rules.stabilize): identity forward; gradient times z / (z + eps)."""

    @staticmethod
    def forward(ctx, z, eps):
        ctx.save_for_backward(z)
        ctx.eps = eps
        return z.clone()

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * z / (z + ctx.eps), None


def _eps(z, eps):
    return _EpsRule.apply(z, eps) if eps else z


def official_vit_reference(model, x, stab):
    """The official vision relprop chain written out for a timm ViT in Gradient x Input form (``models/model.py`` and
    ``modules/layers_ours.py`` of the official code; rules as in palrp_bench/lrp/stabilizers.py OFFICIAL_VISION):
    ``Add`` (pos, residuals), ``Clone`` (residual branch points), std-constant ``CustomLRPLayerNorm``, epsilon
    ``qkv`` / ``proj``, value path of the ``einsum`` ``A @ V`` with half its relevance, Zennit gamma on the MLP,
    the head and the patch conv, ``IndexSelect`` of the CLS row. Returns the pixel relevance (start relevance 1)."""
    def norm(module, h, eps):
        c = h - h.mean(-1, keepdim=True)
        y = c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + module.eps).detach() * module.weight + module.bias
        return _eps(y, eps)

    def gamma(module, h, g):
        return gamma_linear(h, module.weight, module.bias, g, stabilizer=stab.gamma)

    pixels = x.clone().requires_grad_(True)
    pe = model.patch_embed.proj
    z = gamma_conv2d(pixels, pe.weight, pe.bias, 100.0, stride=pe.stride, stabilizer=stab.gamma)
    b, d = z.shape[0], z.shape[1]
    h = torch.cat([model.cls_token.detach().expand(b, -1, -1), z.flatten(2).transpose(1, 2)], 1)
    h = _eps(h + model.pos_embed.detach(), stab.add)
    for blk in model.blocks:
        h = _eps(h, stab.copy)
        a = norm(blk.norm1, h, stab.norm)
        heads = blk.attn.num_heads
        qkv = _eps(torch.nn.functional.linear(a, blk.attn.qkv.weight, blk.attn.qkv.bias), stab.linear)
        q, k, v = qkv.reshape(b, -1, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        weights = torch.softmax(q @ k.transpose(-1, -2) * blk.attn.scale, -1).detach()  # A dropped (cp rule)
        o = _eps(weights @ v, stab.av)
        o = 0.5 * o + 0.5 * o.detach()  # half of the relevance of A @ V to the value path
        o = _eps(torch.nn.functional.linear(o.transpose(1, 2).reshape(b, -1, d), blk.attn.proj.weight,
                                            blk.attn.proj.bias), stab.linear)
        h = _eps(_eps(h + o, stab.add), stab.copy)
        m = norm(blk.norm2, h, stab.norm)
        m = gamma(blk.mlp.fc1, m, 0.05)
        m = m * (blk.mlp.act(m) / m).detach()  # identity rule on GELU
        h = _eps(h + gamma(blk.mlp.fc2, m, 0.05), stab.add)
    cls = _eps(norm(model.norm, h, stab.final_norm)[:, 0], stab.copy)
    logits = gamma(model.head, cls, 0.05)
    explained = logits.max(-1).values
    (grad,) = torch.autograd.grad(explained, pixels, seed_gradient(explained, "unit"))
    return (pixels * grad).detach()


@pytest.mark.parametrize("field", ["linear", "add", "av", "norm", "final_norm", "gamma", "copy", "all"])
def test_stabilisers_sit_where_the_official_rules_put_them(field):
    """Each field of the official vision set, alone and all together (large eps so that each one matters), against
    the written-out official relprop chain: equal to float64 rounding. (The fixture comparison in
    test_deit_official.py cannot see the linear, gamma, copy and A V stabilisers: they are below its float32
    resolution.)"""
    large = dict(linear=0.11, add=0.13, av=0.07, norm=0.17, final_norm=0.19, gamma=0.05, copy=0.23)
    stab = Stabilizers("test", **(large if field == "all" else {field: large[field]}))
    model = make_vit("plain")
    x = images(2)
    theirs = official_vit_reference(model, x, stab).sum(1)
    ours = explain(model, x, method="attnlrp", rules="official_vit", stabilizers=stab).semantic
    exact = explain(model, x, method="attnlrp", rules="official_vit", stabilizers="none").semantic
    scale = theirs.abs().max()
    assert (ours - theirs).abs().max() < 1e-10 * scale
    assert (exact - theirs).abs().max() > 1e-4 * scale, "the stabiliser must matter (non-trivial test)"
