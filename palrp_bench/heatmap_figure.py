"""Render image | AttnLRP | PE only | PA-LRP heatmaps side by side for a few images (paper Fig. 1 style).

Works with any ViT the DeiT twin supports (timm ``VisionTransformer`` / DeiT, incl. distilled) and any images.
Maps follow docs/protocol.md section 1 (ReLU'd pixel maps; PE only and PA-LRP paint the per-patch positional relevance
over each patch) and share one scale per image (the largest value of any method), for display only.

Usage::

    python scripts/make_heatmap_figure.py                               # tiny ViT + embedded synthetic images
    python scripts/make_heatmap_figure.py --samples 0,5,25 --out docs/figures/vision_heatmaps.png  # the README figure
    python scripts/make_heatmap_figure.py --model deit_tiny_patch16_224 --checkpoint deit_tiny_patch16_224-a1311bcf.pth \\
        --images my_photos/ --n 4 --out figures/heatmaps.png
    python scripts/make_heatmap_figure.py --images images_raw.pt --rules attnlrp
    python scripts/make_heatmap_figure.py --model deit_tiny_patch16_224 --checkpoint deit_d2.pth \
        --model-kwargs '{"embed_dim": 64, "depth": 2, "num_heads": 2, "num_classes": 10}' --images images_raw.pt

``--model tiny`` (default) is the shipped tiny ViT trained on the synthetic shapes
(``palrp_bench.data.synthetic_vision.load_tiny_vit``); if its asset is not built yet, a random tiny ViT is used
instead (the maps then only show that the pipeline runs). ``--images`` takes a folder of image files, or a ``.pt``
tensor ``[N, 3, H, W]`` with raw pixels in [0, 1]; without it the embedded synthetic test images are used (the first
``--n``, or the indices given by ``--samples``). Images
are resized to the model's input size (no crop, docs/protocol.md section 3) and normalised with the model's mean/std.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .api import explain
from .errors import BadInputError, MissingDataError, PalrpError

COLUMNS = (("attnlrp", "AttnLRP"), ("pe_only", "PE only"), ("pa_lrp", "PA-LRP (Ours)"))
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def random_tiny_vit(num_classes: int = 4, seed: int = 0):
    """A random 64x64 ViT (patch 8, 2 blocks): only shows that the pipeline runs."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    model = VisionTransformer(img_size=64, patch_size=8, embed_dim=64, depth=2, num_heads=2, num_classes=num_classes)
    return model.eval()


def load_model(name: str, checkpoint: str | None, model_kwargs: dict):
    """``tiny`` -> the shipped tiny ViT (random tiny ViT if not built), ``random`` -> random tiny ViT, else a
    timm DeiT/ViT name loaded by :func:`palrp_bench.models.loading.load_timm_vit` (``model_kwargs`` go to timm)."""
    if name == "tiny":
        try:
            from .data.synthetic_vision import load_tiny_vit
            return load_tiny_vit(), "tiny ViT (synthetic shapes, class = colour x image half)"
        except (ImportError, MissingDataError) as err:
            print(f"note: shipped tiny ViT unavailable ({err}); using a random tiny ViT", file=sys.stderr)
            return random_tiny_vit(), "random tiny ViT"
    if name == "random":
        return random_tiny_vit(), "random tiny ViT"
    from .models.loading import load_timm_vit
    return load_timm_vit(name, checkpoint=checkpoint, pretrained=checkpoint is None, **model_kwargs), name


