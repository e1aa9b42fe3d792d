"""Embedded synthetic vision suite and its shipped tiny ViT (offline stand-ins for ImageNet and DeiT).

Each image is ``64 x 64`` RGB: a low-saturation colour gradient cluttered with small low-saturation
rectangles and pixel noise, plus ONE large, saturated object of random shape (disk, square, triangle,
cross; 9-44% of the image). **The class depends on what the object is and where it is**: class =
(colour family: red, yellow, green, blue) x (half of the image holding the object's centre: left, right),
8 classes, index ``colour * 2 + side`` (:data:`SYNTHETIC_CLASSES`, e.g. ``"red-left"``, ``"red-right"``).
The object's centre lies 4 to ``min(r, 31 - r)`` pixels (``r`` its half-size) from the vertical midline, so
the shape reaches the midline and in 97% of the images crosses it: the side is the half holding the larger
part of the (left-right symmetric) shape, and moving the same object across the midline changes its class.
A patch's content can therefore not tell the side: a ViT has to read it from its position embedding (the
shipped tiny ViT puts about a third of its relevance on the learned PE, docs/evaluation.md).

Only the object is saturated, so the object mask is the only place the class evidence lives, while the
clutter gives the background edges and texture for explanations to be distracted by. That makes the suite
meaningful for both docs/protocol.md section 3 (blackening the most relevant pixels should destroy the prediction;
blackening the pixels that carry the object's position moves it to the other side) and section 4 (the object
mask is an exact segmentation ground truth).

Samples are deterministic: sample ``i`` of ``(seed, split)`` is drawn from its own generator seeded with
``(seed, split, i)``, so it does not depend on ``n`` (a longer list extends a shorter one) and its
``sample_id`` (``synthetic-{split}-s{seed}-{i:05d}``) is stable across runs and machines.

:func:`load_tiny_vit` builds the timm ``VisionTransformer`` trained on this task by
``scripts/train_tiny_vit.py`` from ``assets/vision/tiny_vit_synthetic.json`` and loads its weights offline.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..errors import BadInputError, MissingDataError
from .base import ImageSample, check_generator_args
from .registry import Option, register_dataset

#: Colour families of the object (the "what" half of the class) and their centre hue (HSV hue in [0, 1]).
SYNTHETIC_COLOURS: tuple[str, ...] = ("red", "yellow", "green", "blue")
SYNTHETIC_COLOUR_HUES: tuple[float, ...] = (0.0, 1.0 / 6.0, 1.0 / 3.0, 2.0 / 3.0)
_HUE_JITTER = 0.04
#: Image halves the object can lie in (the "where" half of the class).
SYNTHETIC_SIDES: tuple[str, ...] = ("left", "right")
#: Class index -> name: ``colour * len(SYNTHETIC_SIDES) + side``, e.g. 0 = red-left, 1 = red-right.
SYNTHETIC_CLASSES: tuple[str, ...] = tuple(f"{c}-{s}" for c in SYNTHETIC_COLOURS for s in SYNTHETIC_SIDES)
#: Object shapes (drawn uniformly; not the class).
SYNTHETIC_SHAPES: tuple[str, ...] = ("disk", "square", "triangle", "cross")
#: Side of the square images, in pixels.
SYNTHETIC_IMAGE_SIZE = 64
#: Independent sample streams; a split's samples never coincide with another split's.
SYNTHETIC_SPLITS: dict[str, int] = {"train": 0, "val": 1, "test": 2}

#: Object half-size range (pixels): objects span roughly 3.5-6 patches of 8 px.
_OBJECT_HALF_SIZE = (14.0, 24.0)
#: Smallest distance (pixels) of the object's centre from the vertical midline (the side is never a toss-up).
_SIDE_MARGIN = 4.0
#: Number of clutter rectangles per image and their side range (pixels).
_CLUTTER_COUNT = (10, 22)
_CLUTTER_SIDE = (2, 7)
_NOISE_STD = 0.03

ASSET_DIR = Path(__file__).resolve().parent.parent / "assets" / "vision"
TINY_VIT_NAME = "tiny_vit_synthetic"


def hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    """One HSV colour (all in [0, 1]) to RGB in [0, 1]."""
    i = int(h * 6.0) % 6
    f = h * 6.0 - int(h * 6.0)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    return np.array([(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i], dtype=np.float32)


def shape_mask(shape: str, cy: float, cx: float, r: float, size: int) -> np.ndarray:
    """Boolean ``[size, size]`` mask of one shape with centre ``(cy, cx)`` and half-size ``r`` (pixel centres
    at ``k + 0.5``)."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    dy, dx = y - cy, x - cx
    if shape == "disk":
        return dy * dy + dx * dx <= r * r
    if shape == "square":  # side 1.7 r: about the disk's area
        half = 0.85 * r
        return (np.abs(dy) <= half) & (np.abs(dx) <= half)
    if shape == "triangle":  # upright isosceles, apex at the top, base width 2 r
        return (dy >= -r) & (dy <= r) & (np.abs(dx) <= (dy + r) / 2.0)
    if shape == "cross":  # plus sign, arm width 2 r / 3
        arm = r / 3.0
        return ((np.abs(dy) <= arm) & (np.abs(dx) <= r)) | ((np.abs(dx) <= arm) & (np.abs(dy) <= r))
    raise BadInputError(f"unknown synthetic shape {shape!r}", f"use one of {SYNTHETIC_SHAPES}")


