"""ImageNet-segmentation loader and verifier (docs/protocol.md section 4) on a tiny gtsegs_ijcv.mat-layout fixture.

tests/data/fixtures_vision/gtsegs_tiny.mat: 3 entries, MATLAB v7.3 (HDF5 + 512-byte MATLAB header), object
references like the real file; entry 0 is 20 x 30 with red / green top quarters, blue bottom half, mask = top half.
"""
from __future__ import annotations

import hashlib
import importlib.util
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from palrp_bench.data.imagenet_seg import (IMAGENET_SEG_URL, load_imagenet_seg, read_seg_entry,
                                           verify_imagenet_seg, write_imagenet_seg)
from palrp_bench.errors import BadInputError, MissingDataError

FIXTURES = Path(__file__).parent / "fixtures_vision"
TINY_MAT = FIXTURES / "gtsegs_tiny.mat"


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fixture_spec():
    return _load_module(FIXTURES / "make_fixtures.py", "make_fixtures")


def test_fixture_is_a_matlab_v73_file():
    assert TINY_MAT.read_bytes()[:19] == b"MATLAB 7.3 MAT-file"
    assert h5py.is_hdf5(TINY_MAT)


def test_entries_read_back_in_matlab_orientation(fixture_spec):
    with h5py.File(TINY_MAT, "r") as handle:
        for i, (image, mask) in enumerate(fixture_spec.seg_entries()):
            got_image, got_mask = read_seg_entry(handle, i)
            np.testing.assert_array_equal(got_image, image)
            np.testing.assert_array_equal(got_mask, mask)


def test_samples_are_resized_with_binary_masks():
    ds = load_imagenet_seg(TINY_MAT, expected_count=3)
    assert len(ds) == 3
    assert ds.sample_ids == ["imagenet-seg-0000", "imagenet-seg-0001", "imagenet-seg-0002"]
    for i in range(len(ds)):
        sample = ds[i]
        assert sample.sample_id == ds.sample_ids[i] and sample.label is None
        assert sample.image.shape == (3, 224, 224) and sample.image.dtype == torch.float32
        assert 0.0 <= float(sample.image.min()) and float(sample.image.max()) <= 1.0
        assert sample.mask.shape == (224, 224) and sample.mask.dtype == torch.int64
        assert set(torch.unique(sample.mask).tolist()) == {0, 1}
    assert ds[0].meta["original_size"] == (20, 30)
    small = load_imagenet_seg(TINY_MAT, image_size=64, expected_count=3)[1]
    assert small.image.shape == (3, 64, 64) and small.mask.shape == (64, 64)


def test_orientation_survives_resizing():
    sample = load_imagenet_seg(TINY_MAT, expected_count=3)[0]
    assert torch.equal(sample.image[:, 20, 20], torch.tensor([1.0, 0.0, 0.0]))    # top-left red
    assert torch.equal(sample.image[:, 20, 200], torch.tensor([0.0, 1.0, 0.0]))   # top-right green
    assert torch.equal(sample.image[:, 200, 112], torch.tensor([0.0, 0.0, 1.0]))  # bottom blue
    assert int(sample.mask[:112].sum()) == 112 * 224 and int(sample.mask[112:].sum()) == 0


def test_equals_the_official_reading_and_transforms():
    """The official Imagenet_Segmentation: h5py dereference + transposes, PIL image, torchvision
    Resize((224, 224)) + ToTensor for the image and Resize((224, 224), NEAREST) for the mask."""
    transforms = pytest.importorskip("torchvision.transforms")
    from PIL import Image

    image_tf = transforms.Compose([transforms.Resize((224, 224)), transforms.ToTensor()])
    mask_tf = transforms.Resize((224, 224), Image.NEAREST)
    ds = load_imagenet_seg(TINY_MAT, expected_count=3)
    with h5py.File(TINY_MAT, "r") as f:
        for i in range(3):
            img = np.array(f[f["/value/img"][i, 0]]).transpose((2, 1, 0))
            target = np.array(f[f[f["/value/gt"][i, 0]][0, 0]]).transpose((1, 0))
            expected_image = image_tf(Image.fromarray(img).convert("RGB"))
            expected_mask = torch.from_numpy(np.array(mask_tf(Image.fromarray(target))).astype("int32")).long()
            sample = ds[i]
            assert torch.equal(sample.image, expected_image)
            assert torch.equal(sample.mask, expected_mask)


