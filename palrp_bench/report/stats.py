"""Paired comparisons of two methods on the same samples (PA-LRP vs AttnLRP; issue "Reports").

The intervals of single table numbers are part of ``metrics.csv`` (:func:`palrp_bench.metrics.table.table_metrics`,
a BCa bootstrap of the metric's own function). Here, for two methods A and B of the same cell, metric and variant:

* paired bootstrap of ``metric(A) - metric(B)``: one resample of the common sample ids is applied to both
  methods, so per-sample correlation is kept; each resample recomputes both table numbers with the metric's own
  function (``MetricSpec.compute``), and the interval and the share of resamples on the wrong side of 0
  (a two-sided bootstrap p-value, ``2 * min(P(d <= 0), P(d >= 0))``) are reported;
* Wilcoxon signed-rank test (two-sided, ``zero_method="wilcox"``, ``scipy.stats.wilcoxon``) on the per-sample
  values (per-sample AUC; per-image pixel accuracy / IoU / share for pooled metrics).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..metrics.table import MetricSamples

#: resamples per chunk (bounds memory: chunk x n x k floats)
_CHUNK = 200


@dataclass
class PairedComparison:
    difference: float
    low: float
    high: float
    p_bootstrap: float
    p_wilcoxon: float
    n: int


def paired_comparison(a: MetricSamples, b: MetricSamples, confidence: float = 0.95, n_boot: int = 1000,
                      seed: int = 0) -> PairedComparison:
    """``a - b`` on the samples both retain (module docstring)."""
    ids_a, comps_a = a.retained()
    ids_b, comps_b = b.retained()
    common, ia, ib = np.intersect1d(ids_a, ids_b, return_indices=True)
    n = int(common.size)
    nan = float("nan")
    if n == 0:
        return PairedComparison(nan, nan, nan, nan, nan, 0)
    ca, cb = comps_a[ia], comps_b[ib]
    diff = float(a.spec.compute(ca) - b.spec.compute(cb))
    if n < 2:
        return PairedComparison(diff, nan, nan, nan, nan, n)
    rng = np.random.default_rng(seed)
    d = np.empty(n_boot)
    for start in range(0, n_boot, _CHUNK):
        idx = rng.integers(0, n, size=(min(_CHUNK, n_boot - start), n))
        d[start:start + idx.shape[0]] = a.spec.compute(ca[idx]) - b.spec.compute(cb[idx])
    d = d[np.isfinite(d)]
    alpha = 1.0 - confidence
    low, high = np.quantile(d, [alpha / 2, 1 - alpha / 2]) if d.size else (nan, nan)
    p_boot = float(min(1.0, 2 * min((d <= 0).mean(), (d >= 0).mean()))) if d.size else nan
    per_a = np.asarray(a.spec.compute(ca[:, None, :]), dtype=np.float64).reshape(-1)
    per_b = np.asarray(b.spec.compute(cb[:, None, :]), dtype=np.float64).reshape(-1)
    return PairedComparison(diff, float(low), float(high), p_boot, wilcoxon_p(per_a, per_b), n)


def wilcoxon_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired samples (NaN when every difference is 0)."""
    from scipy import stats

    d = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0 or np.all(d == 0):
        return float("nan")
    return float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)
