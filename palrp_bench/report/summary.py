"""The readable table printed at the end of a run: one block per (model, task), one row per method.

Each cell is a row of the run's ``metrics.csv`` (:func:`palrp_bench.metrics.table.table_metrics`) printed as
``value [low, high]``: the BCa interval is lopsided in general, so both ends are shown. ``(paper P)`` follows where
the paper publishes the same number; a marker ``(1)`` points to a footnote where the interval has zero width (all
samples equal) or is missing. Arrows give the direction (↑ higher is better, ↓ lower is better).
"""
from __future__ import annotations

import pandas as pd

from .tables import cell_tables, markdown


def summary_text(metrics: pd.DataFrame, confidence: float = 0.95) -> str:
    """The summary of a ``metrics.csv`` frame."""
    tables = cell_tables(metrics, confidence, with_published=True)
    return "\n\n".join(markdown(t) for t in tables) if tables else "no results"
