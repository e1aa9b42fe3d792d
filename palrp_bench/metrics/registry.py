"""Every metric of the project as data: direction, convention, description (lm-evaluation-harness style).

Reports and result rows look metrics up here instead of hard-coding "lower is better". Names match the
``metric`` column of ``results/paper/*.csv``. A metric's direction can depend on the protocol variant (vision
perturbation: positive = remove the most relevant pixels first, lower is better; negative = higher is
better), so ``higher_is_better`` is either a bool, a per-variant mapping, or None (descriptive numbers
without a "better" direction, such as the Appendix F share).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import BadInputError
from .auc import NLP_FRACTIONS, VISION_STEPS

__all__ = ["MetricSpec", "METRICS", "HIGHER_IS_BETTER", "get_metric", "higher_is_better"]


@dataclass(frozen=True)
class MetricSpec:
    """One metric: ``name`` (as in result rows), ``higher_is_better`` (bool, per-variant mapping or None),
    ``convention`` (how the number is computed and scaled), ``description``, ``protocol`` (PROTOCOL.md
    section), ``unit``."""

    name: str
    higher_is_better: bool | Mapping[str, bool] | None
    convention: str
    description: str
    protocol: str
    unit: str = ""
    variants: tuple[str, ...] = field(default=())


_PERTURBATION_DIRECTION = MappingProxyType({"positive": False, "negative": True})
_SEG_CONVENTION = "dataset-pooled pixel counts (sum over images, then ratio), x100"

METRICS: dict[str, MetricSpec] = {m.name: m for m in (
    MetricSpec("auac", True, NLP_FRACTIONS.describe() + " of the sample-mean curve",
               "area under the accuracy (tracked-class probability) curve", "2", "",
               ("generation", "pruning")),
    MetricSpec("au_mse", False, NLP_FRACTIONS.describe() + " of the sample-mean curve",
               "area under the squared-logit-change curve", "2", "", ("generation", "pruning")),
    MetricSpec("auc_predicted", _PERTURBATION_DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
               "pixel perturbation, map of the predicted class, agreement with the original prediction", "3",
               "%", ("positive", "negative")),
    MetricSpec("auc_target", _PERTURBATION_DIRECTION, VISION_STEPS.describe() + " of the sample-mean curve",
               "pixel perturbation, map of the ground-truth class, top-1 accuracy", "3", "%",
               ("positive", "negative")),
    MetricSpec("pixel_accuracy", True, _SEG_CONVENTION, "segmentation pixel accuracy of the thresholded map",
               "4", "%", ("mean_threshold", "otsu_threshold")),
    MetricSpec("miou", True, _SEG_CONVENTION + "; mean over {background, foreground}",
               "segmentation mean intersection over union", "4", "%", ("mean_threshold", "otsu_threshold")),
    MetricSpec("map", True, "mean over images of the per-image 2-channel average precision, x100",
               "segmentation mean average precision of the soft map (computed, not in the paper)", "4", "%",
               ("mean_threshold", "otsu_threshold")),
    MetricSpec("positional_share_percent", None,
               "100 * P / (S + P) of signed relevance sums, pooled over images (metrics/share.py)",
               "share of the input relevance absorbed by the positional encoding (Appendix F); "
               "variant with_cls adds the CLS terms the official aggregation drops", "6", "%",
               ("all", "with_cls")),
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
