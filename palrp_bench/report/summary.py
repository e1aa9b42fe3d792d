"""The readable table printed at the end of a run: one block per (model, task), one row per method.

Each cell of the table is a row of the run's ``metrics.csv`` (:func:`palrp_bench.metrics.table.table_metrics`) as
``value +- half-width`` of its confidence interval, plus the number of samples and how many had non-finite
values. Arrows give the direction (↑ higher is better, ↓ lower is better).
"""
from __future__ import annotations

import math

import pandas as pd

from .tables import direction, markdown_table


def _cell_text(row) -> str:
    value, low, high = row["value"], row["ci_low"], row["ci_high"]
    if not math.isfinite(value):
        return "-"
    if math.isfinite(low) and math.isfinite(high):
        return f"{value:.3f} ± {max(high - value, value - low):.3f}"
    return f"{value:.3f}"


def summary_text(metrics: pd.DataFrame, confidence: float = 0.95) -> str:
    """The summary of a ``metrics.csv`` frame."""
    if metrics.empty:
        return "no results"
    blocks = []
    for (run, model, task), rdf in metrics.groupby(["run", "model", "task"], sort=True):
        columns = sorted({(m, v) for m, v in zip(rdf["metric"], rdf["variant"])})
        headers = ["method", "n", "non-finite"] + [
            f"{m}:{v}" + {True: " ↑", False: " ↓"}.get(direction(m, v), "") for m, v in columns]
        rows = []
        for method, mdf in rdf.groupby("method", sort=True):
            cells = [str(method), str(int(mdf["n"].max())), str(int(mdf["n_nonfinite"].max()))]
            for m, v in columns:
                hit = mdf[(mdf["metric"] == m) & (mdf["variant"] == v)]
                cells.append(_cell_text(hit.iloc[0]) if len(hit) else "-")
            rows.append(cells)
        first = rdf.iloc[0]
        tie_break = first.get("tie_break", "")
        tie_text = f"tie_break={tie_break}, " if isinstance(tie_break, str) and tie_break else ""
        title = (f"{model} / {task}  (protocol={first['protocol']}, causal={first['causal']}, {tie_text}"
                 f"aggregation={first['aggregation']}, "
                 f"{int(round(confidence * 100))}% CI: BCa bootstrap)")
        blocks.append(title + "\n" + markdown_table(headers, rows))
    return "\n\n".join(blocks)
