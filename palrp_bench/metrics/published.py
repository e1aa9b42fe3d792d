"""The paper's published numbers (docs/protocol.md section 6) and how a run's table numbers meet them.

The numbers ship inside the package as ``palrp_bench/paper/*.csv`` (package data; ``results/paper`` in the
repository links there), one number per row: ``table, model, task, method, variant, metric, value,
higher_is_better``. They are read with :mod:`importlib.resources`, so every install (wheel, editable, zipped)
finds them.

:func:`attach_published` adds to a ``metrics.csv`` frame the paper's number for the same (model, task, method,
variant, metric) and the difference to it (:data:`palrp_bench.rundir.PAPER_COLUMNS`). A reproduced task is compared
with its ``paper_task`` (``mcqa_noncausal`` with ``mcqa``).

A model that is named after a shipped config but is not the paper's checkpoint of it (another ``model.source``:
palrp_bench/runner/model_identity.py) gets no published number; the note says why.

Published rows meet a run's rows by name otherwise: no model, task or method of a published table has to be a
registered config or method (a table may name what the harness does not ship), and a
metric only needs the registry for its direction when the CSV leaves ``higher_is_better`` empty.
"""
from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import BadInputError, MissingDataError
from ..rundir import PAPER_COLUMNS

PUBLISHED_COLUMNS = ["table", "model", "task", "method", "variant", "metric", "value", "higher_is_better"]
#: what identifies one published number (a number may appear in several tables: Table 1 and Table 2 share a row)
PUBLISHED_KEY = ["model", "task", "method", "variant", "metric"]


def paper_files():
    """The shipped ``paper/*.csv`` files as :class:`importlib.resources.abc.Traversable` objects, sorted by name."""
    folder = resources.files("palrp_bench") / "paper"
    return sorted((f for f in folder.iterdir() if f.name.endswith(".csv")), key=lambda f: f.name)


def load_published(paper_dir: str | Path | None = None) -> pd.DataFrame:
    """All published numbers in one frame: the shipped tables, or the CSV files of ``paper_dir`` when given."""
    if paper_dir is not None:
        folder = Path(paper_dir)
        if not folder.is_dir():
            raise MissingDataError(f"published-results folder {folder} does not exist",
                                   "pass a folder of published-number CSVs (--paper-dir), or leave it out to use "
                                   "the tables shipped with palrp-bench")
        files = sorted(folder.glob("*.csv"))
    else:
        files = paper_files()
    frames = []
    for path in files:
        with path.open("r", encoding="utf-8") as fh:
            df = pd.read_csv(fh, dtype={"higher_is_better": "string", "variant": str})
        missing = [c for c in PUBLISHED_COLUMNS if c not in df.columns]
        if missing:
            raise BadInputError(f"{path} lacks columns {', '.join(missing)}",
                                f"published CSVs need the columns {', '.join(PUBLISHED_COLUMNS)}")
        frames.append(df[PUBLISHED_COLUMNS])
    if not frames:
        return pd.DataFrame(columns=PUBLISHED_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    hib = out["higher_is_better"].str.lower()
    out["higher_is_better"] = hib.map({"true": True, "false": False}).astype(object)
    out["higher_is_better"] = out["higher_is_better"].where(out["higher_is_better"].notna(), None)
    out["variant"] = out["variant"].astype(str)
    return out


def published_numbers(published: pd.DataFrame) -> pd.DataFrame:
    """One row per published number (:data:`PUBLISHED_KEY`) with ``paper_table`` (the tables it appears in, comma
    separated) and ``published``; a number printed differently in two tables is a transcription error."""
    if published.empty:
        return pd.DataFrame(columns=PUBLISHED_KEY + ["paper_table", "published"])
    grouped = published.groupby(PUBLISHED_KEY, sort=False)
    conflicting = grouped["value"].nunique()
    if (conflicting > 1).any():
        key = conflicting[conflicting > 1].index[0]
        raise BadInputError(f"the published number of {'/'.join(map(str, key))} differs between tables",
                            "fix the transcription in the published CSVs")
    return grouped.agg(paper_table=("table", lambda t: ",".join(dict.fromkeys(t))),
                       published=("value", "first")).reset_index()


def attach_published(metrics: pd.DataFrame, published: pd.DataFrame,
                     withheld: Mapping[tuple[str, str], str] | None = None) -> pd.DataFrame:
    """``metrics`` (a ``metrics.csv`` frame) with :data:`~palrp_bench.rundir.PAPER_COLUMNS`: the tables the number
    appears in, the published value and ``value - published`` (empty / NaN where the paper has no such number).

    ``withheld``: ``{(run, model): reason}`` of models that are not the paper's checkpoint of the config they are
    named after (:func:`palrp_bench.rundir.published_withheld`): their rows get no published number, and the note
    says why ("no published number: <reason>")."""
    out = metrics.drop(columns=[c for c in PAPER_COLUMNS if c in metrics.columns])
    if out.empty:
        return out.assign(**{c: pd.Series(dtype=object if c == "paper_table" else float) for c in PAPER_COLUMNS})
    paper_task = out["paper_task"].astype(str) if "paper_task" in out.columns else out["task"].astype(str)
    paper_task = paper_task.where(~paper_task.isin(["", "nan", "None"]), out["task"].astype(str))
    keys = pd.DataFrame({"model": out["model"].astype(str), "task": paper_task, "method": out["method"].astype(str),
                         "variant": out["variant"].astype(str), "metric": out["metric"].astype(str)})
    joined = keys.merge(published_numbers(published), on=PUBLISHED_KEY, how="left")
    out["paper_table"] = joined["paper_table"].fillna("").to_numpy()
    out["published"] = joined["published"].astype(float).to_numpy()
    if withheld:
        reasons = [withheld.get((str(r), str(m))) for r, m in zip(out["run"], out["model"])]
        hit = np.array([reason is not None for reason in reasons]) & np.isfinite(out["published"].to_numpy())
        if hit.any():
            notes = out["note"].astype(object).where(out["note"].notna(), "").astype(str).to_numpy(copy=True)
            for i in np.flatnonzero(hit):
                text = f"no published number: {reasons[i]}"
                if text not in notes[i]:  # idempotent: a report re-attaches to metrics.csv rows
                    notes[i] = f"{notes[i]}; {text}" if notes[i] else text
            out["note"] = notes
            out.loc[hit, "paper_table"] = ""
            out.loc[hit, "published"] = np.nan
    out["difference"] = out["value"].astype(float).to_numpy() - out["published"].to_numpy()
    out.loc[~np.isfinite(out["difference"]), "difference"] = np.nan
    return out


def direction(metric: str, variant: str, published_hib=None) -> bool | None:
    """higher-is-better of a metric/variant: the published CSV's, else the metric registry's, else None."""
    if isinstance(published_hib, (bool, np.bool_)):
        return bool(published_hib)
    from .registry import metric_specs

    spec = metric_specs().get(metric)
    if spec is None:
        return None
    hib = spec.higher_is_better
    return hib.get(variant) if hasattr(hib, "get") else hib
