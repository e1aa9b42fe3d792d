"""Positional share of the total relevance (paper Appendix F, Figure 8; docs/protocol.md sections 2 and 6).

What the paper says (Appendix F): "We measure the sum of relevance for DeiT ... with PE relevancy
constituting 16.75%, 22.39%, and 9.22% out of the total relevancy for Tiny, Small, and Base"; Figure 8
compares "the entire relevance in the model's 'ours' and positional-associated relevance 'PE Only'". The
official repository (commit 51eb418) contains **no code** for this number (no script sums or compares the
two parts), so the definition below is ours, chosen to follow the words "sum of relevance":

* **Definition (default, reading A)** per image::

      share = 100 * P / (S + P),   P = sum of positional relevance,  S = sum of semantic relevance

  with ``S`` over the semantic input relevance (the ``[H, W]`` pixel map, or the per-token sums) and ``P``
  over the per-patch positional relevance ``sum_d R(P)[p, d]`` (docs/protocol.md section 1), both **signed**
  (``use_abs=False``): the fraction of the relevance that reached the input and was absorbed by the learned
  PE. It is outside [0, 100] when ``S`` and ``P`` have opposite signs, NaN when ``S + P == 0``.
* ``use_abs=True`` sums magnitudes element-wise (``|S|`` and ``|P|`` per pixel / patch) instead, which
  keeps the share in [0, 100] and counts negative relevance as relevance too.
* ``cls_terms=(cls_semantic, cls_positional)``: the official aggregation drops the CLS row (docs/protocol.md
  section 2, last paragraph); pass the dropped CLS terms (``Explanation.extras["cls_semantic"]`` and
  ``["cls_positional"]``) to include them in ``S`` and ``P``.
* Dataset number: :func:`pooled_positional_share` (ratio of the summed totals, "sum of relevance" over the
  dataset) or the mean of the per-image shares; report which.
* **Undefined** (the table number, :func:`pooled_positional_share`): a share of a whole exists only when its
  parts add up to that whole, i.e. when the summed ``S`` and ``P`` do not have opposite signs and ``S + P != 0``;
  it then lies in [0, 100]. Otherwise the number is NaN and ``metrics.csv`` says "undefined" with the reason
  (:data:`UNDEFINED_SHARE`). The LRP rows of a ViT put relevance of one sign on both parts (DeiT, the tiny ViT),
  so their numbers are unchanged and stay comparable with the paper's; plain Gradient x Input is not conservative
  and its semantic and positional sums nearly cancel (on the tiny ViT ``S = -0.4304``, ``P = 0.4306`` summed over
  16 images), where ``P / (S + P)`` would print -97048 %, a number no reader can interpret. Absolute sums
  (``use_abs=True``) would always be defined but would count negative relevance as positive and so change the
  DeiT numbers; they stay an option of the per-image function, not the table's definition.
* **Reading B** (the figure caption): ratio of the summed final maps, ``100 * sum(PE-only map) /
  sum(Ours map)`` with the ReLU'd maps of docs/protocol.md section 1: :func:`map_share`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import BadInputError
from .registry import MetricSource, MetricSpec, register_metric

__all__ = ["relevance_totals", "positional_share", "pooled_positional_share", "map_share",
           "positional_share_of_explanation", "UNDEFINED_SHARE"]


def _total(x, name: str, use_abs: bool) -> torch.Tensor:
    """Per-image total of ``x [B, ...]``; a ``[B]`` tensor is already a total (only allowed without abs)."""
    x = torch.as_tensor(x).detach().to(torch.float64)
    if x.dim() == 0 or x.shape[0] == 0:
        raise BadInputError(f"{name} has shape {tuple(x.shape)}, expected [B, ...] with B >= 1",
                            "pass one relevance tensor (or total) per image")
    if x.dim() == 1:
        if use_abs:
            raise BadInputError(f"{name} is a per-image total [B] but use_abs=True needs per-element relevance",
                                "pass the relevance map ([B, H, W] or [B, tokens]) so |.| is taken per element")
        return x
    if use_abs:
        x = x.abs()
    return x.reshape(x.shape[0], -1).sum(dim=1)


def relevance_totals(semantic_total, positional_total, cls_terms=None, use_abs: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-image ``(S, P)`` float64 ``[B]`` as defined in the module docstring."""
    s = _total(semantic_total, "semantic_total", use_abs)
    p = _total(positional_total, "positional_total", use_abs)
    if s.shape != p.shape:
        raise BadInputError(f"{s.shape[0]} semantic totals but {p.shape[0]} positional totals",
                            "pass the same images for both parts")
    if cls_terms is not None:
        if len(cls_terms) != 2:
            raise BadInputError("cls_terms must be (cls_semantic, cls_positional)",
                                "pass Explanation.extras['cls_semantic'] and ['cls_positional']")
        cs = torch.as_tensor(cls_terms[0]).detach().to(torch.float64).reshape(-1)
        cp = torch.as_tensor(cls_terms[1]).detach().to(torch.float64).reshape(-1)
        if cs.shape != s.shape or cp.shape != p.shape:
            raise BadInputError(f"cls terms have {cs.numel()} / {cp.numel()} values for {s.shape[0]} images",
                                "pass one CLS semantic and one CLS positional value per image")
        s = s + (cs.abs() if use_abs else cs)
        p = p + (cp.abs() if use_abs else cp)
    return s, p


