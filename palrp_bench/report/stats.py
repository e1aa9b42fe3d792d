"""Uncertainty of reported numbers and paired method comparisons (issue "Reports").

Intervals (``report.interval``):

* ``bootstrap`` (default): percentile bootstrap over samples. Each of ``n_boot`` resamples draws the cell's
  samples with replacement and recomputes the table metric exactly as the table does (``g`` of the mean
  per-sample components, :mod:`palrp_bench.report.derive`), so pooled ratios (pixel accuracy, mIoU, PE share)
  get an honest interval too. Seeded: the same data always gives the same interval.
* ``t``: Student-t interval ``mean +- t_{(1+c)/2, n-1} * sd / sqrt(n)`` of the per-sample values. Exact for the
  AUC metrics (the table value IS the mean of per-sample areas); for pooled-ratio metrics the per-sample mean
  is a different statistic, so those always fall back to the bootstrap (and say so).

Paired comparison of two methods on the SAME samples (PA-LRP vs AttnLRP):

* paired bootstrap of ``metric(A) - metric(B)``: one resample of the common sample ids is applied to both
  methods, so per-sample correlation is kept; the interval and the share of resamples on the wrong side of 0
  (a two-sided bootstrap p-value, ``2 * min(P(d <= 0), P(d >= 0))``) are reported;
* Wilcoxon signed-rank test (two-sided, ``zero_method="wilcox"``) on the per-sample values (per-sample AUC;
  per-image pixel accuracy / IoU / share for pooled metrics) via SciPy; reported as NaN when SciPy is absent.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .derive import DerivedMetric

#: resamples per chunk (bounds memory: chunk x n x k floats)
_CHUNK = 200


@dataclass
class Interval:
    low: float
    high: float
    method: str


@dataclass
class PairedComparison:
    difference: float
    low: float
    high: float
    p_bootstrap: float
    p_wilcoxon: float
    n: int


def _valid(metric: DerivedMetric) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(metric.components).all(axis=1)
    return metric.sample_ids[ok], metric.components[ok]


def _bootstrap_stats(components: list[np.ndarray], gs: list, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, len(components)]``: each resample applies ONE index draw to every component matrix."""
    n = components[0].shape[0]
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, len(components)))
    done = 0
    while done < n_boot:
        size = min(_CHUNK, n_boot - done)
        idx = rng.integers(0, n, size=(size, n))
        for j, (c, g) in enumerate(zip(components, gs)):
            out[done:done + size, j] = g(c[idx].mean(axis=1))
        done += size
    return out


def t_quantile(p: float, df: int) -> float:
    """Student-t quantile (SciPy when available; else a Cornish-Fisher expansion accurate to ~1e-4 for df>=3)."""
    try:
        from scipy import stats

        return float(stats.t.ppf(p, df))
    except ImportError:  # pragma: no cover - scipy ships with the dev/report environments
        from statistics import NormalDist

        z = NormalDist().inv_cdf(p)
        g1 = (z ** 3 + z) / 4
        g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
        g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
        return z + g1 / df + g2 / df ** 2 + g3 / df ** 3


def is_mean_metric(metric: DerivedMetric) -> bool:
    """True when the table value equals the mean of the per-sample values (the AUC metrics)."""
    return metric.components.shape[1] == 1


def confidence_interval(metric: DerivedMetric, interval: str = "bootstrap", confidence: float = 0.95,
                        n_boot: int = 1000, seed: int = 0) -> Interval:
    """Interval of ``metric.value()`` (see the module docstring)."""
    _, comps = _valid(metric)
    n = comps.shape[0]
    if n < 2:
        return Interval(float("nan"), float("nan"), interval)
    alpha = 1.0 - confidence
    if interval == "t" and is_mean_metric(metric):
        values = metric.g(comps)
        mean = float(np.mean(values))
        half = t_quantile(1 - alpha / 2, n - 1) * float(np.std(values, ddof=1)) / math.sqrt(n)
        return Interval(mean - half, mean + half, "t")
    stats = _bootstrap_stats([comps], [metric.g], n_boot, seed)[:, 0]
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return Interval(float("nan"), float("nan"), "bootstrap")
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2])
    return Interval(float(low), float(high), "bootstrap")


def paired_comparison(a: DerivedMetric, b: DerivedMetric, confidence: float = 0.95, n_boot: int = 1000,
                      seed: int = 0) -> PairedComparison:
    """``a - b`` on the samples both have (finite components in both)."""
    ids_a, comps_a = _valid(a)
    ids_b, comps_b = _valid(b)
    common, ia, ib = np.intersect1d(ids_a, ids_b, return_indices=True)
    n = int(common.size)
    nan = float("nan")
    if n == 0:
        return PairedComparison(nan, nan, nan, nan, nan, 0)
    ca, cb = comps_a[ia], comps_b[ib]
    diff = float(a.g(ca.mean(axis=0)) - b.g(cb.mean(axis=0)))
    if n < 2:
        return PairedComparison(diff, nan, nan, nan, nan, n)
    boots = _bootstrap_stats([ca, cb], [a.g, b.g], n_boot, seed)
    d = boots[:, 0] - boots[:, 1]
    d = d[np.isfinite(d)]
    alpha = 1.0 - confidence
    low, high = np.quantile(d, [alpha / 2, 1 - alpha / 2]) if d.size else (nan, nan)
    p_boot = float(min(1.0, 2 * min((d <= 0).mean(), (d >= 0).mean()))) if d.size else nan
    return PairedComparison(diff, float(low), float(high), p_boot, wilcoxon_p(a.g(ca), b.g(cb)), n)


def wilcoxon_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired samples (NaN without SciPy or without differences)."""
    try:
        from scipy import stats
    except ImportError:  # pragma: no cover
        return float("nan")
    d = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0 or np.all(d == 0):
        return float("nan")
    return float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)
