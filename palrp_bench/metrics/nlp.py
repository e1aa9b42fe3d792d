"""NLP perturbation metrics: AUAC and AU-MSE (docs/protocol.md section 2; paper Tables 1-3).

Both are the trapezoid area over the fractions ``x = 0.0, 0.1, ..., 1.0`` (11 points,
:data:`~palrp_bench.metrics.auc.NLP_FRACTIONS`) of the *sample-mean* curve, NaN entries ignored per step
(``np.nanmean``, as the official code). They are not the mean of per-sample areas; the two agree only when
no entry is NaN (the trapezoid is linear in the curve).

* AUAC: area under the accuracy / tracked-class probability curve (``AC`` per step). Higher is better for
  both generation and pruning.
* AU-MSE: area under the squared logit change (``MSE`` per step). Lower is better for both variants.

What exactly each step measures (tracked class, which logits enter the MSE) is the protocol's job
(``palrp_bench.evaluation``); these functions only integrate.
"""
from __future__ import annotations

from .auc import NLP_FRACTIONS, area_under_mean_curve, as_curves
from .registry import MetricSource, MetricSpec, register_metric

__all__ = ["auac", "au_mse"]


def auac(ac_curves) -> float:
    """Area under the mean accuracy curve (AUAC), docs/protocol.md section 2.

    ``ac_curves``: per-sample curves ``[n, 11]`` at fractions 0, 0.1, ..., 1 (numpy, torch or lists; a single
    ``[11]`` curve is one sample). Returns ``trapz(nanmean(ac_curves, 0), x=fractions)`` in [0, 1] for
    probabilities. A step where every sample is NaN makes the result NaN.
    """
    return area_under_mean_curve(as_curves(ac_curves, NLP_FRACTIONS, "ac_curves"), NLP_FRACTIONS)


def au_mse(mse_curves) -> float:
    """Area under the mean squared-logit-change curve (AU-MSE), docs/protocol.md section 2.

    ``mse_curves``: per-sample curves ``[n, 11]`` at fractions 0, 0.1, ..., 1. Same integration as
    :func:`auac` (trapezoid of the NaN-ignoring sample mean); unscaled.
    """
    return area_under_mean_curve(as_curves(mse_curves, NLP_FRACTIONS, "mse_curves"), NLP_FRACTIONS)


register_metric(MetricSpec("auac", True, NLP_FRACTIONS.describe() + " of the sample-mean curve",
                           "area under the accuracy (tracked-class probability) curve", "2", "",
                           ("generation", "pruning"), (MetricSource(("ac",)),), auac, curve=True))
register_metric(MetricSpec("au_mse", False, NLP_FRACTIONS.describe() + " of the sample-mean curve",
                           "area under the squared-logit-change curve", "2", "", ("generation", "pruning"),
                           (MetricSource(("mse",)),), au_mse, curve=True))
