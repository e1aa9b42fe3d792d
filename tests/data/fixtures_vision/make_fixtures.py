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

import h5py
import numpy as np
from PIL import Image

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


def write_gtsegs(path: Path, entries: list[tuple[np.ndarray, np.ndarray]], count: int | None = None) -> None:
    """Write entries in the ``gtsegs_ijcv.mat`` (MATLAB v7.3) layout. With ``count`` larger than the number of
    entries, entry ``i`` references the arrays of ``entries[i % len(entries)]`` (a full-size file from a few
    images, as ``scripts/rehearse.py`` writes it)."""
    count = len(entries) if count is None else int(count)
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        value = f.create_group("value")
        value.attrs["MATLAB_class"] = np.bytes_("struct")
        img = value.create_dataset("img", shape=(count, 1), dtype=h5py.ref_dtype)
        gt = value.create_dataset("gt", shape=(count, 1), dtype=h5py.ref_dtype)
        for dset in (img, gt):
            dset.attrs["MATLAB_class"] = np.bytes_("cell")
        stored = []
        for i, (image, mask) in enumerate(entries):
            d_img = refs.create_dataset(f"img{i}", data=image.transpose(2, 1, 0),  # column-major storage
                                        compression="gzip", shuffle=True)
            d_img.attrs["MATLAB_class"] = np.bytes_("uint8")
            d_mask = refs.create_dataset(f"mask{i}", data=mask.transpose(1, 0), compression="gzip")
            d_mask.attrs["MATLAB_class"] = np.bytes_("logical")
            stored.append((d_img.ref, d_mask.ref))
        for i in range(count):
            image_ref, mask_ref = stored[i % len(stored)]
            cell = refs.create_dataset(f"cell{i}", shape=(1, 1), dtype=h5py.ref_dtype)
            cell.attrs["MATLAB_class"] = np.bytes_("cell")
            cell[0, 0] = mask_ref
            img[i, 0] = image_ref
            gt[i, 0] = cell.ref
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."
    with open(path, "r+b") as handle:  # the MATLAB v7.3 user block: 116-byte text, subsys, version, endian
        handle.write(header.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02" + b"IM")


if __name__ == "__main__":
    make_val_fixtures()
    write_gtsegs(HERE / "gtsegs_tiny.mat", seg_entries())
    print(f"fixtures written under {HERE}")
