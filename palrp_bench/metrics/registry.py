"""Every table metric of the project as data: direction, convention, description, and how it is computed from
the per-sample rows of ``results.csv`` (lm-evaluation-harness style).

Reports and result rows look metrics up here instead of hard-coding "lower is better". Names match the
``metric`` column of ``results/paper/*.csv``. A metric's direction can depend on the protocol variant (vision
perturbation: positive = remove the most relevant pixels first, lower is better; negative = higher is
better), so ``higher_is_better`` is either a bool, a per-variant mapping, or None (descriptive numbers
without a "better" direction, such as the Appendix F share).

Each metric is registered next to its function (:func:`register_metric` in ``metrics/nlp.py``,
``perturbation.py``, ``segmentation.py``, ``share.py``); :func:`metric_specs` imports every module of the package,
so a new metric is one module and its test.

How a table number is computed (the one path from per-sample rows to ``metrics.csv``,
:mod:`palrp_bench.metrics.table`): each :class:`MetricSpec` names its ``sources`` (which per-sample rows feed it)
and its ``compute`` function, which is the metric's function of this package (:func:`~.nlp.auac`,
:func:`~.perturbation.perturbation_auc`, :func:`~.segmentation.pixel_accuracy`, ...) applied to a component
matrix ``[..., n, k]``: the ``k`` steps of a curve, or the ``k`` scalar rows of a sample in the order
``inputs`` lists them. ``compute`` is vectorised over leading axes, so bootstrap resamples are one call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from ..discovery import import_package_modules
from ..errors import BadInputError

__all__ = ["MetricSource", "MetricSpec", "METRICS", "EACH_VARIANT", "register_metric", "metric_specs", "get_metric",
           "higher_is_better", "curve_inputs", "sample_mean"]

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
    ``convention`` (how the number is computed and scaled), ``description``, ``section`` (docs/protocol.md section,
    see docs/evaluation.md), ``unit``, ``variants``; ``sources`` and ``compute`` (module docstring): ``curve``
    metrics take the steps of one input as components, pooled metrics one component per scalar input; ``note``: a
    caveat written into the ``note`` column of every table number of the metric (e.g. that a published value is not
    comparable); ``undefined`` the reason a NaN of ``compute`` is no missing number but a quantity without a
    value."""

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
    note: str = ""
    #: why ``compute`` can be NaN on usable samples (a quantity with no value there, e.g. a share whose parts have
    #: opposite signs): the ``note`` of such a ``metrics.csv`` row, which reports print as "undefined"
    undefined: str = ""


METRICS: dict[str, MetricSpec] = {}


def sample_mean(components) -> np.ndarray | float:
    """Sample mean of one per-sample value ``[..., n, 1]`` (a per-sample area, a per-sample share): the compute
    function of every table metric that is a plain mean over samples."""
    out = np.asarray(components, dtype=np.float64)[..., 0].mean(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def register_metric(spec: MetricSpec) -> MetricSpec:
    """Make a table metric known; each metric is registered next to its function (``metrics/nlp.py``, ...)."""
    METRICS[spec.name] = spec
    return spec


def metric_specs() -> dict[str, MetricSpec]:
    """Every registered table metric (imports the modules of this package once, so a new metric is one module)."""
    import_package_modules(__package__)
    return METRICS


def curve_inputs() -> tuple[str, ...]:
    """The raw row metrics that are curves over ``step`` (what curve plots draw)."""
    return tuple(sorted({src.inputs[0] for spec in metric_specs().values() if spec.curve for src in spec.sources}))


def get_metric(name: str) -> MetricSpec:
    specs = metric_specs()
    try:
        return specs[name]
    except KeyError:
        raise BadInputError(f"unknown metric {name!r}", f"use one of: {', '.join(sorted(specs))}") from None


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
