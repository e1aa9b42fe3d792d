"""Vision perturbation metric: which pixels each step removes, the tie-break among equal values, and the x100 AUC
(docs/protocol.md section 3; Table 4).

Protocol pieces that need no model live here; the forward passes are in
:mod:`palrp_bench.evaluation.procedures.vision_perturbation`.

* Maps are ReLU'd and min-max normalised per image (:func:`~palrp_bench.metrics.maps.minmax_per_image`). This
  normalised map is the tensor every pixel choice below is made on.
* Steps ``p = 0.1, ..., 0.9``: ``int(H * W * p)`` pixels are removed (set to black). Positive perturbation
  removes the most relevant pixels first, negative the least relevant first.
* AUC: trapezoid over ``x = 0.1..0.9`` of the sample-mean 0/1 curve, times 100 (maximum 80). Positive:
  lower is better; negative: higher is better.

Tie-break (``tie_break``, docs/protocol.md section 3). Real DeiT maps are ReLU'd and upsampled from 14x14 patches, so
large regions are exactly 0 (a third to two thirds of the pixels): a step whose cut falls inside such a group of
equal values must choose among them, and which ones it removes changes per-sample AUCs. Two named modes;
``tie_break=None`` means the protocol's default (:func:`resolve_tie_break`: ``official`` -> ``topk``,
``corrected`` -> ``random``):

* ``topk`` (official): each step calls ``torch.topk(v, k, dim=-1)`` on ``v`` = the normalised map of one image
  flattened to ``[1, H * W]`` (negated for negative perturbation), as the official ``generate_perturbations.py``
  (run by ``evaluate_perturbations.py``) does on its stored float32 map: its maps are batches of ``--batch-size``
  images, 1 by default, so ``[1, H * W]`` is the official shape. A map without range (the official 0/0) is passed
  as NaN, as the official code stored it. The call runs on the device of the tensor it is given, and which tied
  pixels ``topk`` returns is the device's choice: the official code moved its maps to the GPU before the call,
  and CUDA and the CPU return different tied pixels (on one H100, 206 of 240 removed sets differed on tie-heavy
  maps). The evaluation therefore hands this function the maps on the model's device
  (:mod:`palrp_bench.evaluation.procedures.vision_perturbation`) and records the device kind that ordered the ties. On the
  same device kind and torch version the removed pixels are the official ones, ties included; on the CPU, torch
  2.14 ``topk(zeros(20), 5)`` returns indices 12, 14, 13, 15, 11, scattering tied pixels over the image. Each
  step is its own call, so sets are nested only as far as ``topk`` makes them (they were on every map tried).
  Pass float32 maps to see exactly the tensor the official code saw (the runner does).
* ``random`` (corrected): pixels are ordered by a stable sort of their values after a random permutation drawn
  from a ``torch.Generator`` seeded per image (the evaluation seeds it from the run seed and the sample id), so
  equal values come in a random order that depends only on that seed (not on the batch, the shard or the device:
  the permutation is drawn on the CPU and a stable sort is the same on every device), and no region of the image
  is removed first for lack of relevance. Steps remove prefixes of one order (nested masks). This is the
  device-independent choice.

:func:`tied_pixel_share` records how much of a map the tie-break can touch.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Sequence

import numpy as np
import torch

from ..errors import BadInputError
from ..protocol import resolve_switch
from .auc import VISION_STEPS, area_under_mean_curve, as_curves
from .maps import as_map_batch, minmax_per_image
from .registry import MetricSource, MetricSpec, register_metric, sample_mean

__all__ = ["VISION_FRACTIONS", "TIE_BREAKS", "PROTOCOL_TIE_BREAK", "resolve_tie_break", "step_pixel_counts",
           "perturbation_auc", "pixel_order", "pixel_ranks", "topk_removed", "perturbation_masks",
           "tied_pixel_share"]

#: The 9 perturbation steps p = 0.1, ..., 0.9 (docs/protocol.md section 3), as Python floats.
VISION_FRACTIONS: tuple[float, ...] = tuple(float(p) for p in VISION_STEPS.x)

#: the tie-break modes (module docstring)
TIE_BREAKS: tuple[str, ...] = ("topk", "random")
#: the tie-break each protocol defaults to
PROTOCOL_TIE_BREAK = MappingProxyType({"official": "topk", "corrected": "random"})


def resolve_tie_break(tie_break: str | None, protocol="official") -> str:
    """The tie-break to use: ``tie_break`` when given (``topk`` | ``random``), else the default of ``protocol``
    (``official`` -> ``topk``, ``corrected`` -> ``random``). The one place the default is decided; a bad value
    is a one-line :class:`BadInputError`."""
    return resolve_switch("tie_break", tie_break, TIE_BREAKS, PROTOCOL_TIE_BREAK, protocol)


def step_pixel_counts(num_pixels: int, fractions: tuple[float, ...] = VISION_FRACTIONS) -> list[int]:
    """Pixels removed at each step: ``int(num_pixels * p)`` (truncation, as the official code).

    For 224x224 images: 5017, 10035, 15052, 20070, 25088, 30105, 35123, 40140, 45158.
    """
    return [int(num_pixels * p) for p in fractions]


def perturbation_auc(curves01) -> float:
    """Area under the mean perturbation curve, x100 (docs/protocol.md section 3).

    ``curves01``: per-sample curves ``[n, 9]`` at ``p = 0.1..0.9`` (0/1 agreement or accuracy; any values
    are integrated as given). Returns ``100 * trapz(nanmean(curves01, 0), x=0.1..0.9)``, in [0, 80] for 0/1
    curves. The official code reports the same area without the x100.
    """
    return area_under_mean_curve(as_curves(curves01, VISION_STEPS, "curves01"), VISION_STEPS)


def _check_seeds(seeds, batch: int) -> list[int]:
    if seeds is None:
        raise BadInputError("tie_break='random' needs one seed per map",
                            "pass seeds= (the evaluation derives them from the run seed and the sample ids)")
    seeds = [int(s) for s in seeds]
    if len(seeds) != batch or any(not 0 <= s < 2**64 for s in seeds):
        raise BadInputError(f"got {len(seeds)} seeds for {batch} maps (each must be in [0, 2**64))",
                            "pass one non-negative 64-bit seed per map")
    return seeds


def pixel_order(maps: torch.Tensor, positive: bool, seeds: Sequence[int]) -> torch.Tensor:
    """Flat pixel indices of each map in removal order under ``tie_break="random"``, ``LongTensor [B, H*W]``.

    ``positive=True``: most relevant (largest value) first; ``False``: least relevant first. Values are used as
    given (no ReLU / normalisation here; :func:`perturbation_masks` applies them). Equal values come in the order
    of a random permutation of the pixels drawn on the CPU from ``torch.Generator().manual_seed(seeds[b])``:
    the permuted values are sorted with a stable sort, so the order of map ``b`` depends on its values and its
    seed only.
    """
    maps = as_map_batch(maps)
    batch = maps.shape[0]
    flat = maps.reshape(batch, -1)
    seeds = _check_seeds(seeds, batch)
    perms = torch.stack([torch.randperm(flat.shape[1], generator=torch.Generator().manual_seed(s))
                         for s in seeds]).to(flat.device)
    within = torch.sort(flat.gather(1, perms), dim=1, descending=positive, stable=True).indices
    return perms.gather(1, within)


def pixel_ranks(order: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pixel_order`: ``ranks[b, i]`` is the position of pixel ``i`` in the order."""
    ranks = torch.empty_like(order)
    positions = torch.arange(order.shape[1], device=order.device).expand_as(order)
    ranks.scatter_(1, order, positions)
    return ranks


