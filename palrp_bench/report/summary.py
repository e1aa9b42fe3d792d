"""The readable table printed at the end of a run: one block per (model, task), one row per method.

Each cell of the table is a table metric (:mod:`palrp_bench.report.derive`) as ``mean +- half-width`` of its
confidence interval (:mod:`palrp_bench.report.stats`), plus the number of samples and how many had non-finite
relevance. Arrows give the direction (↑ higher is better, ↓ lower is better).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .derive import derive, nonfinite_counts
from .tables import direction, markdown_table, reproduced_frame


def _cell_text(row) -> str:
    value, low, high = row["reproduced"], row["ci_low"], row["ci_high"]
    if not math.isfinite(value):
        return "-"
    if math.isfinite(low) and math.isfinite(high):
        return f"{value:.3f} ± {max(high - value, value - low):.3f}"
    return f"{value:.3f}"


def summary_frame(df: pd.DataFrame, interval: str = "bootstrap", confidence: float = 0.95,
                  n_boot: int = 200) -> pd.DataFrame:
    """Reproduced table metrics with intervals for every cell of a tidy frame."""
    return reproduced_frame(derive(df), interval, confidence, n_boot)


def summary_text_of_frame(df: pd.DataFrame, interval: str = "bootstrap", confidence: float = 0.95,
                          n_boot: int = 200) -> str:
    rep = summary_frame(df, interval, confidence, n_boot)
    counts = nonfinite_counts(df)
    if rep.empty and counts.empty:
        return "no results"
    blocks = []
    keys = ["run", "model", "task"]
    for (run, model, task), cdf in counts.groupby(keys, sort=True):
        rdf = rep[(rep["run"] == run) & (rep["model"] == model) & (rep["task"] == task)] if not rep.empty else rep
        columns = [] if rdf.empty else sorted({(m, v) for m, v in zip(rdf["metric"], rdf["variant"])})
        headers = ["method", "n", "non-finite"] + [
            f"{m}:{v}" + {True: " ↑", False: " ↓"}.get(direction(m, v), "") for m, v in columns]
        rows = []
        for _, c in cdf.iterrows():
            mdf = rdf[rdf["method"] == c["method"]] if not rdf.empty else rdf
            cells = [str(c["method"]), str(int(c["n_samples"])), str(int(c["n_nonfinite"]))]
            for m, v in columns:
                hit = mdf[(mdf["metric"] == m) & (mdf["variant"] == v)]
                cells.append(_cell_text(hit.iloc[0]) if len(hit) else "-")
            rows.append(cells)
        first = cdf.iloc[0]
        title = (f"{model} / {task}  (protocol={first['protocol']}, aggregation={first['aggregation']}, "
                 f"{int(confidence * 100)}% CI: {interval})")
        blocks.append(title + "\n" + markdown_table(headers, rows))
    return "\n\n".join(blocks)


def summary_text(results_csv: Path, report_cfg=None) -> str:
    """Summary of a run's ``results.csv`` under the ``report`` config (interval, confidence)."""
    df = pd.read_csv(results_csv)
    interval = getattr(getattr(report_cfg, "interval", None), "value", None) or "bootstrap"
    confidence = float(getattr(report_cfg, "confidence", 0.95) or 0.95)
    n_boot = int(getattr(report_cfg, "n_boot", 1000) or 1000)
    return summary_text_of_frame(df, interval, confidence, n_boot)
