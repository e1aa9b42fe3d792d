"""Segmentation metrics (docs/protocol.md section 4): hand-computed 2x2 cases, AP vs sklearn, pooling, streaming,
Otsu, degenerate maps, and the official fixture (seg_random_maps.json)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.segmentation import (SegmentationAccumulator, average_precision, otsu_threshold,
                                              pooled_scores, segmentation_counts, segmentation_scores)

VISION = Path(__file__).resolve().parents[1] / "data" / "official" / "vision"

# normalises to M = [[0, 1], [0.5, 0.25]]; mean threshold 0.4375 -> foreground [[F, T], [T, F]]
MAP_A = torch.tensor([[[3.0, 5.0], [4.0, 3.5]]])
MASK_A = torch.tensor([[[0, 1], [0, 1]]])


def test_two_by_two_counts_by_hand():
    c = segmentation_counts(MAP_A, MASK_A)
    # prediction fg {1, 2}, truth fg {1, 3}: correct = pixels 0 and 1
    assert c.correct.tolist() == [2] and c.labeled.tolist() == [4]
    # background: pred {0, 3}, truth {0, 2} -> inter 1, union 3; foreground: inter 1 ({1}), union 3 ({1, 2, 3})
    assert c.intersection.tolist() == [[1, 1]] and c.union.tolist() == [[3, 3]]


def test_pixels_equal_to_the_mean_are_background():
    # M = [[0, 1], [.5, .5]], mean .5: only the pixel at 1 is strictly above the threshold
    c = segmentation_counts(torch.tensor([[[0.0, 1.0], [0.5, 0.5]]]), torch.tensor([[[0, 1], [0, 0]]]))
    assert c.correct.tolist() == [4]


def test_two_by_two_average_precision_by_hand():
    # 2-channel scores [1-M, M] vs one-hot truth [bg, fg]:
    #   bg channel: scores 1, 0, .5, .75 / truth 1, 0, 1, 0;  fg channel: 0, 1, .5, .25 / truth 0, 1, 0, 1
    # thresholds (desc): 1 -> TP 2/2 (P 1, R .5); .75 -> P 2/3, R .5; .5 -> TP 3 of 5 (P .6, R .75);
    #                    .25 -> TP 4 of 6 (P 2/3, R 1); 0 -> R stays 1
    # AP = .5 * 1 + .25 * .6 + .25 * 2/3
    expected = 0.5 + 0.25 * 0.6 + 0.25 * 2 / 3
    c = segmentation_counts(MAP_A, MASK_A)
    assert c.average_precision[0] == pytest.approx(expected, abs=1e-12)
    scores = segmentation_scores(MAP_A, MASK_A)
    assert scores["pixel_accuracy"] == pytest.approx(50.0)
    assert scores["miou"] == pytest.approx(100 / 3)
    assert scores["map"] == pytest.approx(100 * expected)


def test_average_precision_matches_sklearn():
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    g = np.random.default_rng(0)
    for _ in range(5):
        y = g.integers(0, 2, 300)
        s = g.integers(0, 12, 300) / 11.0  # many ties
        assert average_precision(y, s) == pytest.approx(sklearn_metrics.average_precision_score(y, s), abs=1e-12)
    assert average_precision(np.zeros(4), np.arange(4.0)) == 0.0


def test_dataset_pooling_differs_from_per_image_averaging():
    # image B normalises to [[1, 0], [0, 0]], mean .25 -> fg {0}; truth all foreground
    map_b = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    mask_b = torch.ones(1, 2, 2, dtype=torch.long)
    maps, masks = torch.cat([MAP_A, map_b]), torch.cat([MASK_A, mask_b])
    c = segmentation_counts(maps, masks)
    assert c.intersection.tolist() == [[1, 1], [0, 1]] and c.union.tolist() == [[3, 3], [3, 4]]
    pooled = pooled_scores(c)
    # pooled IoU: bg 1/6, fg 2/7 -> mIoU 19/84; per-image mean would be (1/3 + (0 + 1/4)/2) / 2 = 11/48
    assert pooled["miou"] == pytest.approx(100 * 19 / 84)
    assert pooled["iou"] == pytest.approx([100 / 6, 200 / 7])
    per_image_mean = np.mean([pooled_scores(segmentation_counts(m[None], k[None]))["miou"]
                              for m, k in zip(maps, masks)])
    assert per_image_mean == pytest.approx(100 * 11 / 48)
    assert pooled["pixel_accuracy"] == pytest.approx(100 * 3 / 8)


def test_pixel_accuracy_pools_pixels_across_image_sizes():
    acc = SegmentationAccumulator()
    acc.update(MAP_A, MASK_A)  # 2 of 4 correct
    big_map = torch.arange(16.0).reshape(1, 4, 4)  # fg = values > 7.5 -> the last 8 pixels
    acc.update(big_map, (big_map > 7.5).long())  # 16 of 16 correct
    assert acc.result()["pixel_accuracy"] == pytest.approx(100 * 18 / 20)  # not (50 + 100) / 2


def test_streaming_equals_one_shot_and_merge():
    g = torch.Generator().manual_seed(0)
    maps = torch.rand(7, 12, 10, generator=g)
    masks = (torch.rand(7, 12, 10, generator=g) > 0.6).long()
    one_shot = segmentation_scores(maps, masks)
    acc = SegmentationAccumulator()
    for lo, hi in ((0, 3), (3, 4), (4, 7)):
        acc.update(maps[lo:hi], masks[lo:hi])
    assert acc.result() == one_shot
    left, right = SegmentationAccumulator(), SegmentationAccumulator()
    left.update(maps[:2], masks[:2], sample_ids=["a", "b"])
    right.update(maps[2:], masks[2:])
    assert left.merge(right).result() == one_shot
    assert len(left) == 7 and left.counts.records()[0]["sample_id"] == "a"


def _otsu_brute_force(values: np.ndarray) -> float:
    counts, edges = np.histogram(values, bins=256, range=(0.0, 1.0))
    centres = (edges[:-1] + edges[1:]) / 2
    best, best_var = 0, -1.0
    for i in range(255):
        lo, hi = counts[: i + 1], counts[i + 1:]
        if lo.sum() == 0 or hi.sum() == 0:
            var = 0.0
        else:
            mu_lo = (lo * centres[: i + 1]).sum() / lo.sum()
            mu_hi = (hi * centres[i + 1:]).sum() / hi.sum()
            var = lo.sum() * hi.sum() * (mu_lo - mu_hi) ** 2
        if var > best_var + 1e-12:
            best, best_var = i, var
    return float(centres[best])


def test_otsu_threshold_by_hand_and_brute_force():
    # two clusters {0, .1} and {.9, 1}: every split between bin 25 (.1) and bin 230 (.9) is optimal; the first
    # wins and the threshold is that bin's centre 25.5 / 256, so .1 itself lands in the foreground.
    values = np.array([0.0, 0.1, 0.9, 1.0], dtype=np.float32)
    assert otsu_threshold(values) == pytest.approx(25.5 / 256)
    g = np.random.default_rng(1)
    for _ in range(3):
        v = np.concatenate([g.normal(0.2, 0.05, 200), g.normal(0.7, 0.1, 100)])
        v = (v - v.min()) / (v.max() - v.min())  # min-max normalised, as the protocol feeds it
        assert otsu_threshold(v) == pytest.approx(_otsu_brute_force(v))
    c = segmentation_counts(torch.tensor([[[0.0, 0.1], [0.9, 1.0]]]), torch.tensor([[[0, 0], [1, 1]]]),
                            threshold="otsu")
    assert c.correct.tolist() == [3]


def test_constant_map_is_all_background_with_chance_ap():
    c = segmentation_counts(torch.full((1, 2, 2), 3.0), MASK_A)
    assert c.correct.tolist() == [2]  # predicts background everywhere
    assert c.intersection.tolist() == [[2, 0]]
    assert c.average_precision[0] == pytest.approx(0.5)


def test_user_errors():
    with pytest.raises(BadInputError):
        segmentation_counts(MAP_A, torch.tensor([[[0, 2], [0, 1]]]))  # non-binary mask
    with pytest.raises(BadInputError):
        segmentation_counts(MAP_A, torch.zeros(1, 3, 3))  # shape mismatch
    with pytest.raises(BadInputError):
        segmentation_counts(MAP_A, MASK_A, threshold="median")
    with pytest.raises(BadInputError):
        SegmentationAccumulator().result()


def test_official_fixture_random_maps():
    ref = json.loads((VISION / "seg_random_maps.json").read_text())["methods"]["attnlrp"]
    maps = torch.from_numpy(np.load(VISION / "random_maps.npz")["rnd_pred"])
    masks = torch.load(VISION / "masks.pt")
    counts = segmentation_counts(maps, masks)
    for ours, theirs in zip(counts.records(), ref["per_image"]):
        assert ours["pix_correct"] == theirs["pix_correct"] and ours["pix_labeled"] == theirs["pix_labeled"]
        assert ours["inter"] == theirs["inter"] and ours["union"] == theirs["union"]
        assert ours["ap"] == pytest.approx(theirs["ap"], abs=1e-12)
    scores = pooled_scores(counts)
    assert scores["pixel_accuracy"] == pytest.approx(100 * ref["pixAcc"], abs=1e-10)
    assert scores["miou"] == pytest.approx(100 * ref["mIoU"], abs=1e-10)
    assert scores["map"] == pytest.approx(100 * ref["mAP"], abs=1e-10)
    assert scores["iou"] == pytest.approx([100 * v for v in ref["IoU"]], abs=1e-10)