def topk_removed(normalised: torch.Tensor, positive: bool, counts: Sequence[int]) -> torch.Tensor:
    """The pixels the official code removes, ``BoolTensor [B, S, H*W]``, under ``tie_break="topk"``.

    For each map and each step ``s``: ``torch.topk(v, counts[s], dim=-1)`` with ``v`` the map flattened to
    ``[1, H * W]`` (the official shape: one image per call), negated for negative perturbation (module docstring),
    on ``normalised``'s device, which decides the tied pixels. ``normalised``: the ReLU'd min-max normalised maps
    ``[B, H, W]`` exactly as the official code stored them. The result is on the same device.
    """
    batch = normalised.shape[0]
    removed = torch.zeros(batch, len(counts), normalised[0].numel(), dtype=torch.bool, device=normalised.device)
    for b in range(batch):
        v = normalised[b].reshape(1, -1)
        if not positive:
            v = -v
        for s, k in enumerate(counts):
            removed[b, s, torch.topk(v, k, dim=-1).indices[0]] = True
    return removed


def perturbation_masks(maps: torch.Tensor, positive: bool, fractions: tuple[float, ...] = VISION_FRACTIONS, *,
                       tie_break: str | None = "topk", seeds: Sequence[int] | None = None) -> torch.Tensor:
    """Which pixels are removed at each step, ``BoolTensor [B, S, H, W]`` (True = set to black).

    The maps are ReLU'd and min-max normalised per image; step ``s`` removes ``int(H * W * fractions[s])``
    pixels, chosen by ``tie_break`` (``"topk"`` or ``"random"``; None is the official default, ``topk``; callers
    that know the protocol resolve it with :func:`resolve_tie_break`): ``topk`` by :func:`topk_removed` (a map without range is NaN there, as in the
    official code), ``random`` as the first pixels of :func:`pixel_order` with ``seeds`` (one per map;
    nested masks; a map without range is all ties, so its order is the seeded permutation).
    """
    maps = as_map_batch(maps)
    tie_break = resolve_tie_break(tie_break)
    batch, height, width = maps.shape
    normalised, degenerate = minmax_per_image(maps, relu=True)
    counts = step_pixel_counts(height * width, fractions)
    if tie_break == "topk":
        official = torch.where(degenerate[:, None, None], torch.full_like(normalised, float("nan")), normalised)
        removed = topk_removed(official, positive, counts)
    else:
        ranks = pixel_ranks(pixel_order(normalised, positive, seeds))
        removed = ranks[:, None, :] < torch.tensor(counts, device=ranks.device)[None, :, None]
    return removed.reshape(batch, len(fractions), height, width)


