"""Tidy per-sample rows -> the paper's table metrics, with per-sample components for intervals and tests.

Every table metric is a function ``g`` of the sample-MEAN of a small per-sample component vector, so one
mechanism serves point estimates, bootstrap intervals and paired comparisons:

============================  ==========================  ===============================================
table metric (variant)        per-sample components       g(mean components)
============================  ==========================  ===============================================
auac, au_mse (generation,     trapezoid area of the        the area itself -- equal to the area of the
pruning)                      sample's ac / mse curve      sample-mean curve (PROTOCOL.md section 2)
auc_predicted, auc_target     x100 area of the sample's    as above (PROTOCOL.md section 3, x100)
(positive, negative)          0/1 agreement / accuracy
pixel_accuracy                correct, labeled pixels      100 * correct / labeled (pooled, section 4)
miou                          inter/union bg, fg           50 * (inter_bg/union_bg + inter_fg/union_fg)
map                           average precision            100 * mean AP
positional_share_percent      P, S (signed sums; with      100 * P / (S + P) (pooled, Appendix F,
(all, with_cls)               the CLS terms: with_cls)     metrics/share.py)
============================  ==========================  ===============================================

A curve with a NaN point gives a NaN area; such samples are left out of the mean (``np.nanmean``, as the
official code averages curves), and the areas of complete curves are what the per-sample statistics use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

#: columns identifying one reproduced cell in a tidy CSV
CELL_COLUMNS = ["run", "model", "quantization", "dtype", "task", "paper_task", "protocol", "aggregation", "method"]


@dataclass(frozen=True)
class CurveMetric:
    """A table metric that is the area under a per-sample curve (raw metric over ``step``)."""

    raw: str
    name: str
    scale: float = 1.0


@dataclass(frozen=True)
class PooledMetric:
    """A table metric computed from sample-mean components (``raw`` metric names, in the order ``g`` expects)."""

    name: str
    components: tuple[str, ...]
    g: Callable[[np.ndarray], np.ndarray]
    #: the raw variant the components live in -> the table variant (identity when None)
    variants: dict | None = None


CURVE_METRICS = (
    CurveMetric("ac", "auac"),
    CurveMetric("mse", "au_mse"),
    CurveMetric("agreement", "auc_predicted", 100.0),
    CurveMetric("accuracy", "auc_target", 100.0),
)


def _ratio(num, den):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den != 0, num / np.where(den != 0, den, 1.0), np.nan)


POOLED_METRICS = (
    PooledMetric("pixel_accuracy", ("pix_correct", "pix_labeled"), lambda c: 100.0 * _ratio(c[..., 0], c[..., 1])),
    PooledMetric("miou", ("inter_bg", "union_bg", "inter_fg", "union_fg"),
                 lambda c: 50.0 * (_ratio(c[..., 0], c[..., 1]) + _ratio(c[..., 2], c[..., 3]))),
    PooledMetric("map", ("ap",), lambda c: 100.0 * c[..., 0]),
    PooledMetric("positional_share_percent", ("relevance_positional", "relevance_semantic"),
                 lambda c: 100.0 * _ratio(c[..., 0], c[..., 0] + c[..., 1]), {"all": "all"}),
    PooledMetric("positional_share_percent", ("relevance_positional_with_cls", "relevance_semantic_with_cls"),
                 lambda c: 100.0 * _ratio(c[..., 0], c[..., 0] + c[..., 1]), {"all": "with_cls"}),
)


@dataclass
class DerivedMetric:
    """One table metric of one cell: the ``[n, k]`` per-sample components, their sample ids, and ``g``."""

    cell: dict
    metric: str
    variant: str
    sample_ids: np.ndarray
    components: np.ndarray
    g: Callable[[np.ndarray], np.ndarray]

    @property
    def n(self) -> int:
        return int(np.isfinite(self.components).all(axis=1).sum())

    def value(self) -> float:
        """The table number: ``g`` of the sample-mean components (NaN samples left out)."""
        ok = np.isfinite(self.components).all(axis=1)
        if not ok.any():
            return float("nan")
        return float(self.g(self.components[ok].mean(axis=0)))

    def per_sample(self) -> np.ndarray:
        """``g`` of each sample's own components (the per-sample value tests and t-intervals use)."""
        return np.asarray(self.g(self.components), dtype=np.float64)


def _trapezoid_rows(curves: np.ndarray, x: np.ndarray) -> np.ndarray:
    return ((x[1:] - x[:-1]) * (curves[:, 1:] + curves[:, :-1]) / 2.0).sum(axis=1)


def _cell_key(row) -> dict:
    return {c: row[c] for c in CELL_COLUMNS}


def derive(df: pd.DataFrame) -> list[DerivedMetric]:
    """All table metrics that the rows of ``df`` (a tidy results frame) support."""
    if df.empty:
        return []
    df = df.copy()
    for col in CELL_COLUMNS:
        if col not in df.columns:
            df[col] = ""
    df[CELL_COLUMNS] = df[CELL_COLUMNS].fillna("")
    out: list[DerivedMetric] = []
    for key, cell_df in df.groupby(CELL_COLUMNS, sort=True, dropna=False):
        cell = dict(zip(CELL_COLUMNS, key))
        rules = sorted(set(cell_df["rules"].dropna().astype(str))) if "rules" in cell_df else []
        cell["rules"] = ",".join(r for r in rules if r)
        for cm in CURVE_METRICS:
            sub = cell_df[cell_df["metric"] == cm.raw]
            for variant, vdf in sub.groupby("variant", sort=True):
                wide = vdf.pivot_table(index="sample_id", columns="step", values="value", aggfunc="first",
                                       dropna=False)
                x = np.asarray(wide.columns, dtype=np.float64)
                areas = _trapezoid_rows(wide.to_numpy(dtype=np.float64), x) * cm.scale
                out.append(DerivedMetric(cell, cm.name, str(variant), np.asarray(wide.index), areas[:, None],
                                         lambda c: c[..., 0]))
        for pm in POOLED_METRICS:
            sub = cell_df[cell_df["metric"].isin(pm.components)]
            if sub.empty:
                continue
            for raw_variant, vdf in sub.groupby("variant", sort=True):
                if pm.variants is not None and raw_variant not in pm.variants:
                    continue
                wide = vdf.pivot_table(index="sample_id", columns="metric", values="value", aggfunc="first")
                if not all(c in wide.columns for c in pm.components):
                    continue
                variant = pm.variants[raw_variant] if pm.variants is not None else str(raw_variant)
                out.append(DerivedMetric(cell, pm.name, variant, np.asarray(wide.index),
                                         wide[list(pm.components)].to_numpy(dtype=np.float64), pm.g))
    return out


def nonfinite_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell: number of samples and of samples with non-finite relevance."""
    from ..runner.tasks import NONFINITE_METRIC

    if df.empty:
        return pd.DataFrame(columns=CELL_COLUMNS + ["n_samples", "n_nonfinite"])
    df = df.copy()
    df[CELL_COLUMNS] = df[CELL_COLUMNS].fillna("")
    g = df.groupby(CELL_COLUMNS, sort=True)
    out = g["sample_id"].nunique().rename("n_samples").to_frame()
    out["n_nonfinite"] = g.apply(lambda d: d.loc[d["metric"] == NONFINITE_METRIC, "sample_id"].nunique(),
                                 include_groups=False)
    return out.reset_index()