def positional_share(semantic_total, positional_total, cls_terms=None, use_abs: bool = False) -> torch.Tensor:
    """Per-image positional share of the total relevance, percent, float64 ``[B]``: ``100 * P / (S + P)``.

    ``semantic_total`` / ``positional_total``: relevance tensors ``[B, ...]`` (summed per image) or
    per-image totals ``[B]`` (only with ``use_abs=False``). See the module docstring for the definition.
    """
    s, p = relevance_totals(semantic_total, positional_total, cls_terms, use_abs)
    return 100.0 * p / (s + p)


#: why a pooled share is NaN (the ``note`` of its ``metrics.csv`` row; module docstring, "Undefined")
UNDEFINED_SHARE = ("undefined: the summed semantic and positional relevance have opposite signs or add up to 0, "
                   "so neither is a share of their total")


def pooled_positional_share(semantic_totals, positional_totals) -> np.ndarray | float:
    """Dataset share, percent: ``100 * sum_i P_i / sum_i (S_i + P_i)`` from per-image totals ``[..., n]``
    (e.g. :func:`relevance_totals` collected over all batches); vectorised over leading axes. NaN (undefined, module
    docstring) when the summed ``S`` and ``P`` have opposite signs or the summed total relevance is 0, so a defined
    share is always in [0, 100]."""
    s = np.asarray(semantic_totals, dtype=np.float64)
    p = np.asarray(positional_totals, dtype=np.float64)
    if s.size == 0 or s.shape != p.shape:
        raise BadInputError(f"got {s.size} semantic and {p.size} positional totals",
                            "pass one (S, P) pair per image, at least one")
    ps, ss = p.sum(axis=-1), s.sum(axis=-1)
    total = ss + ps
    defined = (total != 0) & (ss * ps >= 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(defined, 100.0 * ps / np.where(defined, total, 1.0), np.nan)
    return float(share) if np.ndim(share) == 0 else share


def map_share(ours_maps, pe_only_maps) -> torch.Tensor:
    """Reading B of Appendix F, per image, percent: ``100 * sum(PE-only map) / sum(Ours map)``.

    Both maps are the final ReLU'd pixel maps ``[B, H, W]`` of the ``pe_only`` and ``pa_lrp`` methods for the
    same images and class. Not bounded by 100 (the ReLU is applied to different sums).
    """
    ours = _total(ours_maps, "ours_maps", use_abs=False)
    pe = _total(pe_only_maps, "pe_only_maps", use_abs=False)
    if ours.shape != pe.shape:
        raise BadInputError(f"{ours.shape[0]} Ours maps but {pe.shape[0]} PE-only maps", "pass the same images")
    return 100.0 * pe / ours


def positional_share_of_explanation(explanation, include_cls: bool = False, use_abs: bool = False
                                    ) -> torch.Tensor:
    """:func:`positional_share` of a vision :class:`~palrp_bench.lrp.explanation.Explanation` of a method with
    positional sinks (``semantic`` [B, H, W] pixel relevance, ``positional`` [B, Hp, Wp] patch relevance;
    ``include_cls`` adds ``extras["cls_semantic"]`` and ``extras["cls_positional"]``)."""
    cls_terms = None
    if include_cls:
        try:
            cls_terms = (explanation.extras["cls_semantic"], explanation.extras["cls_positional"])
        except KeyError:
            raise BadInputError("the explanation carries no CLS terms",
                                "explain with a DeiT twin that reports extras['cls_semantic'/'cls_positional']"
                                ) from None
    return positional_share(explanation.semantic, explanation.positional, cls_terms, use_abs)


register_metric(MetricSpec(
    "positional_share_percent", None, "100 * P / (S + P) of signed relevance sums, pooled over images",
    "share of the input relevance absorbed by the positional encoding (Appendix F); variant with_cls adds the CLS "
    "terms the official aggregation drops; undefined where the two sums have opposite signs", "6", "%",
    ("all", "with_cls"),
    (MetricSource(("relevance_semantic", "relevance_positional"), "all", "all"),
     MetricSource(("relevance_semantic_with_cls", "relevance_positional_with_cls"), "with_cls", "all")),
    lambda c: pooled_positional_share(c[..., 0], c[..., 1]), undefined=UNDEFINED_SHARE))
