"""How far a sample's relevance map lies from the same map computed in float64 (``runner.map_sensitivity``;
docs/evaluation.md, "Maps that rounding decides").

Per sample, with ``R`` the run's map (the scores the metrics use, in the model's dtype) and ``R64`` the map of the
same method, input and explained output from a float64 copy of the same model::

    map_sensitivity = max |R - R64| / max |R64|      (max over the sample's tokens or pixels)

A map whose every step is well conditioned has ``map_sensitivity`` of the order of its dtype's rounding (about
1e-7 to 1e-6 for float32 maps of the tiny models); where a stabilised denominator ``z + eps`` comes within rounding
of zero, rounding alone decides the map and the value is orders of magnitude larger (2.3e-2 for one image of the
embedded synthetic test set under ``pa_lrp`` with the official stabilisers, 8e-7 with none). The table metric is
the share of samples above :data:`SENSITIVE_ABOVE`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import BadInputError
from ..rundir import MAP_SENSITIVITY_METRIC, NO_VARIANT
from .registry import MetricSource, MetricSpec, register_metric

__all__ = ["SENSITIVE_ABOVE", "map_sensitivity", "sensitive_percent"]

#: a map further than this (relative to its max |value|) from its float64 map counts as decided by rounding
SENSITIVE_ABOVE = 1e-3


def map_sensitivity(maps, maps64) -> np.ndarray:
    """``max |R - R64| / max |R64|`` per sample, float64 ``[B]``, for maps ``[B, ...]`` (tokens or pixels; numpy
    or torch, any float dtype, compared in float64). 0 where both maps are all zero, inf where only ``R64`` is."""
    r = torch.as_tensor(maps).detach().to("cpu", torch.float64)
    r64 = torch.as_tensor(maps64).detach().to("cpu", torch.float64)
    if r.shape != r64.shape or r.dim() < 2 or r.shape[0] == 0:
        raise BadInputError(f"maps of shape {tuple(r.shape)} and {tuple(r64.shape)} cannot be compared per sample",
                            "pass the run's maps and the float64 maps of the same samples, [B, ...] each")
    gap = (r - r64).abs().flatten(1).amax(dim=1)
    scale = r64.abs().flatten(1).amax(dim=1)
    out = torch.where(scale > 0, gap / scale.clamp(min=torch.finfo(torch.float64).tiny),
                      torch.where(gap > 0, torch.full_like(gap, float("inf")), torch.zeros_like(gap)))
    return out.numpy()


def sensitive_percent(components) -> np.ndarray | float:
    """Percent of samples whose ``map_sensitivity`` (components ``[..., n, 1]``) exceeds :data:`SENSITIVE_ABOVE`;
    vectorised over leading axes (bootstrap resamples)."""
    c = np.asarray(components, dtype=np.float64)[..., 0]
    out = 100.0 * (c > SENSITIVE_ABOVE).mean(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


register_metric(MetricSpec(
    MAP_SENSITIVITY_METRIC, None, f"percent of samples whose map lies more than {SENSITIVE_ABOVE:g} of its max |value| "
    "from the float64 map of the same model",
    "share of the maps that rounding decides (a stabilised z + eps within rounding of 0): their numbers in the "
    "other metrics depend on the machine's rounding", "", "%", ("share_above_1e-3",),
    (MetricSource((MAP_SENSITIVITY_METRIC,), "share_above_1e-3", NO_VARIANT),), sensitive_percent))
