"""Regenerate the tiny vision fixtures in this folder (real file formats, a few hundred bytes each).

    python tests/data/fixtures_vision/make_fixtures.py

* ``imagefolder/val/<wnid>/...``: 5 validation images in torchvision ImageFolder layout (4 JPEG, 1 PNG) plus a
  non-image file that must be ignored.
* ``flat/val/*``: the same 5 images, flat, with both label formats:
  ``flat/LOC_val_solution.csv`` (Kaggle) and ``flat/ILSVRC2012_devkit_t12/data/`` (devkit ground truth +
  a ``meta.mat`` written with scipy in the devkit's struct layout, with ILSVRC2012_IDs deliberately NOT in
  wnid order and one non-leaf synset with an ID above 1000).
* ``gtsegs_tiny.mat``: 3 entries in the ``gtsegs_ijcv.mat`` layout (MATLAB v7.3 = HDF5 with a 512-byte MATLAB
  header, ``value/img`` and ``value/gt`` as [N, 1] object references into ``#refs#``, images stored
  column-major [3, W, H] (gzip-compressed here to stay small), masks behind a [1, 1] cell). Entry 0 is a 20 x 30 image whose top-left quarter is
  red, top-right quarter green and bottom half blue, with the top half as mask (orientation checks).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image

from palrp_bench.data.imagenet_seg import write_imagenet_seg

HERE = Path(__file__).resolve().parent
WNIDS = ("n01440764", "n01443537", "n01484850")  # sorted: class indices 0, 1, 2
DEVKIT_IDS = {"n01484850": 3, "n01440764": 7, "n01443537": 5}  # not in wnid order on purpose
#: image number -> (wnid, extension, (H, W))
VAL_IMAGES = {1: ("n01484850", ".JPEG", (12, 16)), 2: ("n01440764", ".JPEG", (16, 12)),
              3: ("n01443537", ".JPEG", (10, 10)), 4: ("n01440764", ".png", (9, 14)),
              5: ("n01484850", ".JPEG", (14, 9))}


def _val_image(number: int, size: tuple[int, int]) -> Image.Image:
    rng = np.random.default_rng(number)
    base = rng.integers(0, 256, size=3)
    y, x = np.mgrid[0:size[0], 0:size[1]]
    pixels = (base[None, None] + 9 * y[..., None] + 5 * x[..., None]) % 256
    return Image.fromarray(pixels.astype(np.uint8))


def make_val_fixtures() -> None:
    for sub in ("imagefolder", "flat"):
        shutil.rmtree(HERE / sub, ignore_errors=True)
    flat_val = HERE / "flat" / "val"
    flat_val.mkdir(parents=True)
    for number, (wnid, ext, size) in VAL_IMAGES.items():
        name = f"ILSVRC2012_val_{number:08d}{ext}"
        image = _val_image(number, size)
        class_dir = HERE / "imagefolder" / "val" / wnid
        class_dir.mkdir(parents=True, exist_ok=True)
        for target in (class_dir / name, flat_val / name):
            image.save(target, quality=95) if ext == ".JPEG" else image.save(target)
    (HERE / "imagefolder" / "val" / WNIDS[0] / "notes.txt").write_text("not an image\n")
    (flat_val / "README.txt").write_text("not an image\n")

    rows = ["ImageId,PredictionString"]
    for number in (3, 1, 5, 2, 4):  # the real file is not sorted either
        wnid = VAL_IMAGES[number][0]
        rows.append(f"ILSVRC2012_val_{number:08d},{wnid} 1 2 8 9 {wnid} 0 0 5 5 ")
    (HERE / "flat" / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")

    devkit = HERE / "flat" / "ILSVRC2012_devkit_t12" / "data"
    devkit.mkdir(parents=True)
    (devkit / "ILSVRC2012_validation_ground_truth.txt").write_text(
        "".join(f"{DEVKIT_IDS[VAL_IMAGES[n][0]]}\n" for n in sorted(VAL_IMAGES)))
    from scipy.io import savemat
    fields = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")]
    synsets = np.array([(DEVKIT_IDS["n01484850"], "n01484850", "great white shark", 0),
                        (1001, "n01440000", "fish (non-leaf)", 3),
                        (DEVKIT_IDS["n01440764"], "n01440764", "tench", 0),
                        (DEVKIT_IDS["n01443537"], "n01443537", "goldfish", 0)], dtype=fields).reshape(-1, 1)
    savemat(str(devkit / "meta.mat"), {"synsets": synsets})


def seg_entries() -> list[tuple[np.ndarray, np.ndarray]]:
    """The 3 (image [H, W, 3] uint8, mask [H, W] uint8) pairs of ``gtsegs_tiny.mat``, in MATLAB row-major sense."""
    h, w = 20, 30
    image0 = np.zeros((h, w, 3), np.uint8)
    image0[: h // 2, : w // 2] = (255, 0, 0)
    image0[: h // 2, w // 2:] = (0, 255, 0)
    image0[h // 2:] = (0, 0, 255)
    mask0 = np.zeros((h, w), np.uint8)
    mask0[: h // 2] = 1
    entries = [(image0, mask0)]
    rng = np.random.default_rng(0)
    h, w = 24, 16  # upsampled to 224
    image1 = rng.integers(0, 256, size=(h, w, 3)).astype(np.uint8)
    mask1 = np.zeros((h, w), np.uint8)
    mask1[h // 4: 3 * h // 4, w // 3: w - 2] = 1
    entries.append((image1, mask1))
    h, w = 230, 260  # downsampled to 224
    y, x = np.mgrid[0:h, 0:w]
    image2 = np.stack([y * 255 // h, x * 255 // w, (x + y) % 256], axis=-1).astype(np.uint8)
    mask2 = np.zeros((h, w), np.uint8)
    mask2[20:200, 30:220] = 1
    mask2[100:160, 40:200] = rng.integers(0, 2, size=(60, 160))  # speckle: resampling filters disagree here
    entries.append((image2, mask2))
    return entries


if __name__ == "__main__":
    make_val_fixtures()
    write_imagenet_seg(HERE / "gtsegs_tiny.mat", seg_entries())
    print(f"fixtures written under {HERE}")
