"""Paired comparisons of two methods on the same samples (PA-LRP vs AttnLRP, PA-LRP vs its ablations).

For methods A and B of one cell, table metric and variant, on the samples both retain:

* ``difference``: ``metric(A) - metric(B)``, each table number computed by the metric's own function
  (``MetricSpec.compute``: the area of the mean curve, a pooled ratio, ...), exactly as ``metrics.csv`` does;
* its BCa bootstrap interval: :func:`palrp_bench.metrics.table.confidence_interval` (``scipy.stats.bootstrap``,
  ``paired=True``) on the joined per-sample components of A and B, so one resample draws the same samples for both
  methods and the per-sample correlation is kept. Constant samples give a zero-width interval and a note;
* its p-value: ``scipy.stats.permutation_test`` with ``permutation_type="samples"`` (the paired permutation test):
  under the null hypothesis A and B are exchangeable within each sample, so each resample swaps the two methods'
  values of a random subset of the samples and recomputes the same difference. Two-sided; exact when
  ``2**n`` does not exceed the number of resamples;
* :func:`holm`: the Holm (1979) step-down adjustment of the p-values of one table. SciPy has none
  (``scipy.stats.false_discovery_control`` is Benjamini-Hochberg, which controls a different error rate) and
  ``statsmodels`` would be a dependency for five lines, so it is written here once.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..metrics.table import MetricSamples, confidence_interval

#: permutation-test resamples (SciPy's default); the smallest attainable p-value is 1 / (N + 1)
N_PERMUTATIONS = 9999
#: permutation resamples evaluated per vectorised call (bounds memory: batch x n x k floats)
_BATCH = 200


@dataclass
class PairedComparison:
    difference: float
    low: float
    high: float
    p_value: float
    n: int
    note: str = ""


def _as_rows(x: np.ndarray, axis: int) -> np.ndarray:
    """``permutation_test`` hands each sample over as ``[..., k, n]`` with the observations on ``axis``; the metric
    functions want ``[..., n, k]``."""
    return np.swapaxes(np.moveaxis(x, axis, -1), -1, -2)


def _difference_samples(a: MetricSamples, ids: np.ndarray, ca: np.ndarray, cb: np.ndarray) -> MetricSamples:
    """A :class:`MetricSamples` whose components are ``[A | B]`` per sample and whose function is
    ``metric(A) - metric(B)``: the paired bootstrap is then the same call as a single table number's."""
    k = ca.shape[1]
    compute = a.spec.compute
    spec = dataclasses.replace(a.spec, name=f"{a.spec.name} difference",
                               compute=lambda c: compute(c[..., :k]) - compute(c[..., k:]))
    return MetricSamples(a.cell, spec, a.variant, ids, np.concatenate([ca, cb], axis=1))


def paired_comparison(a: MetricSamples, b: MetricSamples, confidence: float = 0.95, n_boot: int = 1000,
                      n_permutations: int = N_PERMUTATIONS, seed: int = 0) -> PairedComparison:
    """``metric(A) - metric(B)`` on the samples both retain, its BCa interval and permutation p-value."""
    from scipy import stats

    ids_a, comps_a = a.retained()
    ids_b, comps_b = b.retained()
    common, ia, ib = np.intersect1d(ids_a, ids_b, return_indices=True)
    n = int(common.size)
    nan = float("nan")
    if n == 0:
        return PairedComparison(nan, nan, nan, nan, 0, "no common samples")
    ca, cb = comps_a[ia], comps_b[ib]
    diff = float(a.spec.compute(ca) - b.spec.compute(cb))
    if n < 2:
        return PairedComparison(diff, nan, nan, nan, n, "fewer than 2 common samples: no interval, no test")
    if np.array_equal(ca, cb, equal_nan=True):
        return PairedComparison(diff, diff, diff, 1.0, n,
                                "identical per-sample values: zero-width interval, p = 1")
    low, high, note = confidence_interval(_difference_samples(a, common, ca, cb), confidence, n_boot, seed)
    compute_a, compute_b = a.spec.compute, b.spec.compute

    def statistic(x, y, axis):
        return np.asarray(compute_a(_as_rows(x, axis)) - compute_b(_as_rows(y, axis)), dtype=np.float64)

    result = stats.permutation_test((ca, cb), statistic, permutation_type="samples", vectorized=True,
                                    n_resamples=n_permutations, batch=_BATCH, alternative="two-sided",
                                    random_state=np.random.default_rng(seed))
    return PairedComparison(diff, low, high, float(result.pvalue), n, note)


def holm(p_values) -> np.ndarray:
    """Holm step-down adjusted p-values (Holm 1979): with the ``m`` finite p-values sorted ascending, the ``i``-th
    (0-based) is multiplied by ``m - i``, a running maximum keeps the order, and values are capped at 1. A
    hypothesis is rejected at level alpha when its adjusted p-value is <= alpha. NaN entries (no test) stay NaN and
    do not count in ``m``."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    finite = np.isfinite(p)
    q = p[finite]
    m = q.size
    if m:
        order = np.argsort(q, kind="stable")
        adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * q[order]))
        values = np.empty(m)
        values[order] = adjusted
        out[finite] = values
    return out


def format_p(p: float) -> str:
    """A p-value as printed: ``< 0.001`` below a thousandth (never ``0.0000``: a permutation p-value is at least
    ``1 / (N + 1)``), else three decimals; ``-`` when there was no test."""
    if p is None or not np.isfinite(p):
        return "-"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"
