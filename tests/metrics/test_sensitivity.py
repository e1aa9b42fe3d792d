"""metrics/sensitivity.py: the map sensitivity ``max |R - R64| / max |R64|`` per sample and the share of samples above
1e-3, by hand and through metrics/table.py (the runner's use: tests/runner/test_map_sensitivity.py)."""
import numpy as np
import pandas as pd
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.registry import get_metric, higher_is_better
from palrp_bench.metrics.sensitivity import SENSITIVE_ABOVE, map_sensitivity, sensitive_percent
from palrp_bench.metrics.table import table_metrics


def test_map_sensitivity_by_hand():
    maps = torch.tensor([[[1.0, -2.0], [0.5, 0.0]],   # off by 0.25 where |R64| peaks at 2.5: 0.1
                         [[0.0, 0.0], [0.0, 0.0]],    # both all zero: 0
                         [[3.0, 0.0], [0.0, 1.0]]])   # equal: 0
    maps64 = torch.tensor([[[1.0, -2.5], [0.25, 0.0]],
                           [[0.0, 0.0], [0.0, 0.0]],
                           [[3.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    np.testing.assert_allclose(map_sensitivity(maps, maps64), [0.5 / 2.5, 0.0, 0.0], rtol=1e-15)
    # token rows, numpy, bfloat16 maps compared in float64; a float64 map of zeros against a non-zero map: inf
    got = map_sensitivity(torch.tensor([[1.0, 2.0, 0.0], [1e-9, 0, 0]], dtype=torch.bfloat16),
                          np.array([[1.0, 2.0, 1e-3], [0.0, 0.0, 0.0]]))
    assert got[0] == pytest.approx(1e-3 / 2.0) and got[1] == np.inf and got.dtype == np.float64


def test_map_sensitivity_refuses_maps_it_cannot_pair():
    with pytest.raises(BadInputError, match=r"maps of shape \(2, 3\) and \(2, 4\) cannot be compared") as err:
        map_sensitivity(torch.zeros(2, 3), torch.zeros(2, 4))
    assert "[B, ...]" in err.value.fix
    with pytest.raises(BadInputError):
        map_sensitivity(torch.zeros(3), torch.zeros(3))  # no sample axis


def test_the_table_number_is_the_percent_above_1e_3():
    assert SENSITIVE_ABOVE == 1e-3
    assert sensitive_percent([[1e-7], [1e-3], [1.1e-3], [0.2]]) == 50.0  # 1e-3 itself is not above
    np.testing.assert_allclose(sensitive_percent(np.array([[[0.0], [1.0]], [[1.0], [1.0]]])), [50.0, 100.0])
    spec = get_metric("map_sensitivity")
    assert higher_is_better("map_sensitivity") is None and spec.unit == "%"
    assert spec.variants == ("share_above_1e-3",)


def test_through_the_table():
    cell = dict(run="r", model="m", quantization="none", dtype="float32", task="t", paper_task="t",
                protocol="official", aggregation="official", method="pa_lrp", rules="attnlrp")
    values = [2e-7, 5e-7, 2.3e-2, 9e-4, 4e-3, 1e-6, 3e-7, 8e-7]
    df = pd.DataFrame([{**cell, "sample_id": f"s{i}", "metric": "map_sensitivity", "variant": "all", "step": np.nan,
                        "value": v} for i, v in enumerate(values)])
    (row,) = table_metrics(df, n_resamples=200).to_dict("records")
    assert row["variant"] == "share_above_1e-3" and row["n"] == 8 and row["n_nonfinite"] == 0
    assert row["value"] == pytest.approx(25.0)  # 2 of 8 above 1e-3
    assert row["ci_low"] <= 25.0 <= row["ci_high"]
