"""Train the tiny ViT shipped in ``palrp_bench/assets/vision/`` on the embedded synthetic task (class = colour of a
random shape on a cluttered background x the image half holding it, ``palrp_bench.data.synthetic_vision``).

The model is a plain timm ``VisionTransformer`` (learned ``pos_embed``, CLS token, token pooling), i.e. the
same architecture family as DeiT, so the DeiT LRP twin runs on it unchanged. Recipe: AdamW, 8 epochs of 3000
images, random vertical flips (a horizontal flip would change the class), up to 90% of each training image's
pixels blackened at random (the operation of the Table-4 perturbation test, so blackened pixels read as missing
information), and the learned ``pos_embed`` started from 2-D sin-cos values (from timm's N(0, 0.02) start the
model does not learn the side within these epochs: 50.6% held-out). Training is reproducible (fixed seeds,
fixed data, fixed thread count; bitwise identical weights on rerun). The script reports the held-out accuracy
on a fresh ``test`` split and writes::

    tiny_vit_synthetic.safetensors   the state_dict
    tiny_vit_synthetic.json          timm kwargs, mean/std used, classes, data/training recipe, accuracies

How the shipped asset was made and how well it does: docs/evaluation.md "The embedded suites".

Usage::

    python scripts/train_tiny_vit.py                 # writes into palrp_bench/assets/vision/
    python scripts/train_tiny_vit.py --out-dir /tmp/x --epochs 2
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..data.synthetic_vision import (SYNTHETIC_CLASSES, SYNTHETIC_IMAGE_SIZE, TINY_VIT_NAME,
                                               ASSET_DIR, make_synthetic_vision, tiny_vit_paths)
from ..errors import BadInputError

#: ImageNet mean/std, so the tiny model is normalised exactly like DeiT.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def stack(samples) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples -> ``(images [N, 3, H, W], labels [N])``."""
    return torch.stack([s.image for s in samples]), torch.tensor([s.label for s in samples])


def normalise(images: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (images - mean) / std


@torch.no_grad()
def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 256) -> float:
    model.eval()
    correct = 0
    for start in range(0, len(images), batch_size):
        logits = model(normalise(images[start:start + batch_size]))
        correct += int((logits.argmax(-1) == labels[start:start + batch_size]).sum())
    return correct / len(images)


def init_pos_embed_sincos(model: torch.nn.Module) -> None:
    """Start the learned ``pos_embed`` from 2-D sin-cos patch positions (CLS row 0); it is trained like any weight.
    With timm's N(0, 0.02) start the tiny model did not learn the object's position within minutes."""
    from timm.layers import build_sincos2d_pos_embed

    grid = model.patch_embed.grid_size
    table = build_sincos2d_pos_embed(list(grid), dim=model.pos_embed.shape[-1])
    with torch.no_grad():
        model.pos_embed.zero_()
        model.pos_embed[0, model.num_prefix_tokens:] = table.reshape(-1, table.shape[-1])


