"""ImageNet-1k validation images for the vision perturbation protocol (docs/protocol.md section 3, Table 4).

Two local layouts are read (nothing is ever downloaded):

* **ImageFolder** (what the official code reads): ``<root>/val/<wnid>/*.JPEG`` (or ``root`` = the ``val``
  folder itself). Class index = position of the wnid among the sorted class folders, files in sorted order
  inside each class: exactly ``torchvision.datasets.ImageFolder``.
* **flat**: ``<root>/val/*.JPEG`` plus a labels file, found next to the images or up to four folders above
  them, or passed as ``labels_file``:

  - ``LOC_val_solution.csv`` (Kaggle ImageNet-LOC: ``ImageId,PredictionString``; the wnid is the first token);
  - ``ILSVRC2012_validation_ground_truth.txt`` (devkit: one ILSVRC2012_ID per line for
    ``ILSVRC2012_val_00000001``, ``...02``, ...), which needs the devkit's ``meta.mat`` in the same folder to
    turn ILSVRC2012_IDs into wnids (read with scipy).

  A flat set is put into the same order as the ImageFolder one (sorted wnid, then file name), so the seed-42
  subset below picks the same images whatever the layout.

The protocol subset: the official code builds ``ImageFolder(val)``, then ``np.random.seed(42)`` and
``np.random.choice(range(50000), 5000, replace=False)`` and iterates those dataset indices. We select the
same indices with a private ``RandomState(42)`` (identical stream, global numpy state untouched) and keep
numpy's selection order, so any prefix of the list is itself a uniform random sample (``subset=k`` gives the
first ``k`` of the protocol list, since ``choice`` without replacement is a prefix of one permutation).

One listing per folder and process: a run lists the folder in its preflight and again in every job that loads it
(the listing of 50,000 files takes seconds on a network disk); :func:`list_imagenet_val` keeps each listing with
the modification times of every folder and labels file it read and returns it again while all of them are unchanged
(adding, removing or renaming an image changes its folder's time). A listing whose inputs changed within the last
:data:`MTIME_GRANULARITY_S` seconds is not kept, so a change in the same tick of a coarse file-system clock cannot
hide behind an unchanged time.

Each sample is ``Resize((image_size, image_size))`` (bilinear, no crop; what ``torchvision``'s ``Resize``
does on PIL images) of the RGB image, as raw pixels in [0, 1]; ``sample_id`` is the file stem, e.g.
``ILSVRC2012_val_00000001``.
"""
from __future__ import annotations

import csv
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image

from ..errors import BadInputError, MissingDataError
from .base import ImageSample
from .registry import Option, register_dataset

#: Extensions ``torchvision.datasets.ImageFolder`` accepts (case-insensitive); we accept the same files.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
IMAGENET_VAL_SIZE = 50000
PROTOCOL_SUBSET_SIZE = 5000
PROTOCOL_SUBSET_SEED = 42
LOC_SOLUTION_NAME = "LOC_val_solution.csv"
DEVKIT_GROUND_TRUTH_NAME = "ILSVRC2012_validation_ground_truth.txt"
DEVKIT_META_NAME = "meta.mat"
#: labels-file locations looked for, relative to the val folder and each of its first four ancestors
_LABEL_CANDIDATES = (LOC_SOLUTION_NAME, DEVKIT_GROUND_TRUTH_NAME,
                     f"ILSVRC2012_devkit_t12/data/{DEVKIT_GROUND_TRUTH_NAME}")
#: seconds within which a file system may give two changes the same modification time (FAT: 2 s)
MTIME_GRANULARITY_S = 2.0
_EXPECTED_LAYOUT = ("expected <root>/val/<wnid>/*.JPEG (ImageFolder) or <root>/val/*.JPEG with "
                    f"{LOC_SOLUTION_NAME} or {DEVKIT_GROUND_TRUTH_NAME} + {DEVKIT_META_NAME} (flat)")


