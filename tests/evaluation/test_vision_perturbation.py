"""Vision perturbation protocol (PROTOCOL.md section 3) against the official fixture and a slow reference."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.vision_perturbation import (IMAGENET_MEAN, IMAGENET_STD, perturbed_logits,
                                                        resolve_normalization, vision_perturbation_curves)
from palrp_bench.metrics.perturbation import perturbation_auc, step_pixel_counts

VISION = Path(__file__).resolve().parents[1] / "data" / "official" / "vision"


@pytest.fixture(scope="module")
def fixture_vit():
    from timm.models.vision_transformer import VisionTransformer
    model = VisionTransformer(embed_dim=64, depth=2, num_heads=2, num_classes=10)
    model.load_state_dict(torch.load(VISION / "deit_d2.pth", map_location="cpu")["model"], strict=True)
    model.norm.eps = 1e-5
    return model.eval()


@pytest.fixture(scope="module")
def fixture_data():
    maps = np.load(VISION / "random_maps.npz")
    return {"images": torch.load(VISION / "images_raw.pt"),
            "targets": torch.tensor(json.loads((VISION / "targets.json").read_text())),
            "pred_maps": torch.from_numpy(maps["rnd_pred"]), "target_maps": torch.from_numpy(maps["rnd_target"]),
            "official": json.loads((VISION / "pert_random_maps.json").read_text())["methods"]["attnlrp"]}


@pytest.mark.parametrize("positive, sign", [(True, "pos"), (False, "neg")])
def test_official_per_sample_curves(fixture_vit, fixture_data, positive, sign):
    d, ref = fixture_data, fixture_data["official"]
    top = vision_perturbation_curves(fixture_vit, d["images"], d["pred_maps"], None, positive)
    target = vision_perturbation_curves(fixture_vit, d["images"], d["target_maps"], d["targets"], positive)
    assert top.shape == (2, 9) and top.dtype == torch.float32
    assert top.tolist() == ref["per_sample"][f"{sign}_top"]
    assert target.tolist() == ref["per_sample"][f"{sign}_target"]
    assert perturbation_auc(top) == pytest.approx(100 * ref["summary"][f"{sign}_auc_top"], abs=1e-9)
    assert perturbation_auc(target) == pytest.approx(100 * ref["summary"][f"{sign}_auc_target"], abs=1e-9)


@pytest.mark.parametrize("positive, sign", [(True, "pos"), (False, "neg")])
def test_official_mean_logit_and_probability_curves(fixture_vit, fixture_data, positive, sign):
    """The 0/1 curves are coarse; the official mean logit / probability of the originally predicted class at
    each step pins the exact pixels removed (to float32 rounding)."""
    d, agg = fixture_data, fixture_data["official"]["aggregate"]
    logits = perturbed_logits(fixture_vit, d["images"], d["pred_maps"], positive, include_original=True)
    pred = logits[:, 0].argmax(-1)
    index = pred[:, None, None].expand(-1, 9, 1)
    mean_logit = logits[:, 1:].gather(2, index)[..., 0].mean(0).numpy()
    mean_prob = logits[:, 1:].softmax(-1).gather(2, index)[..., 0].mean(0).numpy()
    key = f"full_lrp_GammaLinear_gammaConv_{sign}"
    np.testing.assert_allclose(mean_logit, agg[f"{key}_logits"], rtol=0, atol=5e-6)
    np.testing.assert_allclose(mean_prob, agg[f"{key}_probalities"], rtol=0, atol=2e-6)


def test_batch_size_does_not_change_the_results(fixture_vit, fixture_data):
    d = fixture_data
    full = perturbed_logits(fixture_vit, d["images"], d["pred_maps"], True, include_original=True)
    # 20 images in chunks of 7, 7, 6: chunks cross the boundary between the two samples
    chunked = perturbed_logits(fixture_vit, d["images"], d["pred_maps"], True, include_original=True, batch_size=7)
    torch.testing.assert_close(chunked, full, rtol=0, atol=1e-4)
    curves = vision_perturbation_curves(fixture_vit, d["images"], d["pred_maps"], batch_size=5)
    assert curves.tolist() == vision_perturbation_curves(fixture_vit, d["images"], d["pred_maps"]).tolist()


class _Recorder(torch.nn.Module):
    """Linear classifier on 6x6 images that records every input batch it sees."""

    def __init__(self, pretrained_cfg=None):
        super().__init__()
        self.linear = torch.nn.Linear(3 * 6 * 6, 4)
        torch.nn.init.normal_(self.linear.weight, generator=torch.Generator().manual_seed(0))
        self.seen: list[torch.Tensor] = []
        if pretrained_cfg is not None:
            self.pretrained_cfg = pretrained_cfg

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return self.linear(x.flatten(1))


def _slow_reference(model, images, maps, positive, mean, std):
    """Protocol text, one sample and one step at a time: ReLU, min-max, order by (value, index), zero the
    first int(H*W*p) pixels of the raw image, normalise, classify."""
    out = []
    for img, m in zip(images, maps):
        v = m.clamp(min=0).double()
        v = (v - v.min()) / (v.max() - v.min())
        flat = v.reshape(-1).tolist()
        order = sorted(range(len(flat)), key=lambda i: ((-flat[i] if positive else flat[i]), i))
        rows = []
        for k in step_pixel_counts(len(flat)):
            x = img.clone().reshape(3, -1)
            x[:, order[:k]] = 0.0
            x = x.reshape(1, *img.shape)
            x = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
            with torch.no_grad():
                rows.append(model(x)[0])
        out.append(torch.stack(rows))
    return torch.stack(out)


@pytest.mark.parametrize("positive", [True, False])
def test_matches_slow_reference_with_ties_and_pretrained_cfg(positive):
    g = torch.Generator().manual_seed(1)
    images = torch.rand(3, 3, 6, 6, generator=g)
    maps = torch.randint(-2, 3, (3, 6, 6), generator=g).float()  # ReLU + few values -> heavy ties
    cfg = {"mean": (0.5, 0.5, 0.5), "std": (0.25, 0.5, 1.0)}
    model = _Recorder(cfg).eval()
    fast = perturbed_logits(model, images, maps, positive, batch_size=4)
    slow = _slow_reference(model, images, maps, positive, cfg["mean"], cfg["std"])
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-5)


def test_removed_pixels_are_black_before_normalisation_and_forwards_are_stacked():
    images = torch.full((2, 3, 6, 6), 0.5)
    maps = torch.arange(72.0).reshape(2, 6, 6)
    model = _Recorder().eval()
    vision_perturbation_curves(model, images, maps, batch_size=None)
    assert len(model.seen) == 1 and model.seen[0].shape[0] == 2 * (1 + 9)  # originals + 9 steps, one forward
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    black, grey = (0 - mean) / std, (0.5 - mean) / std
    step1 = model.seen[0][1]  # sample 0, p = 0.1: int(36 * .1) = 3 most relevant pixels = flat 35, 34, 33
    flat = step1.reshape(3, -1)
    torch.testing.assert_close(flat[:, 33:], black.reshape(3, 1).expand(3, 3))
    torch.testing.assert_close(flat[:, :33], grey.reshape(3, 1).expand(3, 33))
    model.seen.clear()
    vision_perturbation_curves(model, images, maps, batch_size=8)
    assert [x.shape[0] for x in model.seen] == [8, 8, 4]


def test_curves_are_agreement_with_prediction_or_label():
    class Brightness(torch.nn.Module):
        # class 1 when the (normalised) image is bright on average, else class 0
        def forward(self, x):
            s = x.mean(dim=(1, 2, 3))
            return torch.stack([-s, s], dim=1)

    images = torch.ones(1, 3, 10, 10)
    maps = torch.rand(1, 10, 10, generator=torch.Generator().manual_seed(3))
    model = Brightness().eval()
    identity = (lambda x: x - 0.5)
    # removing k of 100 white pixels: mean of (x - .5) is (100 - 2k) / 200 -> class 1 while k < 50
    predicted = vision_perturbation_curves(model, images, maps, normalize=identity)
    assert predicted.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0, 0]]  # k = 50 gives 0 -> tie -> argmax 0
    target0 = vision_perturbation_curves(model, images, maps, labels=torch.tensor([0]), normalize=identity)
    assert target0.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, 1]]
    # the reference is the prediction on the *unperturbed* image: here it flips already at p = 0.1
    flips_at_once = vision_perturbation_curves(model, images, maps, normalize=lambda x: x - 0.95)
    assert flips_at_once.tolist() == [[0] * 9]


def test_normalisation_resolution():
    x = torch.full((1, 3, 1, 1), 0.5)
    default = resolve_normalization(torch.nn.Identity())(x)
    torch.testing.assert_close(default.reshape(3), (0.5 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD))
    pair = resolve_normalization(torch.nn.Identity(), ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))(x)
    assert torch.count_nonzero(pair) == 0
    with pytest.raises(BadInputError):
        resolve_normalization(torch.nn.Identity(), (1, 2, 3))


def test_user_errors():
    model = _Recorder().eval()
    images, maps = torch.rand(2, 3, 6, 6), torch.rand(2, 6, 6)
    with pytest.raises(BadInputError):
        vision_perturbation_curves(_Recorder().train(), images, maps)
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images * 255, maps)  # not raw [0, 1] pixels
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps[:, :5])
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps, labels=torch.tensor([0, 9]))
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps, labels=torch.tensor([0.0, 1.0]))
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps, batch_size=0)
