"""Every table metric of the project as data: direction, convention, description, and how it is computed from
the per-sample rows of ``results.csv`` (lm-evaluation-harness style).

Reports and result rows look metrics up here instead of hard-coding "lower is better". Names match the
``metric`` column of ``results/paper/*.csv``. A metric's direction can depend on the protocol variant (vision
perturbation: positive = remove the most relevant pixels first, lower is better; negative = higher is
better), so ``higher_is_better`` is either a bool, a per-variant mapping, or None (descriptive numbers
without a "better" direction, such as the Appendix F share).

How a table number is computed (the one path from per-sample rows to ``metrics.csv``,
:mod:`palrp_bench.metrics.table`): each :class:`MetricSpec` names its ``sources`` (which per-sample rows feed it)
and its ``compute`` function, which is the metric's function of this package (:func:`~.nlp.auac`,
:func:`~.perturbation.perturbation_auc`, :func:`~.segmentation.pixel_accuracy`, ...) applied to a component
matrix ``[..., n, k]``: the ``k`` steps of a curve, or the ``k`` scalar rows of a sample in the order
``inputs`` lists them. ``compute`` is vectorised over leading axes, so bootstrap resamples are one call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

from ..errors import BadInputError
from .auc import NLP_FRACTIONS, VISION_STEPS
from .nlp import au_mse, auac
from .perturbation import perturbation_auc
from .segmentation import mean_average_precision, mean_iou, pixel_accuracy
from .share import pooled_positional_share

__all__ = ["MetricSource", "MetricSpec", "METRICS", "HIGHER_IS_BETTER", "get_metric", "higher_is_better"]

#: ``MetricSource.variant`` value meaning "every variant present in the rows, kept as is"
EACH_VARIANT = "*"


@dataclass(frozen=True)
class MetricSource:
    """Which per-sample rows feed a table metric.

    ``inputs``: the raw ``metric`` names of ``results.csv`` rows. A curve metric has one input whose rows carry a
    ``step``; a pooled metric has scalar inputs, one component each. ``variant``: the table variant these rows
    give (:data:`EACH_VARIANT`: every raw variant, kept as is); ``raw_variant``: only rows of this raw variant.
    """

    inputs: tuple[str, ...]
    variant: str = EACH_VARIANT
    raw_variant: str | None = None


@dataclass(frozen=True)
class MetricSpec:
    """One table metric: ``name`` (as in result rows), ``higher_is_better`` (bool, per-variant mapping or None),
    ``convention`` (how the number is computed and scaled), ``description``, ``section`` (PROTOCOL.md section,
    see docs/evaluation.md), ``unit``, ``variants``; ``sources`` and ``compute`` (module docstring): ``curve``
    metrics take the steps of one input as components, pooled metrics one component per scalar input."""

    name: str
    higher_is_better: bool | Mapping[str, bool] | None
    convention: str
    description: str
    section: str
    unit: str = ""
    variants: tuple[str, ...] = field(default=())
    sources: tuple[MetricSource, ...] = field(default=())
    compute: Callable[[np.ndarray], np.ndarray] | None = None
    curve: bool = False


_PERTURBATION_DIRECTION = MappingProxyType({"positive": False, "negative": True})
_SEG_CONVENTION = "dataset-pooled pixel counts (sum over images, then ratio), x100"

_SEG_VARIANTS = ("mean_threshold", "otsu_threshold")

METRICS: dict[str, MetricSpec] = {m.name: m for m in (
    MetricSpec("auac", True, NLP_FRACTIONS.describe() + " of the sample-mean curve",
               "area under the accuracy (tracked-class probability) curve", "2", "",
               ("generation", "pruning"), (MetricSource(("ac",)),), auac, curve=True),
    MetricSpec("au_mse", False, NLP_FRACTIONS.describe() + " of the sample-mean curve",
               "area under the squared-logit-change curve", "2", "", ("generation", "pruning"),
               (MetricSource(("mse",)),), au_mse, curve=True),
    MetricSpec("auc_predicted", _PERTURBATION_DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
               "pixel perturbation, map of the predicted class, agreement with the original prediction", "3",
               "%", ("positive", "negative"), (MetricSource(("agreement",)),), perturbation_auc, curve=True),
    MetricSpec("auc_target", _PERTURBATION_DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
               "pixel perturbation, map of the ground-truth class, top-1 accuracy", "3", "%",
               ("positive", "negative"), (MetricSource(("accuracy",)),), perturbation_auc, curve=True),
    MetricSpec("pixel_accuracy", True, _SEG_CONVENTION, "segmentation pixel accuracy of the thresholded map",
               "4", "%", _SEG_VARIANTS, (MetricSource(("pix_correct", "pix_labeled")),),
               lambda c: pixel_accuracy(c[..., 0], c[..., 1])),
    MetricSpec("miou", True, _SEG_CONVENTION + "; mean over {background, foreground}",
               "segmentation mean intersection over union", "4", "%", _SEG_VARIANTS,
               (MetricSource(("inter_bg", "inter_fg", "union_bg", "union_fg")),),
               lambda c: mean_iou(c[..., 0:2], c[..., 2:4])),
    MetricSpec("map", True, "mean over images of the per-image 2-channel average precision, x100",
               "segmentation mean average precision of the soft map (computed, not in the paper)", "4", "%",
               _SEG_VARIANTS, (MetricSource(("ap",)),), lambda c: mean_average_precision(c[..., 0])),
    MetricSpec("positional_share_percent", None,
               "100 * P / (S + P) of signed relevance sums, pooled over images (metrics/share.py)",
               "share of the input relevance absorbed by the positional encoding (Appendix F); "
               "variant with_cls adds the CLS terms the official aggregation drops", "6", "%",
               ("all", "with_cls"),
               (MetricSource(("relevance_semantic", "relevance_positional"), "all", "all"),
                MetricSource(("relevance_semantic_with_cls", "relevance_positional_with_cls"), "with_cls", "all")),
               lambda c: pooled_positional_share(c[..., 0], c[..., 1])),
)}


def _direction_table() -> dict[str, bool | dict[str, bool] | None]:
    table: dict[str, bool | dict[str, bool] | None] = {}
    for spec in METRICS.values():
        hib = spec.higher_is_better
        table[spec.name] = dict(hib) if isinstance(hib, Mapping) else hib
    return table


#: ``{"auac": True, "au_mse": False, "auc_predicted": {"positive": False, "negative": True}, ...}``
HIGHER_IS_BETTER = _direction_table()


def get_metric(name: str) -> MetricSpec:
    try:
        return METRICS[name]
    except KeyError:
        raise BadInputError(f"unknown metric {name!r}", f"use one of: {', '.join(sorted(METRICS))}") from None


def higher_is_better(name: str, variant: str | None = None) -> bool | None:
    """Direction of ``name`` (for ``variant`` when it depends on it); None when the metric has none."""
    spec = get_metric(name)
    hib = spec.higher_is_better
    if isinstance(hib, Mapping):
        if variant not in hib:
            raise BadInputError(f"the direction of {name!r} depends on the variant, got {variant!r}",
                                f"pass variant= one of: {', '.join(hib)}")
        return hib[variant]
    return hib