def draw_background(rng: np.random.Generator, size: int) -> np.ndarray:
    """``[3, size, size]``: a low-saturation gradient between two random colours along a random direction, cluttered
    with small low-saturation rectangles of any hue and brightness (what objects are drawn on)."""
    # Background: a low-saturation gradient between two random colours along a random direction.
    c0 = hsv_to_rgb(rng.random(), rng.uniform(0.0, 0.35), rng.uniform(0.35, 0.9))
    c1 = hsv_to_rgb(rng.random(), rng.uniform(0.0, 0.35), rng.uniform(0.35, 0.9))
    angle = rng.uniform(0, 2 * np.pi)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / (size - 1)
    t = np.clip(0.5 + (np.cos(angle) * (x - 0.5) + np.sin(angle) * (y - 0.5)), 0.0, 1.0)
    image = (1 - t)[None] * c0[:, None, None] + t[None] * c1[:, None, None]

    # Clutter: small low-saturation rectangles of any hue and brightness, drawn under the objects.
    for _ in range(int(rng.integers(_CLUTTER_COUNT[0], _CLUTTER_COUNT[1] + 1))):
        h, w = (int(v) for v in rng.integers(_CLUTTER_SIDE[0], _CLUTTER_SIDE[1] + 1, size=2))
        top, left = int(rng.integers(0, size - h + 1)), int(rng.integers(0, size - w + 1))
        image[:, top:top + h, left:left + w] = hsv_to_rgb(rng.random(), rng.uniform(0.0, 0.3),
                                                           rng.uniform(0.1, 1.0))[:, None, None]
    return image


def _render(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray, int, dict]:
    """Draw one image ``[3, size, size]`` in [0, 1], its object mask, its class and metadata."""
    image = draw_background(rng, size)

    # The object: a saturated shape of random form, fully visible, whose centre lies in one half of the image,
    # _SIDE_MARGIN to min(r, 31 - r) px from the vertical midline (so the shape reaches it and mostly crosses
    # it). The class is its colour family AND that half: the same object across the midline is another class.
    colour_index = int(rng.integers(0, len(SYNTHETIC_COLOURS)))
    side = int(rng.integers(0, len(SYNTHETIC_SIDES)))
    label = colour_index * len(SYNTHETIC_SIDES) + side
    shape = SYNTHETIC_SHAPES[int(rng.integers(0, len(SYNTHETIC_SHAPES)))]
    r = float(rng.uniform(*_OBJECT_HALF_SIZE))
    offset = float(rng.uniform(_SIDE_MARGIN, min(r, size / 2 - r - 1)))
    cx = size / 2 + (offset if side else -offset)
    cy = float(rng.uniform(r + 1, size - r - 1))
    mask = shape_mask(shape, cy, cx, r, size)
    hue = (SYNTHETIC_COLOUR_HUES[colour_index] + rng.uniform(-_HUE_JITTER, _HUE_JITTER)) % 1.0
    colour = hsv_to_rgb(hue, rng.uniform(0.7, 1.0), rng.uniform(0.6, 1.0))
    shade = 1.0 + 0.08 * rng.standard_normal((1, size, size)).astype(np.float32)  # mild texture
    image = np.where(mask[None], colour[:, None, None] * shade, image)

    image = image + _NOISE_STD * rng.standard_normal(image.shape).astype(np.float32)
    meta = {"class_name": SYNTHETIC_CLASSES[label], "colour_name": SYNTHETIC_COLOURS[colour_index],
            "side": SYNTHETIC_SIDES[side], "shape": shape, "center": (cy, cx), "half_size": r,
            "colour": [float(c) for c in colour]}
    return np.clip(image, 0.0, 1.0).astype(np.float32), mask, label, meta


