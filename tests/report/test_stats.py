"""Intervals and paired comparisons (palrp_bench/report/stats.py) against hand / textbook values."""
import math

import numpy as np
import pytest

from palrp_bench.report.derive import DerivedMetric
from palrp_bench.report.stats import confidence_interval, paired_comparison, t_quantile, wilcoxon_p


def _mean_metric(values, ids=None, method="pa_lrp"):
    values = np.asarray(values, dtype=float)
    ids = np.asarray(ids if ids is not None else [f"s{i}" for i in range(len(values))])
    return DerivedMetric({"method": method}, "auac", "generation", ids, values[:, None], lambda c: c[..., 0])


def test_t_interval_by_hand():
    values = [0.60, 0.70, 0.65, 0.80, 0.75, 0.55, 0.68, 0.72, 0.61, 0.74]
    ci = confidence_interval(_mean_metric(values), "t", 0.95)
    mean, sd = np.mean(values), np.std(values, ddof=1)
    half = 2.2621571628 * sd / math.sqrt(10)  # t_{0.975, 9}
    assert (ci.low, ci.high) == pytest.approx((mean - half, mean + half), rel=1e-6)
    assert t_quantile(0.975, 9) == pytest.approx(2.2621571628, rel=1e-8)


def test_bootstrap_interval_is_seeded_and_sensible():
    rng = np.random.default_rng(1)
    m = _mean_metric(rng.normal(0.5, 0.1, 400))
    a = confidence_interval(m, "bootstrap", 0.95, n_boot=2000)
    b = confidence_interval(m, "bootstrap", 0.95, n_boot=2000)
    assert (a.low, a.high) == (b.low, b.high)  # deterministic
    t = confidence_interval(m, "t", 0.95)
    assert a.low < m.value() < a.high
    assert (a.low, a.high) == pytest.approx((t.low, t.high), abs=0.003)  # both ~ mean +- 1.96 * 0.1 / 20


def test_pooled_ratio_metrics_always_bootstrap():
    comps = np.array([[3.0, 4.0], [1.0, 4.0], [2.0, 4.0]])
    m = DerivedMetric({"method": "x"}, "pixel_accuracy", "mean_threshold", np.array(["a", "b", "c"]), comps,
                      lambda c: 100 * c[..., 0] / c[..., 1])
    ci = confidence_interval(m, "t", 0.9, n_boot=500)
    assert ci.method == "bootstrap" and m.value() == pytest.approx(50.0) and ci.low <= 50.0 <= ci.high


def test_paired_comparison_uses_common_samples():
    base = np.linspace(0.2, 0.8, 30)
    gain = 0.01 * np.arange(1, 31)  # distinct positive paired differences
    a = _mean_metric(np.concatenate([base + gain, [9.0]]), [f"s{i}" for i in range(30)] + ["only_a"])
    b = _mean_metric(base, method="attnlrp")
    cmp = paired_comparison(a, b, n_boot=500)
    assert cmp.n == 30 and cmp.difference == pytest.approx(gain.mean())  # the extra sample of A is ignored
    assert 0.01 <= cmp.low < gain.mean() < cmp.high <= 0.30
    assert cmp.p_bootstrap == 0.0
    assert cmp.p_wilcoxon == pytest.approx(2 / 2**30)  # exact signed-rank: every difference positive
    same = paired_comparison(b, b, n_boot=200)
    assert same.difference == 0.0 and math.isnan(same.p_wilcoxon)


def test_wilcoxon_matches_a_textbook_value():
    # ranks 1..8 all positive -> exact two-sided p = 2 / 2**8
    assert wilcoxon_p(np.arange(1, 9) + 0.5, np.zeros(8)) == pytest.approx(2 / 256)
