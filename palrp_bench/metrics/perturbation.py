"""Vision perturbation metric: pixel ordering, removal masks and the x100 AUC (PROTOCOL.md section 3; Table 4).

Protocol pieces that need no model live here; the forward passes are in
:mod:`palrp_bench.evaluation.vision_perturbation`.

* Maps are ReLU'd and min-max normalised per image (:func:`~palrp_bench.metrics.maps.minmax_per_image`).
* Steps ``p = 0.1, ..., 0.9``: the first ``int(H * W * p)`` pixels of the order are removed (set to black).
  Positive perturbation removes the most relevant pixels first, negative the least relevant first.
* AUC: trapezoid over ``x = 0.1..0.9`` of the sample-mean 0/1 curve, times 100 (maximum 80). Positive:
  lower is better; negative: higher is better.

Tie-break (documented and deterministic): pixels are ordered by a *stable* sort of their normalised value
(descending for positive, ascending for negative), so pixels with equal values keep the order of their
flat index ``h * W + w``: **ties are broken by pixel index ascending in both directions**. The official code
selects pixels with ``torch.topk(vis, k)`` (``topk(-vis, k)`` for negative), whose choice among equal values
is unspecified: on CPU it is an implementation detail of the partial sort (not index order; torch 2.14
``topk(zeros(20), 5)`` returns indices 12, 14, 13, 15, 11), and on CUDA it is a property of the radix-select kernel
(which, as far as we know, gathers values equal to the k-th one in index order -- not verifiable on this
machine). Our removed set can therefore differ from the official one **only at a step whose cut falls inside
a group of tied values**, i.e. when the ``k``-th and ``(k+1)``-th values of the order are equal. For
continuous maps this is rare; for ReLU'd maps it is common: every pixel with non-positive relevance ties at
0, so a positive step removing more pixels than there are positive ones, and every negative step while
zeros remain, picks among tied zeros. The official fixture maps (``random_maps.npz``) have no tie at any
cut, so they pin the protocol independent of the tie-break.
"""
from __future__ import annotations

from types import MappingProxyType

import torch

from .auc import VISION_STEPS, area_under_mean_curve, as_curves
from .maps import as_map_batch, minmax_per_image
from .registry import MetricSource, MetricSpec, register_metric

__all__ = ["VISION_FRACTIONS", "step_pixel_counts", "perturbation_auc", "pixel_order", "pixel_ranks",
           "perturbation_masks"]

#: The 9 perturbation steps p = 0.1, ..., 0.9 (PROTOCOL.md section 3), as Python floats.
VISION_FRACTIONS: tuple[float, ...] = tuple(float(p) for p in VISION_STEPS.x)


def step_pixel_counts(num_pixels: int, fractions: tuple[float, ...] = VISION_FRACTIONS) -> list[int]:
    """Pixels removed at each step: ``int(num_pixels * p)`` (truncation, as the official code).

    For 224x224 images: 5017, 10035, 15052, 20070, 25088, 30105, 35123, 40140, 45158.
    """
    return [int(num_pixels * p) for p in fractions]


def perturbation_auc(curves01) -> float:
    """Area under the mean perturbation curve, x100 (PROTOCOL.md section 3).

    ``curves01``: per-sample curves ``[n, 9]`` at ``p = 0.1..0.9`` (0/1 agreement or accuracy; any values
    are integrated as given). Returns ``100 * trapz(nanmean(curves01, 0), x=0.1..0.9)``, in [0, 80] for 0/1
    curves. The official code reports the same area without the x100.
    """
    return area_under_mean_curve(as_curves(curves01, VISION_STEPS, "curves01"), VISION_STEPS)


def pixel_order(maps: torch.Tensor, positive: bool) -> torch.Tensor:
    """Flat pixel indices of each map in removal order, ``LongTensor [B, H*W]``.

    ``positive=True``: most relevant (largest value) first; ``False``: least relevant first. Values are
    used as given (no ReLU / normalisation here; :func:`perturbation_masks` applies them). Ties are broken by
    flat pixel index ``h * W + w`` ascending, in both directions (stable sort).
    """
    maps = as_map_batch(maps)
    flat = maps.reshape(maps.shape[0], -1)
    return torch.sort(flat, dim=1, descending=positive, stable=True).indices


def pixel_ranks(order: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pixel_order`: ``ranks[b, i]`` is the position of pixel ``i`` in the order."""
    ranks = torch.empty_like(order)
    positions = torch.arange(order.shape[1], device=order.device).expand_as(order)
    ranks.scatter_(1, order, positions)
    return ranks


def perturbation_masks(maps: torch.Tensor, positive: bool,
                       fractions: tuple[float, ...] = VISION_FRACTIONS) -> torch.Tensor:
    """Which pixels are removed at each step, ``BoolTensor [B, S, H, W]`` (True = set to black).

    The maps are ReLU'd and min-max normalised per image, ordered by :func:`pixel_order` (ties by pixel index
    ascending), and step ``s`` removes the first ``int(H * W * fractions[s])`` pixels. The masks are nested:
    each step removes a superset of the previous one. A constant map (no range after the ReLU) is all zeros,
    so its order is plain index order.
    """
    maps = as_map_batch(maps)
    batch, height, width = maps.shape
    normalised, _ = minmax_per_image(maps, relu=True)
    ranks = pixel_ranks(pixel_order(normalised, positive))
    counts = torch.tensor(step_pixel_counts(height * width, fractions), device=ranks.device)
    removed = ranks[:, None, :] < counts[None, :, None]
    return removed.reshape(batch, len(fractions), height, width)


#: positive perturbation removes the most relevant pixels first (lower is better), negative the least (higher)
_DIRECTION = MappingProxyType({"positive": False, "negative": True})

register_metric(MetricSpec("auc_predicted", _DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
                           "pixel perturbation, map of the predicted class, agreement with the original prediction",
                           "3", "%", ("positive", "negative"), (MetricSource(("agreement",)),), perturbation_auc,
                           curve=True))
register_metric(MetricSpec("auc_target", _DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
                           "pixel perturbation, map of the ground-truth class, top-1 accuracy", "3", "%",
                           ("positive", "negative"), (MetricSource(("accuracy",)),), perturbation_auc, curve=True))
