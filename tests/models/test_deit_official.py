"""Agreement of the DeiT twin with the official PA-LRP vision code (commit 51eb418) on the shared fixture: a depth-2
ViT loaded from the official checkpoint format, two ImageNet-normalised 224x224 images, the three vision rows
(AttnLRP, PE only, Ours) for the predicted and the target class (docs/protocol.md section 1).

The official rules carry stabilisers (``OFFICIAL_VISION`` in palrp_bench/lrp/stabilizers.py): ``R / (z + 1e-6)`` in
every add (the position-embedding add and both residuals), ``R / (y + eps_LN)`` in the std-constant LayerNorms
(1e-6 in the blocks, 1e-5 in the official final norm), ``R / (Y + 1e-8)`` in the epsilon linears,
``R / (2 Y + 1e-6)`` in ``A @ V``, Zennit's sign-aware 1e-6 in the gamma rule and ``R / (x + 1e-9)`` in the
official copies. ``stabilizers="official"`` (the default under ``protocol="official"``) reproduces them: every array
agrees to <= 5e-5 of its maximum (the issue's requirement; measured 1.65e-5, float32 noise of the official
computation: a float64 twin is 4.5e-5 away from it). The exact rules (``stabilizers="none"``) differ by up to
1.2e-3, and dropping the add, LayerNorm or final-LayerNorm stabiliser breaks the agreement.
"""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from palrp_bench import explain
from palrp_bench.lrp.stabilizers import OFFICIAL_VISION
from palrp_bench.models.vit import VitTwin

DATA = Path(__file__).resolve().parents[1] / "data" / "official" / "vision"
METHODS = ("attnlrp", "pa_lrp", "pe_only")
TOL = 5e-5  # relative to each array's max |value| (the requirement)


@pytest.fixture(scope="module")
def official():
    model = VisionTransformer(embed_dim=64, depth=2, num_heads=2, num_classes=10)
    model.load_state_dict(torch.load(DATA / "deit_d2.pth", map_location="cpu")["model"], strict=True)
    model.norm.eps = 1e-5  # the official final norm is nn.LayerNorm's default
    model.eval()
    images = torch.load(DATA / "images_norm.pt")
    ref = dict(np.load(DATA / "deit_d2_maps.npz"))
    return model, images, ref


def compare(model, images, ref, target_kind, methods=METHODS, stabilizers="official"):
    """Max |ours - official| / max |official| per array, for every method."""
    target = None if target_kind == "pred" else torch.as_tensor(ref["target"])
    rel = {}
    for method in methods:
        e = explain(model, images, method=method, rules="official_vit", target=target, stabilizers=stabilizers)
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
    """protocol=official, stabilizers="official": <= 5e-5 (measured 1.65e-5 pred, 7.7e-6 target)."""
    model, images, ref = official
    rel = compare(model, images, ref, target_kind)
    worst = max(rel, key=rel.get)
    assert rel[worst] <= TOL, f"{worst}: {rel[worst]:.2e}"


@pytest.mark.parametrize("target_kind", ["pred", "target"])
def test_exact_rules_differ_by_the_official_stabilisers(official, target_kind):
    """stabilizers="none" (eps -> 0): measured 1.24e-3 (pred), 6.4e-4 (target), so the check above can fail; the
    large terms (CLS relevance) are far tighter than the per-pixel / per-patch arrays."""
    model, images, ref = official
    rel = compare(model, images, ref, target_kind, stabilizers="none")
    worst = max(rel, key=rel.get)
    assert 5 * TOL < rel[worst] < 2e-3, f"{worst}: {rel[worst]:.2e}"
    assert rel[f"{target_kind}_sem_cls"] < 2e-4 and rel[f"{target_kind}_pos_cls"] < 2e-4


@pytest.mark.parametrize("change", [dict(add=0.0), dict(norm=0.0), dict(final_norm=0.0), dict(final_norm=1e-6)],
                         ids=["add", "norm", "final_norm", "final_norm_deit_eps"])
def test_each_stabiliser_the_fixture_sees_is_needed(official, change):
    """One official stabiliser removed (or the final norm's set to DeiT's own eps 1e-6 instead of the official
    code's 1e-5): measured 1.24e-3, 8.8e-4, 1.1e-4, 9.8e-5 (> 5e-5). The epsilon-linear, gamma and copy stabilisers
    and A @ V's (4.4e-5) are below the fixture's float32 resolution; their rules are tested in tests/lrp."""
    model, images, ref = official
    rel = compare(model, images, ref, "pred", methods=("pa_lrp",),
                  stabilizers=dataclasses.replace(OFFICIAL_VISION, **change))
    assert max(rel.values()) > TOL
