"""Per-sample rows -> the final table numbers (``metrics.csv``): the one path from curves and counts to a table.

For every cell of a tidy results frame (``palrp_bench.rundir.RESULT_COLUMNS``) and every table metric of
:func:`~palrp_bench.metrics.registry.metric_specs` its rows support, :func:`metric_samples` gathers the per-sample
components (the steps of a curve, or the scalar counts of a pooled metric) and :func:`table_metrics` computes

* ``value``: the metric's own function of this package on the retained samples (``MetricSpec.compute``: AUAC is
  :func:`~palrp_bench.metrics.nlp.auac`, pixel accuracy :func:`~palrp_bench.metrics.segmentation.pixel_accuracy`,
  ...), so the number equals what those functions give on the same curves;
* ``ci_low`` / ``ci_high``: a BCa bootstrap interval (``scipy.stats.bootstrap``, samples resampled jointly across
  the components of a sample) of that same function;
* ``n``: samples used; ``n_nonfinite``: samples of the cell with a non-finite relevance or metric value.

Non-finite values (docs/evaluation.md "Non-finite values"):

* ``protocol=official`` averages each curve step over the samples that are finite at that step (the official
  code's ``nanmean``); a sample contributes its finite steps. Pooled (non-curve) metrics use the samples whose
  counts are all finite.
* ``protocol=corrected`` leaves every sample with a non-finite value out.

Either way such samples are counted in ``n_nonfinite``, together with the samples whose relevance was non-finite
(they have no metric rows at all, only ``nonfinite_relevance``).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..rundir import CELL_COLUMNS, CELL_JOINED_COLUMNS, METRIC_COLUMNS, NONFINITE_METRIC
from .registry import EACH_VARIANT, MetricSpec, metric_specs

__all__ = ["MetricSamples", "metric_samples", "confidence_interval", "table_metrics", "wide_values",
           "INTERVAL_METHOD"]

#: how ``ci_low`` / ``ci_high`` are computed (recorded in the ``interval`` column)
INTERVAL_METHOD = "bca_bootstrap"
#: bootstrap resamples evaluated per vectorised call (bounds memory: batch x n x k floats)
_BATCH = 100
#: fewer retained samples than this: the interval is still computed but flagged (:data:`SMALL_SAMPLE_NOTE`). In a
#: simulation (docs/evaluation.md, "Intervals at small n") the nominal 95% BCa interval of a mean covered the true
#: mean in 72-86% of draws at n = 3-8 and reached 90% only from about 12-15 samples on skewed data; 15 is where
#: every tested distribution was at or above 90%
MIN_SAMPLES_FOR_INTERVAL = 15
SMALL_SAMPLE_NOTE = (f"fewer than {MIN_SAMPLES_FOR_INTERVAL} samples: the bootstrap interval covers less often than "
                     "its confidence level says (docs/evaluation.md, \"Intervals at small n\")")


@dataclass
class MetricSamples:
    """One table metric of one cell: sample ids ``[n]`` and per-sample components ``[n, k]`` (NaN where a value
    was non-finite or missing), plus the cell's samples with non-finite relevance."""

    cell: dict
    spec: MetricSpec
    variant: str
    sample_ids: np.ndarray
    components: np.ndarray
    n_nonfinite_relevance: int = 0

    @property
    def metric(self) -> str:
        return self.spec.name

    def _finite_rows(self) -> np.ndarray:
        finite = np.isfinite(self.components)
        if self.spec.curve and self.cell.get("protocol") == "official":
            return finite.any(axis=1)  # nanmean per step: a sample counts with its finite steps
        return finite.all(axis=1)

    def retained(self) -> tuple[np.ndarray, np.ndarray]:
        """``(sample_ids, components)`` of the samples the table number uses (module docstring)."""
        keep = self._finite_rows()
        return self.sample_ids[keep], self.components[keep]

    @property
    def n(self) -> int:
        return int(self._finite_rows().sum())

    @property
    def n_nonfinite(self) -> int:
        return int((~np.isfinite(self.components).all(axis=1)).sum()) + self.n_nonfinite_relevance

    def value(self) -> float:
        """The table number (NaN without usable samples)."""
        _, comps = self.retained()
        return float(self.spec.compute(comps)) if comps.shape[0] else float("nan")

    def subset(self, sample_ids) -> "MetricSamples":
        """The same metric on the samples of ``sample_ids`` only (e.g. one length x depth bin of the needle grid),
        so its :meth:`value` is the metric's own function on them."""
        keep = np.isin(self.sample_ids, np.asarray(list(sample_ids), dtype=self.sample_ids.dtype))
        return MetricSamples(self.cell, self.spec, self.variant, self.sample_ids[keep], self.components[keep], 0)

    def per_sample(self) -> np.ndarray:
        """The metric of each retained sample on its own (``[n]``; used by paired comparisons)."""
        _, comps = self.retained()
        return np.asarray(self.spec.compute(comps[:, None, :]), dtype=np.float64).reshape(-1)


def _frame_with_cells(results: pd.DataFrame) -> pd.DataFrame:
    df = results.copy()
    columns = CELL_COLUMNS + CELL_JOINED_COLUMNS
    for col in columns:
        if col not in df.columns:  # e.g. results.csv of a run made before the column existed
            df[col] = ""
    df[columns] = df[columns].astype(object).fillna("").astype(str)
    df["variant"] = df["variant"].astype(str)
    return df