def test_loading_is_deterministic_and_survives_pickling():
    ds = load_imagenet_seg(TINY_MAT, expected_count=3)
    first = ds[2]
    clone = pickle.loads(pickle.dumps(ds))  # what a DataLoader worker receives (open handle dropped)
    again = clone[2]
    assert torch.equal(first.image, again.image) and torch.equal(first.mask, again.mask)
    assert torch.equal(ds[-1].image, first.image)
    with pytest.raises(IndexError):
        ds[3]


def test_count_must_match_unless_disabled():
    with pytest.raises(MissingDataError, match="holds 3 images, expected 4276"):
        load_imagenet_seg(TINY_MAT)
    assert len(load_imagenet_seg(TINY_MAT, expected_count=None)) == 3


def test_missing_and_malformed_files(tmp_path, fixture_spec):
    with pytest.raises(MissingDataError, match="does not exist") as info:
        load_imagenet_seg(tmp_path / "gtsegs_ijcv.mat")
    assert IMAGENET_SEG_URL in str(info.value)
    not_hdf5 = tmp_path / "truncated.mat"
    not_hdf5.write_bytes(TINY_MAT.read_bytes()[:1000])
    with pytest.raises(MissingDataError, match="not a MATLAB v7.3"):
        load_imagenet_seg(not_hdf5, expected_count=None)
    no_gt = tmp_path / "no_gt.mat"
    with h5py.File(no_gt, "w") as f:
        f.create_dataset("value/img", shape=(1, 1), dtype=h5py.ref_dtype)
    with pytest.raises(MissingDataError, match="'value/gt'"):
        load_imagenet_seg(no_gt, expected_count=None)
    not_refs = tmp_path / "not_refs.mat"
    with h5py.File(not_refs, "w") as f:
        f.create_dataset("value/img", data=np.zeros((2, 1)))
        f.create_dataset("value/gt", data=np.zeros((2, 1)))
    with pytest.raises(MissingDataError, match="object references"):
        load_imagenet_seg(not_refs, expected_count=None)
    mismatched = tmp_path / "mismatched.mat"
    image, mask = fixture_spec.seg_entries()[1]
    write_imagenet_seg(mismatched, [(image, mask[:-2])])
    with pytest.raises(MissingDataError, match="differ in size"):
        load_imagenet_seg(mismatched, expected_count=1)[0]
    with pytest.raises(BadInputError):
        load_imagenet_seg(TINY_MAT, image_size=0, expected_count=3)


def test_verify_reports_a_sound_file_and_its_digest():
    report = verify_imagenet_seg(TINY_MAT, expected_count=3)
    assert report.ok, report.problems
    assert report.count == 3 and report.checked == 3
    assert report.size_bytes == TINY_MAT.stat().st_size
    assert report.sha256 == hashlib.sha256(TINY_MAT.read_bytes()).hexdigest()
    assert verify_imagenet_seg(TINY_MAT, expected_count=3, sha256=report.sha256.upper()).ok


def test_verify_finds_problems(tmp_path, fixture_spec):
    assert verify_imagenet_seg(TINY_MAT).problems == ["3 entries, expected 4276"]
    wrong = verify_imagenet_seg(TINY_MAT, expected_count=3, sha256="0" * 64)
    assert not wrong.ok and "sha256" in wrong.problems[0]
    bad_mask = tmp_path / "bad_mask.mat"
    entries = fixture_spec.seg_entries()
    entries[2] = (entries[2][0], entries[2][1] * 255)
    write_imagenet_seg(bad_mask, entries)
    report = verify_imagenet_seg(bad_mask, expected_count=3)
    assert report.problems == ["entry 2: mask values [0, 255] are not in {0, 1}"]
    # spot checks: evenly spaced entries, first and last included
    assert verify_imagenet_seg(bad_mask, expected_count=3, n_spot_checks=2).checked == 2
    with pytest.raises(MissingDataError):
        verify_imagenet_seg(tmp_path / "absent.mat")


def test_get_imagenet_seg_script(tmp_path, capsys):
    from palrp_bench.data import get_imagenet_seg as script

    assert script.main([str(tmp_path / "gtsegs_ijcv.mat")]) == 2
    out = capsys.readouterr().out
    assert IMAGENET_SEG_URL in out and "never downloaded" in out
    assert not (tmp_path / "gtsegs_ijcv.mat").exists()
    assert script.main([str(TINY_MAT), "--expected-count", "3", "--all"]) == 0
    assert "OK" in capsys.readouterr().out
    assert script.main([str(TINY_MAT)]) == 1
    assert "problem: 3 entries, expected 4276" in capsys.readouterr().out
    garbage = tmp_path / "garbage.mat"
    garbage.write_text("<html>not found</html>")
    assert script.main([str(garbage)]) == 2