def model_input(model) -> tuple[tuple[int, int], tuple[float, ...], tuple[float, ...], tuple[str, ...] | None]:
    """(input size, mean, std, class names or None) of a timm model."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = tuple(int(s) for s in model.patch_embed.img_size)
    mean = tuple(cfg.get("mean", IMAGENET_MEAN))
    std = tuple(cfg.get("std", IMAGENET_STD))
    return size, mean, std, cfg.get("label_names")


def load_images(source: str | None, n: int, samples: list[int] | None = None) -> tuple[torch.Tensor, list[str]]:
    """Raw images ``[N, 3, H, W]`` in [0, 1] (any size) and their names. Without ``source``: the embedded
    synthetic test images ``samples`` (indices), else the first ``n``."""
    if source is None:
        from .data.synthetic_vision import make_synthetic_vision
        indices = list(range(n)) if samples is None else samples
        pool = make_synthetic_vision(max(indices) + 1, split="test")
        return torch.stack([pool[i].image for i in indices]), [pool[i].sample_id for i in indices]
    if samples is not None:
        raise BadInputError("--samples picks embedded synthetic images and cannot be combined with --images",
                            "drop --samples, or pass --n to take the first images of --images")
    path = Path(source)
    if not path.exists():
        raise MissingDataError(f"images {path} do not exist", "pass a folder of image files or a .pt tensor")
    if path.is_dir():
        from PIL import Image
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:n]
        if not files:
            raise MissingDataError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) in {path}", "add some images")
        # each image is resized to the model's input size later; load at native size one by one
        tensors = [torch.from_numpy(np.asarray(Image.open(f).convert("RGB"), dtype=np.float32) / 255.0)
                   .permute(2, 0, 1) for f in files]
        return tensors, [f.name for f in files]
    try:
        images = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - an unreadable file is one user problem
        raise MissingDataError(f"cannot read {path} ({type(err).__name__})", "save a [N, 3, H, W] tensor") from None
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1] != 3:
        raise BadInputError(f"{path} must hold a [N, 3, H, W] tensor", "save raw images in [0, 1], channels first")
    images = images[:n].float()
    return images, [f"{path.stem}[{i}]" for i in range(images.shape[0])]


def parse_samples(text: str | None) -> list[int] | None:
    """``"3,7"`` -> ``[3, 7]`` (None stays None)."""
    if text is None:
        return None
    try:
        indices = [int(part) for part in text.split(",")]
    except ValueError:
        raise BadInputError(f"--samples {text!r} is not a comma-separated list of indices", "pass e.g. --samples 3,7"
                            ) from None
    if not indices or min(indices) < 0:
        raise BadInputError(f"--samples {text!r} has a negative index", "pass indices >= 0, e.g. --samples 3,7")
    return indices


def prepare(images, size, mean, std) -> tuple[torch.Tensor, torch.Tensor]:
    """Resize to ``size`` (bilinear, no crop) -> (raw [N,3,H,W] in [0,1], normalised)."""
    raw = torch.stack([F.interpolate(img[None].float(), size=size, mode="bilinear", align_corners=False,
                                     antialias=True)[0] for img in images]).clamp(0, 1)
    m = torch.tensor(mean).view(1, 3, 1, 1)
    s = torch.tensor(std).view(1, 3, 1, 1)
    return raw, (raw - m) / s


def render(raw, maps, row_labels, title, out: Path, cmap: str | None) -> None:
    """One row per image: the image, then each method's map on one scale per image (divided by the largest value
    of any method for that image, so methods compare), with the report's colour map and a colour bar."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable

    from .report.plots import map_style

    n = raw.shape[0]
    fig, axes = plt.subplots(n, 2 + len(COLUMNS), figsize=(2.4 * (1 + len(COLUMNS)) + 0.4, 2.4 * n + 0.5),
                             squeeze=False, gridspec_kw={"width_ratios": [1] * (1 + len(COLUMNS)) + [0.07]})
    for i in range(n):
        row = {method: maps[method][i].reshape(maps[method][i].shape[-2:]).double().numpy() for method, _ in COLUMNS}
        scale = max(float(np.abs(m).max()) for m in row.values()) or 1.0
        row = {method: m / scale for method, m in row.items()}
        style_cmap, norm = map_style(list(row.values()), over_image=False)
        style_cmap = cmap or style_cmap
        axes[i, 0].imshow(raw[i].permute(1, 2, 0).numpy())
        axes[i, 0].set_ylabel(row_labels[i], fontsize=8)
        for j, (method, _) in enumerate(COLUMNS, start=1):
            axes[i, j].imshow(row[method], cmap=style_cmap, norm=norm, interpolation="nearest")
        fig.colorbar(ScalarMappable(norm=norm, cmap=style_cmap), cax=axes[i, -1])
    for j, label in enumerate(["image"] + [c[1] for c in COLUMNS]):
        axes[0, j].set_title(label, fontsize=10)
    for ax in axes[:, :-1].flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny | random | a timm DeiT/ViT name")
    parser.add_argument("--checkpoint", default=None, help="local checkpoint for --model <timm name>")
    parser.add_argument("--model-kwargs", default="{}",
                        help='JSON timm arguments for a custom architecture, e.g. \'{"depth": 2, "embed_dim": 64}\'')
    parser.add_argument("--images", default=None, help="folder of images or .pt tensor [N,3,H,W] in [0,1]")
    parser.add_argument("--n", type=int, default=4, help="number of images (default 4)")
    parser.add_argument("--samples", default=None,
                        help="comma-separated indices of embedded synthetic test images to show, e.g. 3,7 (instead of "
                             "the first --n)")
    parser.add_argument("--rules", default=None, help="composite (default: the model's official one)")
    parser.add_argument("--cmap", default=None,
                        help="matplotlib colormap (default: the report's, sequential for the ReLU'd maps)")
    parser.add_argument("--out", default="figures/heatmaps.png", help="output PNG")
    args = parser.parse_args(argv)
    try:
        if args.n < 1:
            raise BadInputError(f"--n must be >= 1, got {args.n}", "pass e.g. --n 4")
        try:
            model_kwargs = json.loads(args.model_kwargs)
        except json.JSONDecodeError:
            raise BadInputError(f"--model-kwargs is not valid JSON: {args.model_kwargs!r}",
                                'pass e.g. \'{"num_classes": 10}\'') from None
        model, model_name = load_model(args.model, args.checkpoint, model_kwargs)
        size, mean, std, labels = model_input(model)
        images, names = load_images(args.images, args.n, parse_samples(args.samples))
        raw, pixels = prepare(images, size, mean, std)
        maps, explanation = {}, None
        for method, _ in COLUMNS:
            explanation = explain(model, pixels, method=method, rules=args.rules)
            maps[method] = explanation.scores
        pred = explanation.target.tolist()
        row_labels = [f"{name}\npred: {labels[p] if labels else p}" for name, p in zip(names, pred)]
        title = f"{model_name} | rules={explanation.rules} | explained class = prediction"
        render(raw, maps, row_labels, title, Path(args.out), args.cmap)
    except PalrpError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0
