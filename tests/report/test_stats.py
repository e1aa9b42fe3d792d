"""Paired comparisons (palrp_bench/report/stats.py) against hand / textbook values."""
import math

import numpy as np
import pytest

from palrp_bench.metrics.registry import METRICS
from palrp_bench.metrics.table import MetricSamples
from palrp_bench.report.stats import paired_comparison, wilcoxon_p


def _flat_curves(levels, ids=None, method="pa_lrp"):
    """AUAC samples whose curves are flat at ``levels`` (each sample's area is its level)."""
    levels = np.asarray(levels, dtype=float)
    ids = np.asarray(ids if ids is not None else [f"s{i}" for i in range(len(levels))])
    return MetricSamples({"method": method, "protocol": "official"}, METRICS["auac"], "generation", ids,
                         np.repeat(levels[:, None], 11, axis=1))


def test_paired_comparison_uses_common_samples():
    base = np.linspace(0.2, 0.8, 30)
    gain = 0.01 * np.arange(1, 31)  # distinct positive paired differences
    a = _flat_curves(np.concatenate([base + gain, [9.0]]), [f"s{i}" for i in range(30)] + ["only_a"])
    b = _flat_curves(base, method="attnlrp")
    cmp = paired_comparison(a, b, n_boot=500)
    assert cmp.n == 30 and cmp.difference == pytest.approx(gain.mean())  # the extra sample of A is ignored
    assert 0.01 <= cmp.low < gain.mean() < cmp.high <= 0.30
    assert cmp.p_bootstrap == 0.0
    assert cmp.p_wilcoxon == pytest.approx(2 / 2**30)  # exact signed-rank: every difference positive
    same = paired_comparison(b, b, n_boot=200)
    assert same.difference == 0.0 and math.isnan(same.p_wilcoxon)


def test_paired_pooled_metric_recomputes_the_pooled_ratio():
    # pixel accuracy is pooled: 100 * sum(correct) / sum(labeled), not a mean of per-image ratios
    spec = METRICS["pixel_accuracy"]
    a = MetricSamples({"method": "a"}, spec, "mean_threshold", np.array(["x", "y"]), np.array([[3.0, 4.0], [1.0, 6.0]]))
    b = MetricSamples({"method": "b"}, spec, "mean_threshold", np.array(["x", "y"]), np.array([[2.0, 4.0], [1.0, 6.0]]))
    cmp = paired_comparison(a, b, n_boot=100)
    assert cmp.difference == pytest.approx(100 * 4 / 10 - 100 * 3 / 10)


def test_wilcoxon_matches_a_textbook_value():
    # ranks 1..8 all positive -> exact two-sided p = 2 / 2**8
    assert wilcoxon_p(np.arange(1, 9) + 0.5, np.zeros(8)) == pytest.approx(2 / 256)
