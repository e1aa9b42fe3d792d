"""Metric directions as data (metrics/registry.py) agree with the published tables' own column."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.registry import METRICS, curve_inputs, get_metric, higher_is_better, metric_specs

PAPER = Path(__file__).resolve().parents[2] / "results" / "paper"


def test_directions_of_the_nlp_and_segmentation_metrics():
    assert higher_is_better("auac") is True and higher_is_better("au_mse") is False
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
                assert row["metric"] in metric_specs(), f"{path.name}: unregistered metric {row['metric']}"
                expected = {"true": True, "false": False, "": None}[row["higher_is_better"].strip().lower()]
                spec = METRICS[row["metric"]]
                variant = row["variant"] if hasattr(spec.higher_is_better, "keys") else None
                assert higher_is_better(row["metric"], variant) is expected, (path.name, row)
                seen.add(row["metric"])
    assert {"auac", "au_mse", "auc_predicted", "auc_target", "pixel_accuracy", "miou"} <= seen


def test_every_metric_is_registered_by_the_module_of_its_function():
    specs = metric_specs()
    assert set(specs) == {"auac", "au_mse", "auc_predicted", "auc_target", "pixel_accuracy", "miou", "map",
                          "positional_share_percent", "tied_pixel_share", "delta_a", "a_morf", "a_lerf",
                          "pg", "mrr", "rma", "pta", "tied_token_share", "iou", "map_sensitivity"}
    for spec in specs.values():
        assert spec.sources and callable(spec.compute), spec.name
    assert curve_inputs() == ("ac", "accuracy", "agreement", "mse")
