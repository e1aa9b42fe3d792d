"""ImageNet-segmentation (Guillaumin et al., ``gtsegs_ijcv.mat``) for Table 5 (docs/protocol.md section 4).

The file is MATLAB v7.3, i.e. HDF5 (read with h5py). ``/value/img`` and ``/value/gt`` are ``[4276, 1]``
arrays of object references (MATLAB cell arrays). ``img`` entry ``i`` points at a ``uint8`` array stored
column-major as ``[3, W, H]``; ``gt`` entry ``i`` points at a ``[1, 1]`` cell whose only reference points at
the ``[W, H]`` mask. Reading them back in MATLAB's row-major sense means the transposes ``(2, 1, 0)``
(image -> ``[H, W, 3]``) and ``(1, 0)`` (mask -> ``[H, W]``), as the official ``Imagenet_Segmentation`` does.

Each sample: the image ``Resize((224, 224))`` (PIL bilinear) as raw pixels in [0, 1], the mask resized with
nearest neighbour and returned as int64 in {0, 1} (non-zero = foreground; the file's masks are 0/1 already,
see :func:`verify_imagenet_seg`). ``sample_id`` is ``imagenet-seg-{i:04d}`` (the entry index in the file);
there is no class label.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from ..errors import BadInputError, MissingDataError
from .base import ImageSample
from .registry import Option, register_dataset

IMAGENET_SEG_COUNT = 4276
IMAGENET_SEG_FILENAME = "gtsegs_ijcv.mat"
#: Where the Transformer-Explainability line of work (and the official PA-LRP README) gets the file.
IMAGENET_SEG_URL = "http://calvin-vision.net/bigstuff/proj-imagenet/data/gtsegs_ijcv.mat"
_HOW_TO_GET = (f"download {IMAGENET_SEG_URL} yourself and check it with "
               "`python scripts/get_imagenet_seg.py PATH`")


def _open(path: Path):
    import h5py

    if not path.is_file():
        raise MissingDataError(f"ImageNet-segmentation file {path} does not exist", _HOW_TO_GET)
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise MissingDataError(f"{path} is not a MATLAB v7.3 / HDF5 file (truncated download?)", _HOW_TO_GET) from exc
    for key in ("value/img", "value/gt"):
        if key not in handle:
            handle.close()
            raise MissingDataError(f"{path} has no '{key}' dataset, so it is not {IMAGENET_SEG_FILENAME}", _HOW_TO_GET)
    img, gt = handle["value/img"], handle["value/gt"]
    if h5py.check_ref_dtype(img.dtype) is None or h5py.check_ref_dtype(gt.dtype) is None or img.ndim != 2 or img.shape[1] != 1 \
            or gt.shape != img.shape:
        shapes = f"img {img.shape} {img.dtype}, gt {gt.shape} {gt.dtype}"
        handle.close()
        raise MissingDataError(f"{path} has malformed 'value/img' / 'value/gt' ({shapes}; expected [N, 1] "
                               "object references)", _HOW_TO_GET)
    return handle


def read_seg_entry(handle, index: int, path: Path | str = "") -> tuple[np.ndarray, np.ndarray]:
    """Entry ``index`` of an open file as ``(image [H, W, 3] uint8, mask [H, W] uint8 in {0, 1})``, unresized."""
    try:
        image = np.asarray(handle[handle["value/img"][index, 0]])
        cell = handle[handle["value/gt"][index, 0]]
        mask = np.asarray(handle[cell[0, 0]])
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise MissingDataError(f"{path} entry {index} cannot be dereferenced ({type(exc).__name__})",
                               _HOW_TO_GET) from exc
    if image.ndim == 2:  # a grey image stored without channels
        image = np.repeat(image[None], 3, axis=0)
    if image.ndim != 3 or image.shape[0] != 3 or mask.ndim != 2:
        raise MissingDataError(f"{path} entry {index} has image {image.shape} / mask {mask.shape} "
                               "(expected [3, W, H] / [W, H])", _HOW_TO_GET)
    image = image.transpose(2, 1, 0)  # column-major [3, W, H] -> [H, W, 3]
    mask = mask.transpose(1, 0)
    if image.shape[:2] != mask.shape:
        raise MissingDataError(f"{path} entry {index}: image {image.shape[:2]} and mask {mask.shape} differ in size",
                               _HOW_TO_GET)
    if image.dtype != np.uint8:
        image = np.clip(image, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(image), (mask != 0).astype(np.uint8)


class ImageNetSegmentation(torch.utils.data.Dataset):
    """Lazy dataset of :class:`ImageSample` over ``gtsegs_ijcv.mat``. The HDF5 handle is opened on first
    access in each process (DataLoader workers and forked loader workers, palrp_bench/runner/loader.py, get their
    own: HDF5 handles do not survive pickling or fork)."""

    def __init__(self, path: str | Path, image_size: int = 224, expected_count: int | None = IMAGENET_SEG_COUNT):
        if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size <= 0:
            raise BadInputError(f"image_size must be a positive int, got {image_size!r}", "use e.g. image_size=224")
        self.path = Path(path).expanduser()
        self.image_size = image_size
        with _open(self.path) as handle:
            self._length = int(handle["value/img"].shape[0])
        if expected_count is not None and self._length != expected_count:
            raise MissingDataError(f"{self.path} holds {self._length} images, expected {expected_count}",
                                   f"{_HOW_TO_GET}; pass expected_count=None to load a partial file on purpose")
        self._handle, self._pid = None, None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_handle"] = None  # h5py handles do not pickle; each worker reopens
        return state

    def __len__(self) -> int:
        return self._length

    @property
    def sample_ids(self) -> list[str]:
        return [f"imagenet-seg-{i:04d}" for i in range(self._length)]

    def __getitem__(self, i: int) -> ImageSample:
        if not -self._length <= i < self._length:
            raise IndexError(f"sample {i} out of range for {self._length} samples")
        i = i % self._length
        if self._handle is None or self._pid != os.getpid():  # a forked loader worker opens its own
            self._handle, self._pid = _open(self.path), os.getpid()
        image, mask = read_seg_entry(self._handle, i, self.path)
        size = (self.image_size, self.image_size)
        resized = Image.fromarray(image).convert("RGB").resize(size, Image.BILINEAR)
        mask_resized = Image.fromarray(mask).resize(size, Image.NEAREST)
        return ImageSample(
            sample_id=f"imagenet-seg-{i:04d}",
            image=torch.from_numpy(np.asarray(resized, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255.0),
            label=None,
            mask=torch.from_numpy(np.asarray(mask_resized, dtype=np.int64).copy()),
            meta={"index": i, "original_size": tuple(int(s) for s in image.shape[:2])})


def load_imagenet_seg(path: str | Path, image_size: int = 224,
                      expected_count: int | None = IMAGENET_SEG_COUNT) -> ImageNetSegmentation:
    """The ImageNet-segmentation set as a lazy dataset of :class:`ImageSample` (docs/protocol.md section 4).

    ``expected_count``: the number of entries the file must hold (4276; ``None`` accepts any)."""
    return ImageNetSegmentation(path, image_size, expected_count)


@dataclass
class SegFileReport:
    """What :func:`verify_imagenet_seg` found. ``ok`` iff ``problems`` is empty."""

    path: Path
    size_bytes: int
    sha256: str
    count: int
    checked: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                          desc="sha256", leave=False) as bar:
        while block := handle.read(chunk):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def verify_imagenet_seg(path: str | Path, expected_count: int = IMAGENET_SEG_COUNT, check_all: bool = False,
                        sha256: str | None = None, n_spot_checks: int = 32) -> SegFileReport:
    """Check a local ``gtsegs_ijcv.mat`` without trusting it: HDF5 structure, entry count, and for every entry
    (``check_all``) or ``n_spot_checks`` evenly spaced ones: image ``[H, W, 3]`` uint8, mask of the same size
    with values in {0, 1}. Computes the file's sha256 and compares it with ``sha256`` when given.
    Raises :class:`MissingDataError` when the file is absent or not HDF5 at all."""
    path = Path(path).expanduser()
    problems: list[str] = []
    with _open(path) as handle:
        count = int(handle["value/img"].shape[0])
        if count != expected_count:
            problems.append(f"{count} entries, expected {expected_count}")
        if check_all or count <= n_spot_checks:
            indices = list(range(count))
        else:
            indices = sorted(set(np.linspace(0, count - 1, n_spot_checks).round().astype(int).tolist()))
        for i in tqdm(indices, desc="checking entries", leave=False):
            try:
                raw_mask = np.asarray(handle[handle[handle["value/gt"][i, 0]][0, 0]])
                raw_image = np.asarray(handle[handle["value/img"][i, 0]])
                read_seg_entry(handle, i, path)
            except MissingDataError as exc:
                problems.append(exc.problem)
                continue
            except (KeyError, ValueError, TypeError, IndexError) as exc:
                problems.append(f"entry {i} cannot be dereferenced ({type(exc).__name__})")
                continue
            if raw_image.dtype != np.uint8:
                problems.append(f"entry {i}: image dtype {raw_image.dtype}, expected uint8")
            values = np.unique(raw_mask)
            if not set(values.tolist()) <= {0, 1}:
                problems.append(f"entry {i}: mask values {values[:6].tolist()} are not in {{0, 1}}")
    digest = sha256_of(path)
    if sha256 is not None and digest.lower() != sha256.strip().lower():
        problems.append(f"sha256 {digest} differs from the expected {sha256.strip().lower()}")
    return SegFileReport(path, path.stat().st_size, digest, count, len(indices), problems)


def write_imagenet_seg(path: str | Path, entries: list[tuple[np.ndarray, np.ndarray]],
                       count: int | None = None) -> None:
    """Write ``(image [H, W, 3] uint8, mask [H, W] {0, 1})`` entries in the ``gtsegs_ijcv.mat`` layout this module
    reads (MATLAB v7.3: HDF5 with a 512-byte MATLAB header, ``value/img`` and ``value/gt`` as ``[N, 1]`` object
    references into ``#refs#``, images stored column-major ``[3, W, H]``, masks behind a ``[1, 1]`` cell). With
    ``count`` larger than the number of entries, entry ``i`` references the arrays of ``entries[i % len(entries)]``
    (a full-size file from a few images, as the rehearsal writes it)."""
    import h5py

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


def _check_file(task, options: dict, findings) -> None:
    """The file opened as the loader opens it (its entries counted, no image decoded) against ``expected_count``."""
    path_fix = (findings.fix(f"task.path=<{IMAGENET_SEG_FILENAME}>")
                + f" (download {IMAGENET_SEG_URL}; python scripts/get_imagenet_seg.py checks it)")
    try:
        count = len(load_imagenet_seg(task.path, expected_count=None))
    except (MissingDataError, BadInputError) as err:
        findings.add(f"ImageNet-segmentation file ({task.name}): {err.problem}", path_fix)
        return
    expected = options["expected_count"]
    if expected is not None and count != expected:
        findings.add(f"{task.path} holds {count:,} entries, expected {expected:,} ({task.name})",
                     f"{path_fix}, or {findings.fix('++task.options.expected_count=null')} "
                     "(evaluates the entries it has)")


@register_dataset(
    "imagenet_seg",
    options=(Option("image_size", 224, "side of the resized image and mask"),
             Option("expected_count", IMAGENET_SEG_COUNT, "entries the file must hold (null: any)", (int, type(None)))),
    needs_path=f"download {IMAGENET_SEG_URL}", local_copy=f"<{IMAGENET_SEG_FILENAME}>",
    pool_size=lambda options: options["expected_count"] or IMAGENET_SEG_COUNT, check=_check_file)
def _imagenet_seg_dataset(path, limit, options, tokenizer) -> ImageNetSegmentation:
    """``task.dataset=imagenet_seg``: ``task.path`` = ``gtsegs_ijcv.mat``; options of :func:`load_imagenet_seg`."""
    if path is None:
        raise BadInputError("task imagenet_seg needs task.path (gtsegs_ijcv.mat)",
                            "set task.path=/path/to/gtsegs_ijcv.mat")
    return load_imagenet_seg(path, **options)
