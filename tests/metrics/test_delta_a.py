"""delta_a, a_morf, a_lerf (AttnLRP paper appendix B.2) against areas worked out by hand, and through the one path
from result rows to metrics.csv."""
import numpy as np
import pandas as pd
import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.delta_a import curve_area, delta_a
from palrp_bench.metrics.registry import higher_is_better
from palrp_bench.metrics.table import metric_samples, table_metrics

CELL = dict(run="r", model="m", quantization="none", dtype="float32", task="t", paper_task="t", protocol="official",
            causal=True, aggregation="official", method="attnlrp", rules="attnlrp")


def test_curve_area_by_hand():
    # 4 features, one step each: logits 4, 3, 1, 1, 0 -> trapezoid (3.5 + 2 + 1 + 0.5) / 4 = 1.75
    assert curve_area([4, 3, 1, 1, 0], [0, 0.25, 0.5, 0.75, 1]) == pytest.approx(1.75)
    # the paper's Eq. 31 is the left sum (4 + 3 + 1 + 1) / 4 = 2.25: they differ by (f(b) - f(x)) / 2N = -0.5
    # a coarse, uneven grid integrates what it sees: (2 + 1) / 2 * 0.4 + (1 + 0) / 2 * 0.6 = 0.9
    assert curve_area([2, 1, 0], [0, 0.4, 1]) == pytest.approx(0.9)
    with pytest.raises(BadInputError):
        curve_area([1, 2], [0.1, 1])
    with pytest.raises(BadInputError):
        curve_area([1, 2, 3], [0, 1])


def test_delta_a_by_hand_and_its_independence_from_the_endpoint_convention():
    x = np.linspace(0, 1, 5)
    morf = np.array([4.0, 1.0, 0.0, -1.0, 0.5])  # flipping, most relevant first: falls fast
    lerf = np.array([4.0, 4.0, 3.5, 2.0, 0.5])   # least relevant first: stays high; same endpoints
    a_morf, a_lerf = curve_area(morf, x), curve_area(lerf, x)
    assert a_morf == pytest.approx((2.5 + 0.5 - 0.5 - 0.25) / 4)
    assert a_lerf == pytest.approx((4 + 3.75 + 2.75 + 1.25) / 4)
    left_sum = lambda c: c[:-1].mean()  # noqa: E731 - Eq. 31
    assert a_lerf - a_morf == pytest.approx(left_sum(lerf) - left_sum(morf))
    assert delta_a([[a_lerf, a_morf], [1.0, 2.0]]) == pytest.approx(((a_lerf - a_morf) + (1.0 - 2.0)) / 2)
    boot = delta_a(np.array([[[3.0, 1.0]], [[0.0, 1.0]]]))  # vectorised over resamples
    np.testing.assert_allclose(boot, [2.0, -1.0])


def test_directions():
    assert higher_is_better("delta_a") is True
    assert higher_is_better("a_morf", "flipping") is False and higher_is_better("a_morf", "insertion") is True
    assert higher_is_better("a_lerf", "flipping") is True and higher_is_better("a_lerf", "insertion") is False


def _rows(records):
    return pd.DataFrame([{**CELL, "sample_id": s, "metric": m, "variant": v, "step": np.nan, "value": y}
                         for s, m, v, y in records])


def test_table_metrics_from_rows_both_processes():
    df = pd.concat([
        _rows([("a", "a_morf", "flipping", 1.0), ("a", "a_lerf", "flipping", 4.0),
               ("b", "a_morf", "flipping", 2.0), ("b", "a_lerf", "flipping", 3.0)]),
        _rows([("a", "a_morf", "insertion", 5.0), ("a", "a_lerf", "insertion", 1.0),
               ("b", "a_morf", "insertion", 2.0), ("b", "a_lerf", "insertion", 2.5)]).assign(task="u", paper_task="u"),
    ])
    got = {(s.cell["task"], s.metric, s.variant): s for s in metric_samples(df)}
    assert got[("t", "delta_a", "flipping")].value() == pytest.approx(((4 - 1) + (3 - 2)) / 2)
    assert got[("u", "delta_a", "insertion")].value() == pytest.approx(((5 - 1) + (2 - 2.5)) / 2)
    np.testing.assert_allclose(got[("u", "delta_a", "insertion")].per_sample(), [4.0, -0.5])
    assert got[("t", "a_morf", "flipping")].value() == pytest.approx(1.5)
    assert got[("u", "a_lerf", "insertion")].value() == pytest.approx(1.75)
    assert ("t", "delta_a", "insertion") not in got
    table = table_metrics(df, n_resamples=200)
    row = table[(table.metric == "delta_a") & (table.task == "t")].iloc[0]
    assert row.value == pytest.approx(2.0) and row.n == 2