def wide_values(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """Tidy rows as a ``sample_id`` x ``column`` frame of their first finite ``value`` (a
    ``pivot_table(aggfunc="first")``, written as a groupby, which is several times faster)."""
    return rows.groupby(["sample_id", column], sort=True)["value"].first().unstack(column)


def _components(rows: pd.DataFrame, spec: MetricSpec, inputs: tuple[str, ...], ids: np.ndarray) -> np.ndarray:
    """``[len(ids), k]``: the values of each (sample, step) of a curve or (sample, input) of a pooled metric."""
    wide = wide_values(rows, "step" if spec.curve else "metric")
    if spec.curve:
        return wide.reindex(ids).to_numpy(dtype=np.float64)
    return wide.reindex(index=ids, columns=list(inputs)).to_numpy(dtype=np.float64)


def metric_samples(results: pd.DataFrame) -> list[MetricSamples]:
    """Every table metric the rows of ``results`` support, per cell (see the module docstring)."""
    if results.empty:
        return []
    df = _frame_with_cells(results)
    out: list[MetricSamples] = []
    for key, cell_df in df.groupby(CELL_COLUMNS, sort=True):
        cell = dict(zip(CELL_COLUMNS, key))
        for col in CELL_JOINED_COLUMNS:
            cell[col] = ",".join(sorted({v for v in cell_df[col] if v}))
        by_metric = dict(tuple(cell_df.groupby("metric", sort=False)))  # one pass, not one scan per source
        n_bad = int(by_metric[NONFINITE_METRIC]["sample_id"].nunique()) if NONFINITE_METRIC in by_metric else 0
        for spec in metric_specs().values():
            for source in spec.sources:
                present = [by_metric[m] for m in source.inputs if m in by_metric]
                if not present:
                    continue
                rows = pd.concat(present) if len(present) > 1 else present[0]
                if source.raw_variant is not None:
                    rows = rows[rows["variant"] == source.raw_variant]
                for raw_variant, vdf in rows.groupby("variant", sort=True):
                    if not set(source.inputs) <= set(vdf["metric"]):
                        continue
                    variant = raw_variant if source.variant == EACH_VARIANT else source.variant
                    ids = np.asarray(sorted(vdf["sample_id"].unique()))
                    out.append(MetricSamples(cell, spec, str(variant), ids,
                                             _components(vdf, spec, source.inputs, ids), n_bad))
    return out


def confidence_interval(samples: MetricSamples, confidence: float = 0.95, n_resamples: int = 1000,
                        seed: int = 0) -> tuple[float, float, str]:
    """``(low, high, note)`` of the BCa bootstrap interval of ``samples.value()`` (``scipy.stats.bootstrap``; all
    components of a sample are resampled together). Samples that are all equal give the value as a zero-width
    interval with a note (BCa is undefined there); fewer than 2 samples give NaN with a note, a value the metric
    leaves undefined (``MetricSpec.undefined``) gives NaN with that reason, and so does an interval
    that does not contain the estimate (an unstable statistic, e.g. a share whose denominator changes sign across
    resamples, where no bootstrap interval means anything). An interval from fewer than
    :data:`MIN_SAMPLES_FOR_INTERVAL` samples carries :data:`SMALL_SAMPLE_NOTE`."""
    from scipy import stats

    _, comps = samples.retained()
    n = comps.shape[0]
    if n < 2:
        return float("nan"), float("nan"), "fewer than 2 samples: no interval"
    if samples.spec.undefined and not np.isfinite(samples.value()):
        return float("nan"), float("nan"), samples.spec.undefined  # a quantity without a value (MetricSpec.undefined)
    equal = np.all((comps == comps[0]) | (np.isnan(comps) & np.isnan(comps[0])))
    if equal:
        value = samples.value()
        return value, value, "all samples equal: zero-width interval"
    compute = samples.spec.compute

    def statistic(*columns, axis):
        return compute(np.stack([np.moveaxis(c, axis, -1) for c in columns], axis=-1))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on degenerate jackknife values; handled below
        result = stats.bootstrap(tuple(comps.T), statistic, paired=True, vectorized=True, method="BCa",
                                 confidence_level=confidence, n_resamples=n_resamples, batch=_BATCH,
                                 random_state=np.random.default_rng(seed))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (np.isfinite(low) and np.isfinite(high)):
        return float("nan"), float("nan"), "degenerate bootstrap distribution: no interval"
    if not low <= samples.value() <= high:
        # an unstable statistic (a ratio whose denominator changes sign across resamples): BCa's bias correction
        # then pushes the whole interval past the estimate, and no bootstrap interval means anything
        return float("nan"), float("nan"), "unstable statistic (the BCa interval excluded the estimate): no interval"
    return low, high, SMALL_SAMPLE_NOTE if n < MIN_SAMPLES_FOR_INTERVAL else ""


def table_metrics(results: pd.DataFrame, confidence: float = 0.95, n_resamples: int = 1000,
                  seed: int = 0) -> pd.DataFrame:
    """The ``metrics.csv`` frame (``palrp_bench.rundir.METRIC_COLUMNS``) of a tidy results frame."""
    rows = []
    for s in metric_samples(results):
        low, high, note = confidence_interval(s, confidence, n_resamples, seed)
        note = "; ".join(n for n in (note, s.spec.note) if n)
        rows.append({**s.cell, "metric": s.metric, "variant": s.variant, "value": s.value(), "ci_low": low,
                     "ci_high": high, "n": s.n, "n_nonfinite": s.n_nonfinite, "interval": INTERVAL_METHOD,
                     "note": note})
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)
