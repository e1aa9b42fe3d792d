"""Segmentation protocol driver (evaluation/procedures/segmentation.py): streaming equals one-shot, samples path, errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from palrp_bench.data.base import ImageSample
from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.procedures.segmentation import segmentation_protocol, segmentation_protocol_on_samples
from palrp_bench.metrics.segmentation import SegmentationAccumulator, segmentation_scores

VISION = Path(__file__).resolve().parents[1] / "data" / "official" / "vision"


def _data(n=5, h=8, w=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, h, w, generator=g), (torch.rand(n, h, w, generator=g) > 0.5).long()


@pytest.mark.parametrize("threshold", ["mean", "otsu"])
def test_batches_equal_one_shot(threshold):
    maps, masks = _data()
    batches = [(maps[i:i + 2], masks[i:i + 2]) for i in range(0, 5, 2)]
    acc = segmentation_protocol(batches, threshold=threshold, progress=False)
    assert acc.result() == segmentation_scores(maps, masks, threshold)


def test_resume_into_an_existing_accumulator():
    maps, masks = _data()
    acc = segmentation_protocol([(maps[:2], masks[:2], ["a", "b"])], progress=False)
    segmentation_protocol([(maps[2:], masks[2:], ["c", "d", "e"])], accumulator=acc, progress=False)
    assert acc.result() == segmentation_scores(maps, masks)
    assert [r["sample_id"] for r in acc.counts.records()] == ["a", "b", "c", "d", "e"]
    with pytest.raises(BadInputError):
        segmentation_protocol([], threshold="otsu", accumulator=acc, progress=False)


def test_on_samples_explains_in_batches_and_keeps_ids():
    maps, masks = _data()
    images = maps[:, None].expand(-1, 3, -1, -1).clone()  # the "explainer" returns channel 0 back
    samples = [ImageSample(f"img{i}", images[i], label=0, mask=masks[i]) for i in range(5)]
    calls = []

    def explain(batch):
        calls.append(batch.shape[0])
        return batch[:, 0]

    acc = segmentation_protocol_on_samples(samples, explain, batch_size=2, progress=False)
    assert calls == [2, 2, 1]
    assert acc.result() == segmentation_scores(maps, masks)
    assert acc.counts.records()[4]["sample_id"] == "img4"
    with pytest.raises(BadInputError):
        segmentation_protocol_on_samples([ImageSample("x", images[0])], explain, progress=False)


def test_official_fixture_through_the_protocol():
    ref = json.loads((VISION / "seg_random_maps.json").read_text())["methods"]["attnlrp"]
    maps = torch.from_numpy(np.load(VISION / "random_maps.npz")["rnd_pred"])
    masks = torch.load(VISION / "masks.pt")
    acc = segmentation_protocol([(maps[i:i + 1], masks[i:i + 1]) for i in range(2)], progress=False)
    res = acc.result()
    assert res["pixel_accuracy"] == pytest.approx(100 * ref["pixAcc"], abs=1e-10)
    assert res["miou"] == pytest.approx(100 * ref["mIoU"], abs=1e-10)
    assert res["map"] == pytest.approx(100 * ref["mAP"], abs=1e-10)


def test_bad_batches_are_user_errors():
    maps, masks = _data(1)
    with pytest.raises(BadInputError):
        segmentation_protocol([(maps,)], progress=False)
    with pytest.raises(BadInputError):
        SegmentationAccumulator("median")