def make_synthetic_vision(n: int, seed: int = 0, split: str = "test") -> list[ImageSample]:
    """``n`` deterministic synthetic samples of ``split`` (``train`` / ``val`` / ``test``) under ``seed``.

    Returns :class:`ImageSample` with ``image`` ``[3, 64, 64]`` float32 in [0, 1] (not normalised),
    ``label`` the class ``colour * 2 + side`` (:data:`SYNTHETIC_CLASSES`), ``mask`` ``[64, 64]`` int64 in {0, 1}
    (the object), ``meta`` with ``class_name``, ``colour_name``, ``side``, ``shape``, ``center`` ``(cy, cx)``.
    Sample ``i`` depends only on ``(seed, split, i)``.
    """
    check_generator_args(n, seed, split, SYNTHETIC_SPLITS)
    samples = []
    for i in range(int(n)):
        rng = np.random.default_rng([int(seed), SYNTHETIC_SPLITS[split], i])
        image, mask, label, meta = _render(rng, SYNTHETIC_IMAGE_SIZE)
        meta.update(split=split, seed=int(seed), index=i)
        samples.append(ImageSample(sample_id=f"synthetic-{split}-s{int(seed)}-{i:05d}",
                                   image=torch.from_numpy(image), label=label,
                                   mask=torch.from_numpy(mask.astype(np.int64)), meta=meta))
    return samples


def tiny_vit_paths(asset_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Paths of the tiny ViT's ``(weights .safetensors, config .json)``."""
    base = Path(asset_dir) if asset_dir is not None else ASSET_DIR
    return base / f"{TINY_VIT_NAME}.safetensors", base / f"{TINY_VIT_NAME}.json"


def load_tiny_vit(asset_dir: str | Path | None = None) -> torch.nn.Module:
    """The shipped tiny timm ``VisionTransformer`` trained on :func:`make_synthetic_vision` (eval mode, CPU).

    Built from the json's ``timm_kwargs`` and loaded strictly from the safetensors weights, offline.
    ``model.pretrained_cfg`` carries the ``mean`` / ``std`` used in training (the model expects images
    normalised with them), the ``input_size`` and the class names (``label_names``).
    """
    from safetensors.torch import load_file
    from timm.models.vision_transformer import VisionTransformer

    weights_path, config_path = tiny_vit_paths(asset_dir)
    for path in (weights_path, config_path):
        if not path.is_file():
            raise MissingDataError(f"tiny ViT asset {path} is missing",
                                   "run `python scripts/train_tiny_vit.py` to (re)create it")
    try:
        config = json.loads(config_path.read_text())
        kwargs = dict(config["timm_kwargs"])
        model = VisionTransformer(**kwargs)
        model.load_state_dict(load_file(str(weights_path)), strict=True)
    except (KeyError, ValueError, RuntimeError, TypeError) as exc:
        raise MissingDataError(f"tiny ViT asset in {weights_path.parent} is malformed ({type(exc).__name__})",
                               "run `python scripts/train_tiny_vit.py` to recreate it") from exc
    model.pretrained_cfg = {
        "architecture": TINY_VIT_NAME,
        "mean": tuple(config["mean"]),
        "std": tuple(config["std"]),
        "input_size": (3, kwargs["img_size"], kwargs["img_size"]),
        "num_classes": kwargs["num_classes"],
        "label_names": tuple(config["classes"]),
        "interpolation": "bilinear",
        "crop_pct": 1.0,
    }
    return model.eval()


def save_tiny_vit_checkpoint(folder: str | Path) -> Path:
    """The shipped tiny ViT saved as a timm checkpoint in the hub's format (``timm.models.save_for_hf``: ``config.json``
    naming the timm architecture ``vit_tiny_patch16_224`` with the tiny model's arguments and its normalisation, and
    ``model.safetensors``), as a user's own timm model would be (README "Your own model and data"); timm loads it with
    ``timm.create_model("local-dir:<folder>", pretrained=True)``."""
    import timm
    from timm.models import save_for_hf

    config = json.loads(tiny_vit_paths()[1].read_text())
    kwargs = dict(config["timm_kwargs"])
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs)
    model.load_state_dict(load_tiny_vit().state_dict(), strict=True)
    model.pretrained_cfg = {**model.pretrained_cfg, "mean": tuple(config["mean"]), "std": tuple(config["std"]),
                            "interpolation": "bilinear", "crop_pct": 1.0}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_for_hf(model, str(folder), safe_serialization=True, model_args=kwargs)
    return folder


@register_dataset("synthetic_vision",
                  options=(Option("n", 64, "images"), Option("seed", 0, "generator seed"),
                           Option("split", "test", "train | val | test")),
                  pool_size=lambda options: options["n"])
def _synthetic_vision_dataset(path, limit, options, tokenizer) -> list[ImageSample]:
    """``task.dataset=synthetic_vision``: options ``n``, ``seed``, ``split``."""
    return make_synthetic_vision(int(options["n"]), int(options["seed"]), options["split"])
