"""Agreement of the DeiT twin with the official PA-LRP vision code (commit 51eb418) on the shared fixture: a depth-2
ViT loaded from the official checkpoint format, two ImageNet-normalised 224x224 images, the three vision rows
(AttnLRP, PE only, Ours) for the predicted and the target class (PROTOCOL.md section 1).

The official rules carry stabilisers that the twin (eps -> 0) leaves out: ``R / (z + 1e-6)`` in every add (the
position-embedding add and both residuals), ``R / (Z + eps_LN)`` in the std-constant LayerNorm, ``R / (Y + 1e-8)`` in
the epsilon linears, ``R / (2 Y + 1e-6)`` in ``A @ V`` and Zennit's sign-aware ``1e-6`` in the gamma rule. They move
single elements whose pre-activation is within ~1e-6 of zero, so the twin agrees to ~1e-3 of each array's maximum.
``test_official_stabilisers_explain_the_residual`` re-adds them (a test-only subclass) and agreement tightens to
float32 noise (~2e-5), which shows the residual is nothing but those epsilons.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from palrp_bench import api
from palrp_bench.lrp import rules
from palrp_bench.lrp.gamma import gamma_conv2d, gamma_linear
from palrp_bench.models import vit as vit_module
from palrp_bench.models.vit import VitForward, VitTwin

DATA = Path(__file__).resolve().parents[1] / "data" / "official" / "vision"
METHODS = ("attnlrp", "pa_lrp", "pe_only")


@pytest.fixture(scope="module")
def official():
    model = VisionTransformer(embed_dim=64, depth=2, num_heads=2, num_classes=10)
    model.load_state_dict(torch.load(DATA / "deit_d2.pth", map_location="cpu")["model"], strict=True)
    model.norm.eps = 1e-5  # the official final norm is nn.LayerNorm's default
    model.eval()
    images = torch.load(DATA / "images_norm.pt")
    ref = dict(np.load(DATA / "deit_d2_maps.npz"))
    return model, images, ref


def compare(twin, images, ref, target_kind, methods=METHODS, monkeypatch=None):
    """Max |ours - official| / max |official| per array, for every method, through the public ``explain``
    (with ``monkeypatch``, the given twin instance stands in for the model's own)."""
    target = None if target_kind == "pred" else torch.as_tensor(ref["target"])
    if monkeypatch is not None:
        monkeypatch.setattr(api, "twin_for", lambda model: twin)
    rel = {}
    for method in methods:
        e = api.explain(twin.model, images, method=method, rules="official_vit", target=target)
        arrays = {
            f"{method}_{target_kind}": e.scores,
            f"{target_kind}_sem_pixel": e.semantic,
            f"{target_kind}_sem_token": e.extras["patch_semantic"].flatten(1),
            f"{target_kind}_sem_cls": e.extras["cls_semantic"],
            f"{target_kind}_pos_patch": e.positional,
            f"{target_kind}_pos_cls": e.extras["cls_positional"],
        }
        for key, ours in arrays.items():
            theirs = ref[key]
            assert ours.shape == theirs.shape, key
            rel[key] = float(np.abs(ours.numpy() - theirs).max() / np.abs(theirs).max())
        assert e.target.tolist() == ref[target_kind].tolist()
    return rel


def test_logits_and_prediction(official):
    model, images, ref = official
    leaf = images.clone().requires_grad_(True)
    logits = VitTwin(model).forward(leaf, "official_vit").logits.detach()
    assert np.abs(logits.numpy() - ref["logits"]).max() < 1e-5
    assert logits.argmax(-1).tolist() == ref["pred"].tolist()
    assert ref["pred"].tolist() != ref["target"].tolist(), "the fixture explains two different classes"
    assert json.loads((DATA / "targets.json").read_text()) == ref["target"].tolist()


@pytest.mark.parametrize("target_kind", ["pred", "target"])
def test_maps_agree_with_official_code(official, target_kind):
    model, images, ref = official
    rel = compare(VitTwin(model), images, ref, target_kind)
    worst = max(rel, key=rel.get)
    assert rel[worst] < 2e-3, f"{worst}: {rel[worst]:.2e}"
    # the large terms (CLS relevance) are far tighter than the per-pixel / per-patch arrays
    assert rel[f"{target_kind}_sem_cls"] < 2e-4 and rel[f"{target_kind}_pos_cls"] < 2e-4


# ---------------------------------------------------------------- the residual is the official stabilisers
class _Stabilise(torch.autograd.Function):
    """Identity forward; backward multiplies by ``z / (z + eps)``: the official ``R / (z + eps)`` in GxI form."""

    @staticmethod
    def forward(ctx, z, eps):
        ctx.save_for_backward(z)
        ctx.eps = eps
        return z.view_as(z)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * z / (z + ctx.eps), None


def _eps(z, eps):
    return _Stabilise.apply(z, eps)


class OfficialStabilisedTwin(VitTwin):
    """The twin with the official code's stabilisers re-added (test-only; official_vit wiring hard-coded)."""

    def forward(self, pixels, composite, *, attention="sdpa", recorder=None):
        model, b = self.model, pixels.shape[0]
        tokens, grid = self._embed_patches(pixels, composite)
        prefix = model.cls_token.detach().expand(b, -1, -1).clone().requires_grad_(True)
        pos = self.position_table(grid).expand(b, -1, -1).clone().requires_grad_(True)
        x = _eps(torch.cat([prefix, tokens], 1) + pos, 1e-6)
        for blk in self.blocks:
            x = _eps(x + self._attention(blk.attn, self._norm(blk.norm1, x, composite), composite, attention,
                                         recorder), 1e-6)
            x = _eps(x + self._mlp(blk.mlp, self._norm(blk.norm2, x, composite), composite), 1e-6)
        logits = vit_module.gamma_module(model.head, self._norm(model.norm, x, composite)[:, 0], 0.05)
        return VitForward(logits, pixels, tokens, prefix, pos, grid)

    @staticmethod
    def _norm(module, x, composite):
        if isinstance(module, torch.nn.Identity):
            return x
        return _eps(VitTwin._norm(module, x, composite), module.eps)

    def _attention(self, attn, h, composite, attention, recorder):
        b, n, _ = h.shape
        q, k, v = _eps(attn.qkv(h), 1e-8).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        o = rules.attention(q, k, v, mask=None, causal=False, scale=attn.scale, weights_share=0.0, value_share=1.0,
                            qk_share=0.5)
        o = rules.scale_grad(_eps(o, 0.5e-6), 0.5)  # R / (2 Y + 1e-6), then half to the value path
        return _eps(attn.proj(o.transpose(1, 2).reshape(b, n, -1)), 1e-8)


def _zennit_gamma_module(module, x, gamma):
    if gamma is None:
        return module(x)
    if isinstance(module, torch.nn.Conv2d):
        return gamma_conv2d(x, module.weight, module.bias, gamma, stride=module.stride,
                                        padding=module.padding, stabilizer=1e-6)
    return gamma_linear(x, module.weight, module.bias, gamma, stabilizer=1e-6)


@pytest.mark.parametrize("target_kind", ["pred", "target"])
def test_official_stabilisers_explain_the_residual(official, target_kind, monkeypatch):
    model, images, ref = official
    monkeypatch.setattr(vit_module, "gamma_module", _zennit_gamma_module)
    rel = compare(OfficialStabilisedTwin(model), images, ref, target_kind, methods=("pa_lrp",),
                  monkeypatch=monkeypatch)
    worst = max(rel, key=rel.get)
    assert rel[worst] < 1e-4, f"{worst}: {rel[worst]:.2e}"