@dataclass(frozen=True)
class ValListing:
    """All labelled validation images in ImageFolder order: ``files[i]`` has class ``labels[i]``
    (index into ``classes``, the sorted wnids)."""

    val_dir: Path
    layout: str  # "imagefolder" | "flat-loc-csv" | "flat-devkit"
    files: tuple[Path, ...]
    labels: tuple[int, ...]
    classes: tuple[str, ...]


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def protocol_subset_indices(n_total: int, n_subset: int = PROTOCOL_SUBSET_SIZE,
                            seed: int = PROTOCOL_SUBSET_SEED) -> np.ndarray:
    """Dataset indices of the official subset: ``np.random.seed(seed); np.random.choice(n_total, n_subset,
    replace=False)`` (docs/protocol.md section 3), computed on a private ``RandomState`` in numpy's order."""
    if not 0 < n_subset <= n_total:
        raise BadInputError(f"cannot choose {n_subset} of {n_total} images",
                            f"pick a subset size between 1 and {n_total}")
    return np.random.RandomState(seed).choice(n_total, n_subset, replace=False)


def _resolve_val_dir(root: str | Path) -> Path:
    root = Path(root).expanduser()
    if not root.is_dir():
        raise MissingDataError(f"ImageNet validation folder {root} does not exist", _EXPECTED_LAYOUT)
    return root / "val" if (root / "val").is_dir() else root


def _list_imagefolder(val_dir: Path, class_dirs: list[str], read: list[Path]) -> ValListing:
    files: list[Path] = []
    labels: list[int] = []
    for label, wnid in enumerate(class_dirs):
        # torchvision's make_dataset: sorted os.walk of the class folder, sorted file names
        for folder, _, names in sorted(os.walk(val_dir / wnid, followlinks=True)):
            read.append(Path(folder))
            for name in sorted(names):
                if _is_image(name):
                    files.append(Path(folder) / name)
                    labels.append(label)
    empty = sorted(set(class_dirs) - {class_dirs[i] for i in set(labels)})
    if empty:
        raise MissingDataError(f"class folder(s) {', '.join(empty[:3])} in {val_dir} hold no image",
                               "remove empty class folders or complete the copy of the validation set")
    return ValListing(val_dir, "imagefolder", tuple(files), tuple(labels), tuple(class_dirs))


def _find_labels_file(val_dir: Path, read: list[Path]) -> Path | None:
    folder = val_dir
    for _ in range(5):
        read.append(folder)  # a labels file added here would change the listing
        for candidate in _LABEL_CANDIDATES:
            if (folder / candidate).is_file():
                return folder / candidate
        if folder.parent == folder:
            break
        folder = folder.parent
    return None


def _read_loc_csv(path: Path) -> dict[str, str]:
    """``LOC_val_solution.csv`` -> {image stem: wnid}."""
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:2]] != ["ImageId", "PredictionString"]:
            raise BadInputError(f"{path} is not a {LOC_SOLUTION_NAME} (header must be ImageId,PredictionString)",
                                "pass the Kaggle ImageNet-LOC validation solution file")
        stem_to_wnid = {}
        for line_no, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) < 2 or not row[1].split():
                raise BadInputError(f"{path} line {line_no} has no label", "use an unmodified copy of the file")
            stem_to_wnid[row[0].strip()] = row[1].split()[0]
    return stem_to_wnid


def _read_devkit_meta(path: Path) -> dict[int, str]:
    """Devkit ``meta.mat`` -> {ILSVRC2012_ID: wnid} for the 1000 leaf classes (IDs 1..1000)."""
    from scipy.io import loadmat  # scipy is a core dependency

    try:
        synsets = loadmat(str(path), squeeze_me=True)["synsets"]
        id_to_wnid = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in np.atleast_1d(synsets)}
    except Exception as exc:  # scipy's MatReadError and friends: any failure means "not a devkit meta.mat"
        raise MissingDataError(f"{path} is not an ILSVRC2012 devkit meta.mat ({type(exc).__name__})",
                               "use data/meta.mat from ILSVRC2012_devkit_t12") from exc
    return {k: v for k, v in id_to_wnid.items() if 1 <= k <= 1000}


