"""Area-under-curve conventions shared by every perturbation metric.

docs/protocol.md section 2 (NLP): trapezoid area over x = 0.0, 0.1, ..., 1.0 (11 points) of the *sample-mean*
curve (AUAC, AU-MSE). docs/protocol.md section 3 (vision): trapezoid area over x = 0.1, ..., 0.9 (9 points) of the
mean curve, reported x100 (so the maximum is 80). The convention (grid, scale) travels with every number
through :class:`AucConvention` so a report can say exactly what was integrated.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AucConvention:
    """How a curve is integrated: the x grid, and the factor applied to the area."""

    name: str
    x: tuple[float, ...]
    scale: float = 1.0

    @property
    def grid(self) -> np.ndarray:
        return np.asarray(self.x, dtype=np.float64)

    @property
    def labels(self) -> tuple[float, ...]:
        """The grid as stored in the ``step`` column of result rows (rounded to 10 decimals: 0.3, not
        0.30000000000000004)."""
        return tuple(round(float(v), 10) for v in self.x)

    def describe(self) -> str:
        return f"{self.name}: trapezoid over x={self.x[0]:g}..{self.x[-1]:g} ({len(self.x)} points) x{self.scale:g}"


#: NLP generation / pruning curves, docs/protocol.md section 2: the 11 fractions 0, 0.1, ..., 1.0 exactly as the
#: official code builds them (``np.linspace(0, 1, 11)``, so 0.30000000000000004: the protocol's token counts
#: ``ceil(f * N)`` depend on it; see :mod:`palrp_bench.evaluation.procedures.nlp_perturbation`).
NLP_FRACTIONS = AucConvention("nlp_11pt", tuple(float(v) for v in np.linspace(0.0, 1.0, 11)), 1.0)
#: Vision positive / negative perturbation, docs/protocol.md section 3 (p = 0.1, ..., 0.9, x100).
VISION_STEPS = AucConvention("vision_9pt_x100", tuple(np.round(np.linspace(0.1, 0.9, 9), 10)), 100.0)


def trapezoid(y, x) -> np.ndarray | float:
    """Trapezoid rule over the last axis (``numpy.trapezoid``; identical to ``sklearn.metrics.auc`` for increasing
    x). ``y`` ``[..., k]`` on the grid ``x`` ``[k]``; a float for a single curve."""
    y = np.asarray(y, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    if y.shape[-1:] != x.shape:
        raise ValueError(f"curve has {y.shape} points but the grid has {x.shape}")
    area = np.trapezoid(y, x, axis=-1)
    return float(area) if np.ndim(area) == 0 else area


def mean_curve(curves) -> np.ndarray:
    """Sample-mean of per-sample curves ``[..., n, k]`` ignoring NaN entries per step (``np.nanmean`` over the
    sample axis, as the official code); a single curve ``[k]`` is returned as is. A step where every sample is NaN
    stays NaN (no warning)."""
    curves = np.asarray(curves, dtype=np.float64)
    if curves.ndim == 1:
        return curves
    finite = ~np.isnan(curves)
    count = finite.sum(axis=-2)
    total = np.where(finite, curves, 0.0).sum(axis=-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def area_under_mean_curve(curves, convention: AucConvention) -> np.ndarray | float:
    """Trapezoid area of the sample-mean curve under ``convention`` (scaled); vectorised over leading axes of
    ``curves`` ``[..., n, k]``."""
    return trapezoid(mean_curve(curves), convention.grid) * convention.scale


def as_curves(curves, convention: AucConvention, name: str = "curves") -> np.ndarray:
    """Validate per-sample curves for ``convention`` and return them as float64 ``[..., n, k]``.

    Accepts a numpy array, a torch tensor or nested lists; a single curve ``[k]`` is read as one sample, and leading
    axes (e.g. bootstrap resamples) are kept. Raises :class:`~palrp_bench.errors.BadInputError` when there are no
    samples or the number of points is not the convention's ``k`` (e.g. 9 vision steps given to an 11-point NLP
    metric).
    """
    from ..errors import BadInputError

    if hasattr(curves, "detach"):  # torch tensor, without importing torch here
        curves = curves.detach().cpu().double().numpy()
    arr = np.asarray(curves, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    k = len(convention.x)
    if arr.ndim < 2 or arr.shape[-1] != k:
        raise BadInputError(f"{name} has shape {tuple(np.shape(curves))} but {convention.name} needs [n, {k}]",
                            f"pass one row of {k} values per sample (x = {convention.x[0]:g}..{convention.x[-1]:g})")
    if arr.shape[-2] == 0:
        raise BadInputError(f"{name} is empty", "evaluate at least one sample before computing the area")
    return arr