def blacken_random_pixels(images: torch.Tensor, max_fraction: float, generator: torch.Generator) -> torch.Tensor:
    """Set a random fraction ``U(0, max_fraction)`` of each image's pixels to black (0 in all channels): the
    operation of the pixel-perturbation test (docs/protocol.md section 3), so that blackened pixels later read as
    removed information rather than as inputs the model never saw."""
    n, _, h, w = images.shape
    fraction = torch.rand(n, 1, 1, 1, generator=generator) * max_fraction
    keep = torch.rand(n, 1, h, w, generator=generator) >= fraction
    return images * keep


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out-dir", type=Path, default=ASSET_DIR, help="where to write the weights and json")
    p.add_argument("--seed", type=int, default=0, help="seed of the training data, init and batch order")
    p.add_argument("--n-train", type=int, default=3000)
    p.add_argument("--n-test", type=int, default=1000, help="held-out samples (split 'test', seed+1)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--patch", type=int, default=8)
    p.add_argument("--pos-init", choices=("sincos", "timm"), default="sincos",
                   help="initial value of the learned pos_embed: 2-D sin-cos (then trained) or timm's N(0, 0.02)")
    p.add_argument("--blacken", type=float, default=0.9,
                   help="blacken up to this fraction of random pixels per training image (0 = off)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (fixed for reproducibility)")
    p.add_argument("--min-accuracy", type=float, default=0.9,
                   help="exit non-zero (and write nothing) if the held-out accuracy is below this")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dim % args.heads:
        raise BadInputError(f"--dim {args.dim} is not divisible by --heads {args.heads}", "pick e.g. --dim 64 --heads 4")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.time()

    train_x, train_y = stack(make_synthetic_vision(args.n_train, seed=args.seed, split="train"))
    test_x, test_y = stack(make_synthetic_vision(args.n_test, seed=args.seed + 1, split="test"))
    print(f"data: {len(train_x)} train / {len(test_x)} held-out test images in {time.time() - started:.1f}s")

    timm_kwargs = dict(img_size=SYNTHETIC_IMAGE_SIZE, patch_size=args.patch, embed_dim=args.dim,
                       depth=args.depth, num_heads=args.heads, num_classes=len(SYNTHETIC_CLASSES),
                       mlp_ratio=4.0, qkv_bias=True, class_token=True, global_pool="token", pos_embed="learn")
    from timm.models.vision_transformer import VisionTransformer
    model = VisionTransformer(**timm_kwargs)
    if args.pos_init == "sincos":
        init_pos_embed_sincos(model)

    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(train_x) / args.batch_size)
    total_steps = args.epochs * steps_per_epoch
    warmup = steps_per_epoch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: (s + 1) / warmup if s < warmup
        else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, total_steps - warmup))))
    order_rng = torch.Generator().manual_seed(args.seed)

    for epoch in range(args.epochs):
        model.train()
        permutation = torch.randperm(len(train_x), generator=order_rng)
        running = 0.0
        for start in tqdm(range(0, len(train_x), args.batch_size), desc=f"epoch {epoch + 1}/{args.epochs}",
                          leave=False):
            idx = permutation[start:start + args.batch_size]
            images = train_x[idx]
            # a vertical flip keeps the class (colour, left/right half); a horizontal one would not
            flip = torch.rand(len(idx), generator=order_rng) < 0.5
            images = torch.where(flip.view(-1, 1, 1, 1), images.flip(-2), images)
            if args.blacken > 0:
                images = blacken_random_pixels(images, args.blacken, order_rng)
            loss = F.cross_entropy(model(normalise(images)), train_y[idx])
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            running += loss.item() * len(idx)
        print(f"epoch {epoch + 1}: train loss {running / len(train_x):.4f}  "
              f"held-out acc {accuracy(model, test_x, test_y):.4f}  ({time.time() - started:.0f}s)")

    train_acc = accuracy(model, train_x, train_y)
    test_acc = accuracy(model, test_x, test_y)
    elapsed = time.time() - started
    print(f"final: train acc {train_acc:.4f}  held-out test acc {test_acc:.4f}  in {elapsed:.0f}s")
    if test_acc < args.min_accuracy:
        print(f"held-out accuracy {test_acc:.4f} < --min-accuracy {args.min_accuracy}: nothing written",
              file=sys.stderr)
        return 1

    from safetensors.torch import save_file
    weights_path, config_path = tiny_vit_paths(args.out_dir)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(weights_path))
    config = {
        "name": TINY_VIT_NAME,
        "timm_kwargs": timm_kwargs,
        "mean": list(MEAN),
        "std": list(STD),
        "classes": list(SYNTHETIC_CLASSES),
        "data": {"generator": "palrp_bench.data.synthetic_vision.make_synthetic_vision",
                 "train": {"n": args.n_train, "seed": args.seed, "split": "train"},
                 "test": {"n": args.n_test, "seed": args.seed + 1, "split": "test"},
                 "augmentation": f"random vertical flip; blacken U(0, {args.blacken}) of the pixels"},
        "training": {"epochs": args.epochs, "batch_size": args.batch_size, "optimizer": "AdamW",
                     "lr": args.lr, "weight_decay": args.weight_decay,
                     "schedule": "linear warmup 1 epoch, cosine decay", "grad_clip": 1.0,
                     "pos_embed_init": args.pos_init,
                     "threads": args.threads, "seconds": round(elapsed, 1)},
        "accuracy": {"train": round(train_acc, 4), "test": round(test_acc, 4)},
        "versions": {"torch": torch.__version__, "timm": __import__("timm").__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
    }
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    print(f"wrote {weights_path} ({weights_path.stat().st_size / 1e6:.2f} MB) and {config_path}")
    return 0