def _read_devkit_ground_truth(path: Path) -> dict[str, str]:
    """Devkit ground truth (+ ``meta.mat`` beside it) -> {image stem: wnid}."""
    meta_path = path.parent / DEVKIT_META_NAME
    if not meta_path.is_file():
        raise MissingDataError(f"{path.name} needs the devkit {DEVKIT_META_NAME} next to it ({meta_path} is missing)",
                               "copy ILSVRC2012_devkit_t12/data/meta.mat beside the ground-truth file")
    id_to_wnid = _read_devkit_meta(meta_path)
    stem_to_wnid = {}
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            wnid = id_to_wnid[int(line)]
        except (ValueError, KeyError):
            raise BadInputError(f"{path} line {line_no}: {line.strip()!r} is not an ILSVRC2012_ID of {meta_path.name}",
                                "use the unmodified devkit ground-truth file") from None
        stem_to_wnid[f"ILSVRC2012_val_{line_no:08d}"] = wnid
    return stem_to_wnid


def _list_flat(val_dir: Path, image_names: list[str], labels_file: Path | None, read: list[Path]) -> ValListing:
    labels_file = labels_file or _find_labels_file(val_dir, read)
    if labels_file is None:
        raise MissingDataError(f"{val_dir} holds images but no class folders and no labels file was found",
                               _EXPECTED_LAYOUT)
    if not labels_file.is_file():
        raise MissingDataError(f"labels file {labels_file} does not exist", _EXPECTED_LAYOUT)
    read += [labels_file, labels_file.parent / DEVKIT_META_NAME]
    if labels_file.suffix.lower() == ".csv":
        stem_to_wnid, layout = _read_loc_csv(labels_file), "flat-loc-csv"
        classes = sorted(set(stem_to_wnid.values()))
    else:
        stem_to_wnid, layout = _read_devkit_ground_truth(labels_file), "flat-devkit"
        classes = sorted(_read_devkit_meta(labels_file.parent / DEVKIT_META_NAME).values())
    unlabelled = [n for n in image_names if Path(n).stem not in stem_to_wnid]
    if unlabelled:
        raise BadInputError(f"{len(unlabelled)} image(s) in {val_dir} have no label in {labels_file.name} "
                            f"(first: {unlabelled[0]})", "use the labels file that belongs to these images")
    class_index = {wnid: i for i, wnid in enumerate(classes)}
    order = sorted(image_names, key=lambda n: (class_index[stem_to_wnid[Path(n).stem]], n))  # ImageFolder order
    return ValListing(val_dir, layout, tuple(val_dir / n for n in order),
                      tuple(class_index[stem_to_wnid[Path(n).stem]] for n in order), tuple(classes))


#: (val folder, labels file) -> (listing, modification times of what it read): this process's listings
_LISTINGS: dict[tuple[str, str | None], tuple[ValListing, tuple[tuple[str, int | None], ...]]] = {}


def _mtimes(paths) -> tuple[tuple[str, int | None], ...]:
    """``(path, st_mtime_ns)`` of each path (None for one that does not exist)."""
    out = []
    for path in paths:
        try:
            out.append((str(path), os.stat(path).st_mtime_ns))
        except OSError:
            out.append((str(path), None))
    return tuple(out)


def list_imagenet_val(root: str | Path, labels_file: str | Path | None = None) -> ValListing:
    """Every labelled validation image under ``root`` in ImageFolder order (see the module docstring); the same
    listing again, without reading the folder, while nothing it read has changed ("One listing per folder")."""
    val_dir = _resolve_val_dir(root)
    key = (str(val_dir.resolve()), None if labels_file is None else str(Path(labels_file).expanduser().resolve()))
    kept = _LISTINGS.get(key)
    if kept is not None and _mtimes(path for path, _ in kept[1]) == kept[1]:
        return kept[0]
    _LISTINGS.pop(key, None)
    started = time.time()
    read = [val_dir]
    listing = _list_val_dir(val_dir, labels_file, read)
    stamps = _mtimes(dict.fromkeys(read))
    settled = started - MTIME_GRANULARITY_S
    if all(ns is None or ns / 1e9 < settled for _, ns in stamps):
        _LISTINGS[key] = (listing, stamps)
    return listing


