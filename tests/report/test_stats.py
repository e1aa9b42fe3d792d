"""Paired comparisons (palrp_bench/report/stats.py): scipy's paired bootstrap and permutation test against exact
enumeration, the Holm adjustment against a hand-worked example, p-value formatting."""
import itertools
import math

import numpy as np
import pytest

from palrp_bench.metrics.registry import METRICS
from palrp_bench.metrics.table import SMALL_SAMPLE_NOTE, MetricSamples
from palrp_bench.report.stats import format_p, holm, paired_comparison


def _flat_curves(levels, ids=None, method="pa_lrp"):
    """AUAC samples whose curves are flat at ``levels`` (each sample's area is its level)."""
    levels = np.asarray(levels, dtype=float)
    ids = np.asarray(ids if ids is not None else [f"s{i}" for i in range(len(levels))])
    return MetricSamples({"method": method, "protocol": "official"}, METRICS["auac"], "generation", ids,
                         np.repeat(levels[:, None], 11, axis=1))


def test_paired_comparison_uses_common_samples_and_an_exact_permutation_test():
    base = np.linspace(0.2, 0.8, 10)
    gain = 0.01 * np.arange(1, 11)  # distinct positive paired differences
    a = _flat_curves(np.concatenate([base + gain, [9.0]]), [f"s{i}" for i in range(10)] + ["only_a"])
    b = _flat_curves(base, method="attnlrp")
    cmp = paired_comparison(a, b, n_boot=500)
    assert cmp.n == 10 and cmp.difference == pytest.approx(gain.mean())  # the extra sample of A is ignored
    assert 0.01 <= cmp.low < gain.mean() < cmp.high <= 0.10 and cmp.note == SMALL_SAMPLE_NOTE  # n = 10
    # 2**10 sign patterns <= 9999 resamples: scipy enumerates them all. Only "no swap" and "swap all" reach
    # |difference| >= observed, so the exact two-sided p-value is 2 / 1024.
    assert cmp.p_value == pytest.approx(2 / 1024)


def test_a_paired_interval_from_few_samples_is_flagged_where_it_disagrees_with_the_test():
    """Three samples, every difference positive: the bootstrap can only resample positive differences, so its
    interval excludes zero, while the exact permutation test cannot go below p = 2 / 8. The interval is kept, its
    note says it undercovers, and the paired table prints the note as a footnote."""
    import pandas as pd

    from palrp_bench.report.tables import markdown, paired_tables

    a, b = _flat_curves([0.5, 0.62, 0.71]), _flat_curves([0.4, 0.6, 0.7], method="attnlrp")
    cmp = paired_comparison(a, b, n_boot=500)
    assert cmp.low > 0 and cmp.p_value == pytest.approx(0.25) and cmp.note == SMALL_SAMPLE_NOTE
    frame = pd.DataFrame([{"run": "r", "model": "m", "task": "t", "metric": "auac", "variant": "generation",
                           "method_a": "pa_lrp", "method_b": "attnlrp", "difference": cmp.difference,
                           "ci_low": cmp.low, "ci_high": cmp.high, "note": cmp.note, "p_value": cmp.p_value,
                           "p_holm": cmp.p_value, "n": cmp.n, "a_better": None}])
    text = markdown(paired_tables(frame, 0.95)[0])
    assert "] (1) |" in text and f"(1) {SMALL_SAMPLE_NOTE}" in text


def test_permutation_p_value_matches_brute_force_on_a_pooled_metric():
    # pixel accuracy is pooled, 100 * sum(correct) / sum(labeled): the statistic is not a mean of per-sample values
    rng = np.random.default_rng(1)
    n = 7
    ca = np.stack([rng.integers(0, 10, n), rng.integers(10, 20, n)], axis=1).astype(float)
    cb = ca.copy()
    cb[:, 0] = np.maximum(cb[:, 0] - rng.integers(0, 3, n), 0)
    spec = METRICS["pixel_accuracy"]
    ids = np.array([f"s{i}" for i in range(n)])
    a = MetricSamples({"method": "a"}, spec, "mean_threshold", ids, ca)
    b = MetricSamples({"method": "b"}, spec, "mean_threshold", ids, cb)
    cmp = paired_comparison(a, b, n_boot=200)
    observed = spec.compute(ca) - spec.compute(cb)
    assert cmp.difference == pytest.approx(observed)
    null = []
    for swap in itertools.product([False, True], repeat=n):
        swap = np.array(swap)[:, None]
        null.append(spec.compute(np.where(swap, cb, ca)) - spec.compute(np.where(swap, ca, cb)))
    null = np.array(null)
    tol = 1e-12 * abs(observed)
    exact = min(1.0, 2 * min((null >= observed - tol).mean(), (null <= observed + tol).mean()))
    assert cmp.p_value == pytest.approx(exact)


def test_identical_and_constant_samples_give_zero_width_intervals_with_a_note():
    same = paired_comparison(_flat_curves([0.3, 0.5, 0.7]), _flat_curves([0.3, 0.5, 0.7], method="b"))
    assert (same.difference, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert "identical" in same.note
    constant = paired_comparison(_flat_curves([0.8] * 5), _flat_curves([0.6] * 5, method="b"), n_boot=100)
    assert constant.low == constant.high == pytest.approx(0.2) and "all samples equal" in constant.note
    assert math.isfinite(constant.p_value)
    none = paired_comparison(_flat_curves([0.8], ["x"]), _flat_curves([0.6], ["y"], method="b"))
    assert none.n == 0 and math.isnan(none.difference) and none.note == "no common samples"


def test_holm_against_a_hand_worked_example():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> running max 0.06)
    adjusted = holm([0.01, 0.04, 0.03, 0.005, float("nan")])
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and math.isnan(adjusted[4])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]).size == 0


def test_p_values_never_print_as_zero():
    assert format_p(0.0) == "< 0.001" and format_p(1e-4) == "< 0.001"
    assert format_p(0.0123) == "0.012" and format_p(1.0) == "1.000" and format_p(float("nan")) == "-"
