"""ImageNet-val loader (docs/protocol.md section 3) on tiny fixture files in the real layouts.

Fixtures: tests/data/fixtures_vision (see make_fixtures.py there): the same 5 images as an ImageFolder, and
flat with a Kaggle LOC_val_solution.csv and with the devkit ground truth + meta.mat (devkit IDs deliberately
not in wnid order).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from palrp_bench.data.base import ImageSample
from palrp_bench.data.imagenet import (IMAGENET_VAL_SIZE, PROTOCOL_SUBSET_SIZE, ValListing, list_imagenet_val,
                                       load_imagenet_val, protocol_subset_indices, select_imagenet_val)
from palrp_bench.errors import BadInputError, MissingDataError, PalrpError

FIXTURES = Path(__file__).parent / "fixtures_vision"
IMAGEFOLDER = FIXTURES / "imagefolder"
FLAT = FIXTURES / "flat"
DEVKIT_GT = FLAT / "ILSVRC2012_devkit_t12" / "data" / "ILSVRC2012_validation_ground_truth.txt"


def _fixture_spec():
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _official_choice(n_total: int, n_subset: int) -> np.ndarray:
    """The official code's selection, run on numpy's global RNG (state restored afterwards)."""
    saved = np.random.get_state()
    try:
        np.random.seed(42)
        return np.random.choice(list(range(n_total)), size=n_subset, replace=False)
    finally:
        np.random.set_state(saved)


def test_imagefolder_order_and_labels_match_the_fixture_spec():
    spec = _fixture_spec()
    classes = sorted(spec.WNIDS)
    expected = sorted(((classes.index(wnid), f"ILSVRC2012_val_{n:08d}") for n, (wnid, _, _) in spec.VAL_IMAGES.items()))
    ds = load_imagenet_val(IMAGEFOLDER, subset="all")
    assert ds.classes == tuple(classes)
    assert ds.sample_ids == [stem for _, stem in expected]
    assert [ds[i].label for i in range(len(ds))] == [label for label, _ in expected]
    assert [ds[i].meta["wnid"] for i in range(len(ds))] == [classes[label] for label, _ in expected]
    assert "notes.txt" not in {Path(f).name for f in ds.listing.files}


def test_imagefolder_listing_equals_torchvision_imagefolder():
    datasets = pytest.importorskip("torchvision.datasets")
    reference = datasets.ImageFolder(str(IMAGEFOLDER / "val"))
    listing = list_imagenet_val(IMAGEFOLDER)
    assert [Path(p) for p, _ in reference.samples] == list(listing.files)
    assert [label for _, label in reference.samples] == list(listing.labels)
    assert reference.classes == list(listing.classes)


@pytest.mark.parametrize("root, labels_file, layout", [
    (FLAT, None, "flat-loc-csv"),                       # auto-detected next to val/
    (FLAT / "val", FLAT / "LOC_val_solution.csv", "flat-loc-csv"),
    (FLAT / "val", DEVKIT_GT, "flat-devkit"),           # ILSVRC2012_IDs mapped through meta.mat
])
def test_flat_layouts_give_the_imagefolder_order_labels_and_pixels(root, labels_file, layout):
    reference = load_imagenet_val(IMAGEFOLDER, subset="all")
    ds = load_imagenet_val(root, subset="all", labels_file=labels_file)
    assert ds.listing.layout == layout
    assert ds.classes == reference.classes  # the non-leaf synset (ID 1001) of meta.mat is not a class
    assert ds.sample_ids == reference.sample_ids
    for i in range(len(ds)):
        a, b = ds[i], reference[i]
        assert (a.sample_id, a.label) == (b.sample_id, b.label)
        assert torch.equal(a.image, b.image)


def test_devkit_ground_truth_is_found_automatically_without_the_csv(tmp_path):
    root = tmp_path / "imagenet"
    (root / "val").mkdir(parents=True)
    for f in (FLAT / "val").iterdir():
        (root / "val" / f.name).write_bytes(f.read_bytes())
    devkit = root / "ILSVRC2012_devkit_t12" / "data"
    devkit.mkdir(parents=True)
    for f in DEVKIT_GT.parent.iterdir():
        (devkit / f.name).write_bytes(f.read_bytes())
    ds = load_imagenet_val(root, subset="all")
    assert ds.listing.layout == "flat-devkit"
    assert ds.sample_ids == load_imagenet_val(IMAGEFOLDER, subset="all").sample_ids


def test_sample_is_resized_raw_pixels_without_crop():
    ds = load_imagenet_val(IMAGEFOLDER, subset="all")
    sample = ds[0]
    assert isinstance(sample, ImageSample)
    assert sample.image.shape == (3, 224, 224) and sample.image.dtype == torch.float32
    assert sample.mask is None
    assert 0.0 <= float(sample.image.min()) and float(sample.image.max()) <= 1.0
    # exactly Resize((S, S)) of the whole RGB image (bilinear, no crop), divided by 255
    path = ds.listing.files[int(ds.indices[0])]
    expected = np.asarray(Image.open(path).convert("RGB").resize((224, 224), Image.BILINEAR), np.float32) / 255.0
    assert torch.allclose(sample.image, torch.from_numpy(expected).permute(2, 0, 1), atol=0, rtol=0)
    small = load_imagenet_val(IMAGEFOLDER, subset="all", image_size=32)[0]
    assert small.image.shape == (3, 32, 32)


def test_pixels_equal_the_official_torchvision_transform():
    transforms = pytest.importorskip("torchvision.transforms")
    official = transforms.Compose([transforms.Resize((224, 224)), transforms.ToTensor()])
    ds = load_imagenet_val(IMAGEFOLDER, subset="all")
    for i in range(len(ds)):
        with Image.open(ds.listing.files[int(ds.indices[i])]) as img:
            reference = official(img.convert("RGB"))
        assert torch.equal(ds[i].image, reference)


def test_protocol_subset_indices_equal_the_official_numpy_selection():
    ours = protocol_subset_indices(IMAGENET_VAL_SIZE)
    official = _official_choice(IMAGENET_VAL_SIZE, PROTOCOL_SUBSET_SIZE)
    assert ours.shape == (5000,) and len(set(ours.tolist())) == 5000
    np.testing.assert_array_equal(ours, official)
    assert ours.min() >= 0 and ours.max() < IMAGENET_VAL_SIZE
    # a shorter selection is a prefix of the longer one (choice without replacement = permutation prefix)
    np.testing.assert_array_equal(protocol_subset_indices(IMAGENET_VAL_SIZE, 100), ours[:100])


def test_loader_leaves_the_global_numpy_rng_alone():
    np.random.seed(123)
    expected_next = np.random.RandomState(123).random_sample()
    load_imagenet_val(IMAGEFOLDER, subset=3)
    assert np.random.random_sample() == expected_next


def test_int_subset_selects_seed42_indices_of_the_imagefolder_order():
    full = load_imagenet_val(IMAGEFOLDER, subset="all")
    ds = load_imagenet_val(IMAGEFOLDER, subset=3)
    official = _official_choice(len(full), 3)
    np.testing.assert_array_equal(ds.indices, official)
    assert ds.sample_ids == [full.sample_ids[i] for i in official]
    assert [s.sample_id for s in (ds[0], ds[1], ds[2])] == ds.sample_ids
    assert ds[0].meta["dataset_index"] == int(official[0])


def test_protocol5000_on_a_full_sized_listing(tmp_path):
    """A 50000-image listing in ImageFolder order (1000 classes x 50 files whose names interleave the classes,
    so class-major order differs from plain name order; the official indices refer to the former). Only the
    first selected file exists on disk, which also shows that selecting never reads images."""
    names, files, labels = [], [], []
    for c in range(1000):
        for j in range(50):
            names.append(f"ILSVRC2012_val_{j * 1000 + c + 1:08d}")
            files.append(tmp_path / f"n{c:08d}" / f"{names[-1]}.JPEG")
            labels.append(c)
    listing = ValListing(tmp_path, "imagefolder", tuple(files), tuple(labels),
                         tuple(f"n{c:08d}" for c in range(1000)))
    official = _official_choice(IMAGENET_VAL_SIZE, PROTOCOL_SUBSET_SIZE)
    files[official[0]].parent.mkdir()
    Image.new("RGB", (7, 5), (200, 10, 30)).save(files[official[0]])

    ds = select_imagenet_val(listing)  # default subset="protocol5000"
    assert len(ds) == 5000
    np.testing.assert_array_equal(ds.indices, official)
    assert ds.sample_ids == [names[i] for i in official]
    sample = ds[0]
    assert sample.sample_id == names[official[0]] and sample.label == official[0] // 50
    assert sample.image.shape == (3, 224, 224)
    assert torch.allclose(sample.image[:, 100, 100], torch.tensor([200, 10, 30]) / 255.0, atol=0.02)
    # subset=k is the first k of the protocol list
    assert select_imagenet_val(listing, 20).sample_ids == ds.sample_ids[:20]
    with pytest.raises(MissingDataError, match="50000"):
        select_imagenet_val(ValListing(tmp_path, "imagefolder", tuple(files[:-1]), tuple(labels[:-1]),
                                       listing.classes))


def test_loading_is_deterministic():
    a = load_imagenet_val(FLAT, subset=4)
    b = load_imagenet_val(FLAT, subset=4)
    assert a.sample_ids == b.sample_ids
    for i in range(len(a)):
        assert torch.equal(a[i].image, b[i].image) and a[i].label == b[i].label


def _copy_flat(tmp_path: Path) -> Path:
    val = tmp_path / "val"
    val.mkdir()
    for f in (FLAT / "val").iterdir():
        (val / f.name).write_bytes(f.read_bytes())
    return val


@pytest.mark.parametrize("subset", ["first5000", 0, 6, -1, 2.5, True])
def test_bad_subsets_are_rejected(subset):
    with pytest.raises(BadInputError):
        load_imagenet_val(IMAGEFOLDER, subset=subset)


def test_protocol5000_needs_the_full_val_set():
    with pytest.raises(MissingDataError, match="50000"):
        load_imagenet_val(IMAGEFOLDER, subset="protocol5000")


@pytest.mark.parametrize("image_size", [0, -3, 22.5, "224"])
def test_bad_image_size(image_size):
    with pytest.raises(BadInputError):
        load_imagenet_val(IMAGEFOLDER, subset="all", image_size=image_size)


def test_missing_and_empty_roots(tmp_path):
    with pytest.raises(MissingDataError, match="does not exist"):
        load_imagenet_val(tmp_path / "nowhere")
    (tmp_path / "val").mkdir()
    with pytest.raises(MissingDataError, match="no ImageNet validation images"):
        load_imagenet_val(tmp_path, subset="all")


def test_flat_without_labels_file(tmp_path):
    _copy_flat(tmp_path)
    with pytest.raises(MissingDataError, match="no labels file"):
        load_imagenet_val(tmp_path, subset="all")
    with pytest.raises(MissingDataError, match="does not exist"):
        load_imagenet_val(tmp_path, subset="all", labels_file=tmp_path / "LOC_val_solution.csv")


def test_devkit_ground_truth_without_meta_mat(tmp_path):
    _copy_flat(tmp_path)
    (tmp_path / "ILSVRC2012_validation_ground_truth.txt").write_text(DEVKIT_GT.read_text())
    with pytest.raises(MissingDataError, match="meta.mat"):
        load_imagenet_val(tmp_path, subset="all")


def test_malformed_labels_files(tmp_path):
    _copy_flat(tmp_path)
    csv_path = tmp_path / "LOC_val_solution.csv"
    csv_path.write_text("id,label\nILSVRC2012_val_00000001,n01440764\n")
    with pytest.raises(BadInputError, match="ImageId,PredictionString"):
        load_imagenet_val(tmp_path, subset="all")
    # a csv that misses images of the folder
    csv_path.write_text("ImageId,PredictionString\nILSVRC2012_val_00000001,n01440764 1 2 3 4\n")
    with pytest.raises(BadInputError, match="no label"):
        load_imagenet_val(tmp_path, subset="all")
    csv_path.unlink()
    devkit = tmp_path / "devkit"
    devkit.mkdir()
    (devkit / "meta.mat").write_bytes((DEVKIT_GT.parent / "meta.mat").read_bytes())
    (devkit / "ILSVRC2012_validation_ground_truth.txt").write_text("3\n7\n999\n7\n3\n")  # 999: no such class
    with pytest.raises(BadInputError, match="line 3"):
        load_imagenet_val(tmp_path, subset="all", labels_file=devkit / "ILSVRC2012_validation_ground_truth.txt")
    (devkit / "meta.mat").write_bytes(b"not a mat file")
    with pytest.raises(MissingDataError, match="meta.mat"):
        load_imagenet_val(tmp_path, subset="all", labels_file=devkit / "ILSVRC2012_validation_ground_truth.txt")


def test_ambiguous_layouts(tmp_path):
    with pytest.raises(BadInputError, match="ImageFolder"):
        load_imagenet_val(IMAGEFOLDER, subset="all", labels_file=FLAT / "LOC_val_solution.csv")
    val = _copy_flat(tmp_path)
    (val / "n01440764").mkdir()
    with pytest.raises(BadInputError, match="ambiguous"):
        load_imagenet_val(tmp_path, subset="all")


def test_empty_class_folder_and_duplicate_ids(tmp_path):
    (tmp_path / "val" / "n1").mkdir(parents=True)
    (tmp_path / "val" / "n2").mkdir()
    Image.new("RGB", (4, 4)).save(tmp_path / "val" / "n1" / "a.png")
    with pytest.raises(MissingDataError, match="n2"):
        load_imagenet_val(tmp_path, subset="all")
    Image.new("RGB", (4, 4)).save(tmp_path / "val" / "n2" / "a.JPEG")
    with pytest.raises(BadInputError, match="'a' occurs twice"):
        load_imagenet_val(tmp_path, subset="all")


def test_unreadable_image_fails_only_when_read(tmp_path):
    val = _copy_flat(tmp_path)
    (tmp_path / "LOC_val_solution.csv").write_text((FLAT / "LOC_val_solution.csv").read_text())
    (val / "ILSVRC2012_val_00000002.JPEG").write_bytes(b"\xff\xd8 truncated")
    ds = load_imagenet_val(tmp_path, subset="all")  # lazy: listing does not decode images
    assert ds.sample_ids[0] == "ILSVRC2012_val_00000002"
    assert ds[1].image.shape == (3, 224, 224)
    with pytest.raises(MissingDataError, match="cannot read image"):
        ds[0]
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_errors_are_one_line_with_a_fix(tmp_path):
    for call in (lambda: load_imagenet_val(tmp_path / "missing"), lambda: load_imagenet_val(IMAGEFOLDER, "x")):
        with pytest.raises(PalrpError) as info:
            call()
        assert info.value.fix and "\n" not in str(info.value)


# ------------------------------------------------------------------------------------- one listing per folder
def _settled_copy(source: Path, target: Path) -> Path:
    """A copy of a fixture whose files and folders were last changed an hour ago (as a real data set's are)."""
    import os
    import shutil
    import time

    shutil.copytree(source, target)
    past = time.time() - 3600
    for folder, _, names in os.walk(target):
        for path in [Path(folder), *(Path(folder) / n for n in names)]:
            os.utime(path, (past, past))
    return target


def _count_listings(monkeypatch, val_dir: Path) -> list:
    """Every ``os.scandir`` of ``val_dir`` (one per listing of the folder)."""
    import os

    calls = []
    real = os.scandir

    def spy(path="."):
        if Path(path) == val_dir:
            calls.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", spy)
    return calls


def test_a_settled_folder_is_listed_once_and_listed_again_after_any_change(tmp_path, monkeypatch):
    import time

    root = _settled_copy(IMAGEFOLDER, tmp_path / "imagenet")
    listings = _count_listings(monkeypatch, root / "val")
    first = list_imagenet_val(root)
    assert list_imagenet_val(root / "val") is first and load_imagenet_val(root, subset="all").listing is first
    assert len(listings) == 1
    Image.new("RGB", (4, 4)).save(root / "val" / "n01443537" / "ILSVRC2012_val_00000009.JPEG")  # a new image
    grown = list_imagenet_val(root)
    assert len(listings) == 2 and len(grown.files) == len(first.files) + 1
    assert list_imagenet_val(root).files == grown.files and len(listings) == 3  # just changed: not kept
    (root / "val" / "n01443537" / "ILSVRC2012_val_00000009.JPEG").unlink()
    past = time.time() - 3600
    import os

    os.utime(root / "val" / "n01443537", (past, past))  # an older time than the kept one is a change too
    assert list_imagenet_val(root).files == first.files and len(listings) == 4


def test_a_flat_listing_is_listed_again_when_its_labels_file_changes(tmp_path, monkeypatch):
    import os
    import time

    _copy_flat(tmp_path)
    (tmp_path / "LOC_val_solution.csv").write_text((FLAT / "LOC_val_solution.csv").read_text())
    past = time.time() - 3600
    for path in (tmp_path, tmp_path / "val", tmp_path / "LOC_val_solution.csv"):
        os.utime(path, (past, past))
    listings = _count_listings(monkeypatch, tmp_path / "val")
    first = list_imagenet_val(tmp_path)
    assert list_imagenet_val(tmp_path) is first and len(listings) == 1
    rows = (FLAT / "LOC_val_solution.csv").read_text().splitlines()
    changed = [rows[0]] + [r.replace(r.split(",")[1].split()[0], "n09999999") if "00000003" in r else r
                           for r in rows[1:]]
    (tmp_path / "LOC_val_solution.csv").write_text("\n".join(changed) + "\n")
    relabelled = list_imagenet_val(tmp_path)
    assert len(listings) == 2 and "n09999999" in relabelled.classes and "n09999999" not in first.classes