def _list_val_dir(val_dir: Path, labels_file: str | Path | None, read: list[Path]) -> ValListing:
    """The listing of :func:`list_imagenet_val`, read from the folder; every folder and labels file it reads is
    appended to ``read``."""
    entries = sorted(os.scandir(val_dir), key=lambda e: e.name)
    class_dirs = [e.name for e in entries if e.is_dir()]
    image_names = [e.name for e in entries if e.is_file() and _is_image(e.name)]
    if class_dirs and image_names:
        raise BadInputError(f"{val_dir} mixes class folders and loose images, so its layout is ambiguous",
                            "keep either <wnid>/ folders (ImageFolder) or only images + a labels file (flat)")
    if image_names:
        listing = _list_flat(val_dir, image_names, Path(labels_file) if labels_file is not None else None, read)
    elif class_dirs:
        if labels_file is not None:
            raise BadInputError(f"labels_file was given but {val_dir} is an ImageFolder (class folders)",
                                "drop labels_file; the folder names are the labels")
        listing = _list_imagefolder(val_dir, class_dirs, read)
    else:
        raise MissingDataError(f"no ImageNet validation images found in {val_dir}", _EXPECTED_LAYOUT)
    stems = [f.stem for f in listing.files]
    if len(set(stems)) != len(stems):
        duplicate = next(s for s in stems if stems.count(s) > 1)
        raise BadInputError(f"image name {duplicate!r} occurs twice in {val_dir}; sample ids must be unique",
                            "remove the duplicate copies")
    return listing


def load_rgb_resized(path: Path, image_size: int) -> torch.Tensor:
    """RGB image -> ``Resize((image_size, image_size))`` (PIL bilinear, as torchvision on PIL) -> ``[3, S, S]``
    float32 in [0, 1]."""
    try:
        with Image.open(path) as img:
            img = img.convert("RGB").resize((image_size, image_size), Image.BILINEAR)
    except OSError as exc:
        raise MissingDataError(f"cannot read image {path} ({exc})", "replace the file with a valid copy") from exc
    return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255.0)


class ImageNetVal(torch.utils.data.Dataset):
    """Lazy dataset of :class:`ImageSample`: ``dataset[i]`` reads and resizes one image on demand.

    ``indices[i]`` is the ImageFolder index of sample ``i``; ``sample_ids`` are known without reading images.
    """

    def __init__(self, listing: ValListing, indices: np.ndarray, image_size: int):
        self.listing = listing
        self.indices = np.asarray(indices, dtype=np.int64)
        self.image_size = image_size

    @property
    def classes(self) -> tuple[str, ...]:
        return self.listing.classes

    @property
    def sample_ids(self) -> list[str]:
        return [self.listing.files[i].stem for i in self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> ImageSample:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} out of range for {len(self)} samples")
        index = int(self.indices[i])
        path = self.listing.files[index]
        label = self.listing.labels[index]
        return ImageSample(sample_id=path.stem, image=load_rgb_resized(path, self.image_size), label=label,
                           meta={"wnid": self.listing.classes[label], "dataset_index": index,
                                 "file": str(path.relative_to(self.listing.val_dir)), "layout": self.listing.layout})


def select_imagenet_val(listing: ValListing, subset: str | int = "protocol5000",
                        image_size: int = 224) -> ImageNetVal:
    """Apply ``subset`` (see :func:`load_imagenet_val`) to a listing in ImageFolder order."""
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size <= 0:
        raise BadInputError(f"image_size must be a positive int, got {image_size!r}", "use e.g. image_size=224")
    n_total = len(listing.files)
    if subset == "all":
        indices = np.arange(n_total)
    elif subset == "protocol5000":
        if n_total != IMAGENET_VAL_SIZE:
            raise MissingDataError(f"{listing.val_dir} holds {n_total} labelled images but subset='protocol5000' "
                                   f"is defined on the full {IMAGENET_VAL_SIZE}-image validation set",
                                   "point root at the complete ImageNet val set, or use subset='all' or an int")
        indices = protocol_subset_indices(n_total)
    elif isinstance(subset, (int, np.integer)) and not isinstance(subset, bool):
        indices = protocol_subset_indices(n_total, int(subset))
    else:
        raise BadInputError(f"unknown ImageNet subset {subset!r}", "use 'protocol5000', 'all' or a number of images")
    return ImageNetVal(listing, indices, image_size)


