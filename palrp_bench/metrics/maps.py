"""Per-image normalisation of pixel maps shared by the vision metrics (docs/protocol.md sections 3 and 4).

The official code min-max normalises every map on its own, in float32:
``(M - min M) / (max M - min M)``. The perturbation protocol applies it to ReLU'd maps (section 3), the
segmentation protocol to the map as given (section 4). A constant map has no range; the official code then
produces NaN (0/0). Here such a map becomes all zeros and is flagged as ``degenerate`` so each protocol can
reproduce what the official code does with the NaN (see the callers).

Computation dtype: the map's own floating dtype, promoted to at least float32 (bfloat16 / float16 maps are
upcast). float32 maps are therefore normalised exactly as the official code did; pass float64 maps to avoid
the ties that float32 rounding can create between nearly equal values.
"""
from __future__ import annotations

import torch

from ..errors import BadInputError

__all__ = ["as_map_batch", "minmax_per_image"]


def as_map_batch(maps, name: str = "maps") -> torch.Tensor:
    """Return ``maps`` as a floating tensor ``[B, H, W]`` (a ``[B, 1, H, W]`` input is squeezed).

    Raises :class:`BadInputError` for other shapes, empty batches and non-finite values.
    """
    if not isinstance(maps, torch.Tensor):
        maps = torch.as_tensor(maps)
    if maps.dim() == 4 and maps.shape[1] == 1:
        maps = maps[:, 0]
    if maps.dim() != 3:
        raise BadInputError(f"{name} has shape {tuple(maps.shape)}, expected [B, H, W]",
                            "pass one 2-D pixel map per image (e.g. Explanation.scores)")
    if maps.shape[0] == 0 or maps.shape[1] * maps.shape[2] == 0:
        raise BadInputError(f"{name} is empty (shape {tuple(maps.shape)})", "pass at least one non-empty map")
    if not maps.is_floating_point():
        maps = maps.to(torch.float32)
    elif maps.dtype in (torch.float16, torch.bfloat16):
        maps = maps.to(torch.float32)
    if not maps.is_meta and not bool(torch.isfinite(maps).all()):  # meta tensors (shapes only) hold no values
        raise BadInputError(f"{name} contains NaN or infinite values",
                            "check the explanation (e.g. a NaN logit) before evaluating it")
    return maps


def minmax_per_image(maps: torch.Tensor, relu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Min-max normalise each map of ``maps [B, H, W]`` to [0, 1], optionally after a ReLU.

    Returns ``(normalised [B, H, W], degenerate [B] bool)`` where ``degenerate`` marks maps with
    ``max == min`` (after the ReLU); those come back as all zeros.
    """
    maps = as_map_batch(maps)
    if relu:
        maps = maps.clamp(min=0)
    flat = maps.reshape(maps.shape[0], -1)
    lo, hi = flat.amin(dim=1), flat.amax(dim=1)  # vectorised reductions (faster than min / max with indices)
    span = hi - lo
    degenerate = span == 0
    safe_span = torch.where(degenerate, torch.ones_like(span), span)
    out = (maps - lo[:, None, None]).div_(safe_span[:, None, None])
    return out.masked_fill_(degenerate[:, None, None], 0.0), degenerate
