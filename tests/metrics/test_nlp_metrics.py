"""AUAC / AU-MSE (docs/protocol.md section 2): hand-computed areas, NaN handling, grid checks, official aggregates."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.auc import NLP_FRACTIONS
from palrp_bench.metrics.nlp import au_mse, auac

NLP_FIXTURES = Path(__file__).resolve().parents[1] / "data" / "official" / "nlp"


def test_grid_is_eleven_points_from_zero_to_one():
    assert NLP_FRACTIONS.grid.tolist() == pytest.approx([i / 10 for i in range(11)], abs=1e-12)
    assert NLP_FRACTIONS.scale == 1.0


def test_constant_curve_has_area_equal_to_its_value():
    assert auac(np.full((3, 11), 0.7)) == pytest.approx(0.7, abs=1e-12)
    assert au_mse(np.zeros(11)) == 0.0


def test_linear_ramp_area_by_hand():
    # y = x on [0, 1]: trapezoid is exact, area 1/2
    assert auac([[i / 10 for i in range(11)]]) == pytest.approx(0.5, abs=1e-12)


def test_area_of_the_mean_curve_by_hand():
    # sample 1: 1 at x=0 only; sample 2: 1 at x=1 only. Mean curve: 0.5 at both ends, 0 elsewhere.
    # Trapezoid: two end intervals of width 0.1 with average height 0.25 -> 0.05.
    a = np.zeros((2, 11))
    a[0, 0] = 1.0
    a[1, 10] = 1.0
    assert auac(a) == pytest.approx(0.05, abs=1e-12)
    assert au_mse(torch.tensor(a)) == pytest.approx(0.05, abs=1e-12)


def test_nan_entries_are_ignored_per_step_not_per_sample():
    # sample 2 is NaN at x = 0.5: that step averages sample 1 only (value 1), the others average (1 + 0) / 2.
    a = np.array([np.ones(11), np.zeros(11)])
    a[1, 5] = np.nan
    mean_curve = np.full(11, 0.5)
    mean_curve[5] = 1.0
    expected = sum((mean_curve[i] + mean_curve[i + 1]) / 2 * 0.1 for i in range(10))
    assert auac(a) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.55, abs=1e-12)


@pytest.mark.parametrize("bad", [np.zeros((2, 9)), np.zeros((2, 11, 1)), np.zeros((0, 11))])
def test_wrong_shapes_are_user_errors(bad):
    with pytest.raises(BadInputError):
        auac(bad)
    with pytest.raises(BadInputError):
        au_mse(bad)


@pytest.mark.parametrize("name", ["curves_imdb_pad24.json", "curves_wiki_causal.json"])
def test_official_aggregates_from_official_per_sample_curves(name):
    path = NLP_FIXTURES / name
    if not path.exists():
        pytest.skip(f"{path} not present (copied by the NLP evaluation tests)")
    data = json.loads(path.read_text())
    assert data["fracs"] == pytest.approx(list(NLP_FRACTIONS.x), abs=1e-12)
    agg = data["aggregate"]
    for variant, key in (("generate", "generate"), ("pruning", "pruning")):
        curves = data["per_sample"][variant]
        assert auac(curves["AC"]) == pytest.approx(agg[f"{key}_AU_AC"], abs=1e-6)
        assert au_mse(curves["MSE"]) == pytest.approx(agg[f"{key}_AU_MSE"], abs=1e-6)
