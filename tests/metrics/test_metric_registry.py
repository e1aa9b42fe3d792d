"""Metric directions as data (metrics/registry.py) agree with the published tables' own column."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.registry import HIGHER_IS_BETTER, METRICS, get_metric, higher_is_better

PAPER = Path(__file__).resolve().parents[2] / "results" / "paper"


def test_directions_of_the_nlp_and_segmentation_metrics():
    assert HIGHER_IS_BETTER["auac"] is True and HIGHER_IS_BETTER["au_mse"] is False
    assert higher_is_better("pixel_accuracy") and higher_is_better("miou") and higher_is_better("map")
    assert higher_is_better("positional_share_percent") is None


def test_vision_perturbation_direction_depends_on_the_variant():
    assert higher_is_better("auc_predicted", "positive") is False
    assert higher_is_better("auc_target", "negative") is True
    with pytest.raises(BadInputError):
        higher_is_better("auc_target")
    with pytest.raises(BadInputError):
        get_metric("accuracy")


def test_every_published_row_has_a_registered_metric_with_the_same_direction():
    files = sorted(PAPER.glob("*.csv"))
    if not files:
        pytest.skip("results/paper not present")
    seen = set()
    for path in files:
        with path.open() as fh:
            for row in csv.DictReader(fh):
                assert row["metric"] in METRICS, f"{path.name}: unregistered metric {row['metric']}"
                expected = {"true": True, "false": False, "": None}[row["higher_is_better"].strip().lower()]
                spec = METRICS[row["metric"]]
                variant = row["variant"] if hasattr(spec.higher_is_better, "keys") else None
                assert higher_is_better(row["metric"], variant) is expected, (path.name, row)
                seen.add(row["metric"])
    assert {"auac", "au_mse", "auc_predicted", "auc_target", "pixel_accuracy", "miou"} <= seen