def tied_pixel_share(maps: torch.Tensor) -> torch.Tensor:
    """Per map, the share of pixels the tie-break can reorder, float64 ``[B]`` in [0, 1].

    Defined on the ReLU'd, min-max normalised map (the tensor pixels are chosen on): the fraction of its pixels
    whose value equals the value of at least one other pixel of the same map, i.e. the pixels in tie groups of
    size >= 2. On a ReLU'd map this includes every pixel whose relevance was <= 0; a map without range counts as
    all tied.

    Float-sensitive: it counts exact equalities, so a pixel whose relevance is within float32 rounding of zero or
    of another pixel changes tie status when the map is computed in another batch or on another device (on the
    embedded tiny ViT, 2 of 4096 pixels between a batch of 3 and the image alone: 4.9e-4). Compare it across runs
    to about a percent, not to float precision.
    """
    normalised, _ = minmax_per_image(maps, relu=True)
    flat = normalised.reshape(normalised.shape[0], -1)
    if flat.device.type == "cpu":  # NumPy: its vectorised sort is about 20x faster than torch's on a 224 x 224 map
        ordered = np.sort(flat.numpy(), axis=1)  # the same sorted values as torch.sort (-0.0 == 0.0 in both)
        equal_next = ordered[:, 1:] == ordered[:, :-1]
        tied = np.zeros(ordered.shape, dtype=bool)
    else:
        ordered = flat.sort(dim=1).values
        equal_next = ordered[:, 1:] == ordered[:, :-1]
        tied = torch.zeros_like(ordered, dtype=torch.bool)
    tied[:, 1:] |= equal_next
    tied[:, :-1] |= equal_next
    # float64 mean of 0/1 values: an integer count (exact) over the pixels, the same in NumPy and torch
    return torch.from_numpy(tied.mean(axis=1)) if isinstance(tied, np.ndarray) else tied.double().mean(dim=1)


#: positive perturbation removes the most relevant pixels first (lower is better), negative the least (higher)
_DIRECTION = MappingProxyType({"positive": False, "negative": True})

register_metric(MetricSpec("auc_predicted", _DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
                           "pixel perturbation, map of the predicted class, agreement with the original prediction",
                           "3", "%", ("positive", "negative"), (MetricSource(("agreement",)),), perturbation_auc,
                           curve=True))
register_metric(MetricSpec("auc_target", _DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
                           "pixel perturbation, map of the ground-truth class, top-1 accuracy", "3", "%",
                           ("positive", "negative"), (MetricSource(("accuracy",)),), perturbation_auc, curve=True))
register_metric(MetricSpec("tied_pixel_share", None, "mean over samples of the per-map share of tied pixels",
                           "share of pixels whose normalised value ties with another pixel of the map "
                           "(what the pixel-perturbation tie-break decides), per map kind", "3", "",
                           ("predicted", "target"), (MetricSource(("tied_pixel_share",)),), sample_mean))
