"""Pixel maps from semantic and positional relevance of a vision transformer (docs/protocol.md section 1, vision
column).

The official PA-LRP vision code (``--method full_lrp_GammaLinear[_POS_ENC[_PE_ONLY]]_gammaConv``):

* semantic pixel map: relevance of the patch-embedding input (the normalised image) summed over RGB, signed;
* positional patch score: ``sum_d R(P)[p, d]`` of the learned position embedding of patch ``p`` (CLS row dropped),
  spread uniformly over the patch's pixels, i.e. each pixel gets the patch score divided by ``patch_size^2``
  (:func:`paint_patches`);
* Ours (``pa_lrp``) = ``ReLU(sem_pixel + pos_pixel)``, PE only = ``ReLU(pos_pixel)``, AttnLRP (and every
  semantic-only baseline) = ``ReLU(sem_pixel)``.

A learned PE has one sink (its multi-sink ablation is refused by :func:`palrp_bench.explain`); a RoPE ViT has one
per layer, whose per-patch terms are summed as ``|.|`` like the official token aggregation (signed for
``pa_lrp_no_multisink``). Only ``aggregation="official"`` is defined for images.
"""
from __future__ import annotations

import torch

from ..errors import BadInputError
from .registry import Method

__all__ = ["VISION_AGGREGATIONS", "paint_patches", "check_vision_method", "patch_positional", "signed_pixel_map",
           "aggregate_pixels"]

#: Aggregations defined for vision transformers.
VISION_AGGREGATIONS = ("official",)


def paint_patches(patch_scores: torch.Tensor, patch_size: tuple[int, int], image_size: tuple[int, int]) -> torch.Tensor:
    """Spread per-patch scores ``[B, Hp, Wp]`` uniformly over their pixels: ``[B, H, W]``.

    Each pixel of patch ``(i, j)`` receives ``patch_scores[:, i, j] / (ph * pw)``, so the map sums to the same total.
    Pixels outside the patch grid (an image not divisible by the patch size; the conv never sees them) get 0.
    """
    ph, pw = patch_size
    h, w = image_size
    b, hp, wp = patch_scores.shape
    if hp * ph > h or wp * pw > w:
        raise BadInputError(f"a {hp}x{wp} grid of {ph}x{pw} patches does not fit a {h}x{w} image",
                            "pass the image size the patch grid was computed from")
    per_pixel = patch_scores / float(ph * pw)
    painted = per_pixel.repeat_interleave(ph, dim=1).repeat_interleave(pw, dim=2)
    if painted.shape[1:] != (h, w):
        full = painted.new_zeros(b, h, w)
        full[:, :hp * ph, :wp * pw] = painted
        painted = full
    return painted


def check_vision_method(method: Method, aggregation: str) -> None:
    """Raise :class:`BadInputError` if ``method`` / ``aggregation`` has no meaning for a learned-PE vision model."""
    if aggregation not in VISION_AGGREGATIONS:
        raise BadInputError(f"aggregation {aggregation!r} is not defined for vision transformers",
                            f"use one of: {', '.join(VISION_AGGREGATIONS)} (eq11 is for RoPE language models)")
    if not (method.use_semantic or method.use_positional):
        raise BadInputError(f"method {method.name!r} uses neither semantic nor positional relevance",
                            "register the method with use_semantic and/or use_positional")


def patch_positional(method: Method, positional: torch.Tensor) -> torch.Tensor:
    """The per-patch positional term ``[B, Hp, Wp]`` that ``method`` adds to the semantic pixel map (before painting):
    a single sink as it is, per-sink components ``[B, S, C, Hp, Wp]`` reduced as the token aggregation does
    (``sum |.|``, signed for ``pa_lrp_no_multisink``; module docstring)."""
    if positional.dim() == 5:
        return (positional.abs() if method.positional_abs else positional).sum((1, 2))
    return positional


def signed_pixel_map(method: Method, aggregation: str, *, semantic: torch.Tensor, positional: torch.Tensor,
                     patch_size: tuple[int, int]) -> torch.Tensor:
    """The ``[B, H, W]`` map of ``method`` before the final ReLU, from the signed semantic pixel map ``[B, H, W]`` and
    the signed per-patch positional relevance: ``[B, Hp, Wp]`` for a single sink (learned PE), or ``[B, S, C, Hp, Wp]``
    per sink and component for multi-sink kinds (RoPE ViTs), reduced like the token aggregation: ``sum |.|``
    (multi-sink) or signed (``pa_lrp_no_multisink``) -- module docstring. Protocols that order pixels by signed
    relevance (the AttnLRP paper's least-relevant-first curves) read this."""
    check_vision_method(method, aggregation)
    positional = patch_positional(method, positional)
    total = torch.zeros_like(semantic)
    if method.use_semantic:
        total = total + semantic
    if method.use_positional:
        total = total + paint_patches(positional, patch_size, tuple(semantic.shape[-2:]))
    return total


def aggregate_pixels(method: Method, aggregation: str, *, semantic: torch.Tensor, positional: torch.Tensor,
                     patch_size: tuple[int, int]) -> torch.Tensor:
    """Final ``[B, H, W]`` map of ``method`` from the signed semantic pixel map ``[B, H, W]`` and the signed
    per-patch positional relevance ``[B, Hp, Wp]``: ReLU of :func:`signed_pixel_map` (module docstring)."""
    return signed_pixel_map(method, aggregation, semantic=semantic, positional=positional,
                            patch_size=patch_size).clamp(min=0)