def load_imagenet_val(root: str | Path, subset: str | int = "protocol5000", image_size: int = 224,
                      labels_file: str | Path | None = None) -> ImageNetVal:
    """ImageNet validation images as a lazy dataset of :class:`ImageSample` (docs/protocol.md section 3).

    ``root``: the folder holding ``val/`` or the ``val`` folder itself. ``subset``: ``"protocol5000"`` (the
    official seed-42 choice of 5000 of the 50000 images; needs the complete set), ``"all"`` (ImageFolder
    order), or an int ``k`` (the first ``k`` of the seed-42 selection order). ``labels_file``: for a flat
    layout whose labels file is not found automatically.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size <= 0:
        raise BadInputError(f"image_size must be a positive int, got {image_size!r}", "use e.g. image_size=224")
    return select_imagenet_val(list_imagenet_val(root, labels_file), subset, image_size)


def write_image_folder(folder: str | Path, sources: Sequence[Path], wnids: Sequence[str], per_class: int) -> None:
    """An ImageFolder validation set ``val/<wnid>/ILSVRC2012_val_<number>.JPEG`` (numbers from 1, class by class)
    of ``per_class`` images per class, each a hard link to one of ``sources`` in turn: a full-size layout for the
    cost of a few files (what ``task.path`` takes)."""
    number = 0
    for wnid in wnids:
        out = Path(folder) / "val" / wnid
        out.mkdir(parents=True, exist_ok=True)
        for _ in range(per_class):
            number += 1
            target = out / f"ILSVRC2012_val_{number:08d}.JPEG"
            if not target.exists():
                os.link(sources[number % len(sources)], target)


def _pool_size(options: dict) -> int:
    subset = options["subset"]
    return PROTOCOL_SUBSET_SIZE if subset == "protocol5000" else IMAGENET_VAL_SIZE if subset == "all" else int(subset)


def _check_folder(task, options: dict, findings) -> None:
    """The folder listed as the loader lists it (no image is read): its labelled images and the subset they
    support."""
    path_fix = findings.fix("task.path=<imagenet>") + " (the folder holding val/)"
    try:
        listing = list_imagenet_val(task.path, options["labels_file"])
    except (MissingDataError, BadInputError) as err:
        findings.add(f"ImageNet validation set at {task.path} ({task.name}): {err.problem}",
                     f"{path_fix} ({err.fix})" if err.fix else path_fix)
        return
    count = len(listing.files)
    subset = options["subset"]
    if subset == "protocol5000" and count != IMAGENET_VAL_SIZE:
        findings.add(f"ImageNet at {task.path} holds {count:,} labelled images; subset=protocol5000 is defined on "
                     f"all {IMAGENET_VAL_SIZE:,} ({task.name})",
                     f"{path_fix} (the complete set), or {findings.fix('task.options.subset=all')} "
                     f"(or task.options.subset=<k> <= {count})")
    elif isinstance(subset, int) and not isinstance(subset, bool) and subset > count:
        findings.add(f"ImageNet at {task.path} holds {count:,} labelled images, fewer than subset={subset} "
                     f"({task.name})", findings.fix(f"task.options.subset={count}"))


@register_dataset(
    "imagenet",
    options=(Option("subset", "protocol5000", "protocol5000 | all | <first k of the seed-42 order>", (str, int)),
             Option("image_size", 224, "side of the resized image"),
             Option("labels_file", None, "labels file of a flat val/ folder when not found next to it", (str,))),
    needs_path="the folder holding val/", local_copy="<imagenet>", pool_size=_pool_size, check=_check_folder)
def _imagenet_dataset(path, limit, options, tokenizer) -> ImageNetVal:
    """``task.dataset=imagenet``: ``task.path`` = the validation folder; options of :func:`load_imagenet_val`."""
    if path is None:
        raise BadInputError("task imagenet needs task.path (the ImageNet validation folder)",
                            "set task.path=/path/to/imagenet/val")
    return load_imagenet_val(path, **options)
