"""Embedded synthetic vision suite and the shipped tiny ViT (palrp_bench/data/synthetic_vision.py)."""
from __future__ import annotations

import colorsys
import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from palrp_bench.data.base import ImageSample
from palrp_bench.data.synthetic_vision import (SYNTHETIC_CLASSES, SYNTHETIC_COLOUR_HUES, SYNTHETIC_COLOURS,
                                               SYNTHETIC_IMAGE_SIZE, SYNTHETIC_SIDES, load_tiny_vit,
                                               make_synthetic_vision, tiny_vit_paths)
from palrp_bench.errors import BadInputError, MissingDataError



def _normalise(images: torch.Tensor, model) -> torch.Tensor:
    mean = torch.tensor(model.pretrained_cfg["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(model.pretrained_cfg["std"]).view(1, 3, 1, 1)
    return (images - mean) / std


@torch.no_grad()
def _predict(model, images: torch.Tensor) -> torch.Tensor:
    return model(_normalise(images, model)).argmax(-1)


def _saturation_value(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    high, low = image.max(0), image.min(0)
    return (high - low) / np.maximum(high, 1e-6), high


def test_samples_have_the_documented_types_and_ranges():
    samples = make_synthetic_vision(20, seed=0, split="test")
    assert len(samples) == 20
    for s in samples:
        assert isinstance(s, ImageSample)
        assert s.image.shape == (3, SYNTHETIC_IMAGE_SIZE, SYNTHETIC_IMAGE_SIZE) and s.image.dtype == torch.float32
        assert 0.0 <= float(s.image.min()) and float(s.image.max()) <= 1.0
        assert s.mask.shape == (SYNTHETIC_IMAGE_SIZE, SYNTHETIC_IMAGE_SIZE) and s.mask.dtype == torch.int64
        assert set(torch.unique(s.mask).tolist()) == {0, 1}
        assert 0 <= s.label < len(SYNTHETIC_CLASSES) and s.meta["class_name"] == SYNTHETIC_CLASSES[s.label]
        # the object is fully inside the image: no mask pixel on the border
        border = torch.cat([s.mask[0], s.mask[-1], s.mask[:, 0], s.mask[:, -1]])
        assert int(border.sum()) == 0 and int(s.mask.sum()) >= 150


def test_determinism_prefix_stability_and_ids():
    a = make_synthetic_vision(12, seed=5, split="train")
    b = make_synthetic_vision(12, seed=5, split="train")
    prefix = make_synthetic_vision(4, seed=5, split="train")
    for x, y in zip(a, b):
        assert x.sample_id == y.sample_id and x.label == y.label
        assert torch.equal(x.image, y.image) and torch.equal(x.mask, y.mask)
    for x, y in zip(prefix, a[:4]):
        assert x.sample_id == y.sample_id and torch.equal(x.image, y.image)
    assert a[0].sample_id == "synthetic-train-s5-00000" and a[11].sample_id == "synthetic-train-s5-00011"
    assert len({s.sample_id for s in a}) == 12
    other_seed = make_synthetic_vision(12, seed=6, split="train")
    other_split = make_synthetic_vision(12, seed=5, split="val")
    for other in (other_seed, other_split):
        assert not any(torch.equal(x.image, y.image) for x, y in zip(a, other))
        assert {s.sample_id for s in other}.isdisjoint({s.sample_id for s in a})


def test_the_class_lives_in_the_object_only():
    """Class = (hue family of the object) x (image half holding the object's centre), index ``colour * 2 + side``.
    The background (gradient + clutter) is low-saturation, so the mask is where the class evidence is (what makes
    segmentation / perturbation metrics meaningful); the side is read off the mask's pixels here, and the shape
    reaches across the midline in most images, so the side is where the larger part of the object is."""
    samples = make_synthetic_vision(400, seed=3, split="val")
    assert SYNTHETIC_CLASSES[:2] == ("red-left", "red-right") and len(SYNTHETIC_CLASSES) == 8
    counts = np.bincount([s.label for s in samples], minlength=len(SYNTHETIC_CLASSES))
    assert counts.min() >= 30  # roughly balanced (expected 50 each)
    half = SYNTHETIC_IMAGE_SIZE // 2
    columns = np.arange(SYNTHETIC_IMAGE_SIZE) + 0.5
    crossing = 0
    for s in samples:
        image, mask = s.image.numpy(), s.mask.numpy().astype(bool)
        colour, side = divmod(s.label, len(SYNTHETIC_SIDES))
        assert s.meta["class_name"] == f"{SYNTHETIC_COLOURS[colour]}-{SYNTHETIC_SIDES[side]}"
        saturation, value = _saturation_value(image)
        hue = colorsys.rgb_to_hsv(*image[:, mask].mean(1))[0]
        assert abs((hue - SYNTHETIC_COLOUR_HUES[colour] + 0.5) % 1.0 - 0.5) < 0.06
        assert saturation[mask].mean() > 0.6
        bright_background = ~mask & (value > 0.3)
        assert (saturation[bright_background] > 0.5).mean() < 0.02
        centre_column = float((mask.sum(0) * columns).sum() / mask.sum())  # the shapes are left-right symmetric
        assert (centre_column > half) == bool(side) and abs(centre_column - half) >= 3.5
        left, right = int(mask[:, :half].sum()), int(mask[:, half:].sum())
        assert (right > left) == bool(side)
        crossing += left > 0 and right > 0
    assert crossing >= 0.8 * len(samples)  # the same object across the midline is another class
    assert len({s.meta["shape"] for s in samples}) == 4  # shapes vary independently of the class


@pytest.mark.parametrize("kwargs", [dict(n=-1), dict(n=2.5), dict(n=True), dict(n=2, split="holdout"),
                                    dict(n=2, seed=-3), dict(n=2, seed="0")])
def test_bad_arguments(kwargs):
    with pytest.raises(BadInputError):
        make_synthetic_vision(**kwargs)


def test_zero_samples():
    assert make_synthetic_vision(0) == []


@pytest.fixture(scope="module")
def tiny_vit():
    return load_tiny_vit()


def test_tiny_vit_asset_is_a_small_learned_pe_vit(tiny_vit):
    from timm.models.vision_transformer import VisionTransformer

    weights, config_path = tiny_vit_paths()
    assert weights.stat().st_size < 2_000_000
    config = json.loads(config_path.read_text())
    assert isinstance(tiny_vit, VisionTransformer) and not tiny_vit.training
    assert isinstance(tiny_vit.pos_embed, torch.nn.Parameter) and tiny_vit.cls_token is not None
    n_patches = (SYNTHETIC_IMAGE_SIZE // config["timm_kwargs"]["patch_size"]) ** 2
    assert tiny_vit.pos_embed.shape == (1, n_patches + 1, config["timm_kwargs"]["embed_dim"])
    assert tiny_vit.pretrained_cfg["mean"] == tuple(config["mean"])
    assert tiny_vit.pretrained_cfg["std"] == tuple(config["std"])
    assert tiny_vit.pretrained_cfg["label_names"] == SYNTHETIC_CLASSES
    assert config["accuracy"]["test"] >= 0.98


def test_tiny_vit_solves_a_fresh_held_out_set(tiny_vit):
    samples = make_synthetic_vision(300, seed=777, split="test")  # never seen in training (seed 0/1)
    images = torch.stack([s.image for s in samples])
    labels = torch.tensor([s.label for s in samples])
    accuracy = (_predict(tiny_vit, images) == labels).float().mean().item()
    assert accuracy >= 0.98, accuracy  # measured 1.000

    # it reads where the object is (the only source of position in a ViT is its position embedding): the
    # mirrored image is predicted as the same colour on the other side
    other_side = labels ^ 1  # class = colour * 2 + side
    assert (_predict(tiny_vit, images.flip(-1)) == other_side).float().mean().item() >= 0.95  # measured 1.000
    # and it reads it from the learned position embedding: with the patch rows of pos_embed shuffled, the colour
    # is still right but the side is a guess (measured: colour 1.000, class 0.453)
    shuffled = copy.deepcopy(tiny_vit)
    order = torch.randperm(shuffled.pos_embed.shape[1] - 1, generator=torch.Generator().manual_seed(0)) + 1
    with torch.no_grad():
        shuffled.pos_embed[0, 1:] = tiny_vit.pos_embed[0, order]
    predicted = _predict(shuffled, images)
    assert (predicted // 2 == labels // 2).float().mean().item() >= 0.95
    assert (predicted == labels).float().mean().item() <= 0.7

    # the evidence is the object: blackening it (docs/protocol.md section 3's perturbation) destroys the
    # prediction, blackening as many background pixels does not
    masks = torch.stack([s.mask for s in samples]).bool()
    no_object = images.masked_fill(masks[:, None], 0.0)
    generator = torch.Generator().manual_seed(0)
    background_hit = torch.zeros_like(masks)
    for i, mask in enumerate(masks):
        candidates = (~mask).flatten().nonzero().squeeze(1)
        chosen = candidates[torch.randperm(len(candidates), generator=generator)[: int(mask.sum())]]
        background_hit[i].view(-1)[chosen] = True
    no_background = images.masked_fill(background_hit[:, None], 0.0)
    assert (_predict(tiny_vit, no_object) == labels).float().mean().item() < 0.5
    assert (_predict(tiny_vit, no_background) == labels).float().mean().item() >= 0.8


def test_missing_or_malformed_asset(tmp_path):
    with pytest.raises(MissingDataError, match="train_tiny_vit.py"):
        load_tiny_vit(tmp_path)
    weights, config = tiny_vit_paths(tmp_path)
    source_weights, source_config = tiny_vit_paths()
    weights.write_bytes(source_weights.read_bytes())
    for broken in ({"mean": [0.5] * 3},  # no timm kwargs
                   {"timm_kwargs": {"img_size": 64, "patch_size": 8, "embed_dim": 8, "depth": 1, "num_heads": 2,
                                    "num_classes": 4}}):  # kwargs that do not fit the weights
        config.write_text(json.dumps(broken))
        with pytest.raises(MissingDataError, match="malformed"):
            load_tiny_vit(tmp_path)


def test_training_script_round_trip(tmp_path):
    """A very short run writes an asset that load_tiny_vit reads back; below --min-accuracy nothing is written."""
    from palrp_bench.finetune import tiny_vit as script

    common = ["--n-train", "32", "--n-test", "16", "--epochs", "1", "--batch-size", "16", "--depth", "1",
              "--dim", "16", "--heads", "2", "--threads", "1"]
    refused = tmp_path / "refused"
    assert script.main(common + ["--out-dir", str(refused), "--min-accuracy", "1.01"]) == 1
    assert not refused.exists()
    assert script.main(common + ["--out-dir", str(tmp_path), "--min-accuracy", "0"]) == 0
    config = json.loads(tiny_vit_paths(tmp_path)[1].read_text())
    assert config["timm_kwargs"]["embed_dim"] == 16 and config["data"]["train"]["n"] == 32
    model = load_tiny_vit(tmp_path)
    assert model.pos_embed.shape == (1, 65, 16)
    assert model(torch.zeros(2, 3, 64, 64)).shape == (2, len(SYNTHETIC_CLASSES))
