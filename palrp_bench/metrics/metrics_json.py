"""``metrics.json``: a run's table numbers per cell plus the run's summary, in the shape of lm-evaluation-harness's
results JSON (``results`` keyed by task with ``"<metric>,<filter>"`` entries, ``higher_is_better``, ``n-samples``,
``config``, ``versions``, ``git_hash``, ``date``).

Written next to ``metrics.csv`` when a run is merged (:func:`palrp_bench.runner.merge.merge_run`) and rewritten by
``palrp-bench-report`` (so the published numbers follow the tables shipped with the installed version). The rows
are exactly those of ``metrics.csv``; nothing is recomputed here. Layout (docs/evaluation.md "metrics.json")::

    {"results": {"<model>/<task>/<method>": {
         "cell": {"model": ..., "task": ..., "protocol": ..., "causal": true, ...},
         "auac,generation": {"value": 0.79, "ci_low": 0.77, "ci_high": 0.81, "interval": "bca_bootstrap",
                             "note": null, "n": 1000, "n_nonfinite": 0,
                             "paper_table": "table1,table2", "published": 0.796, "difference": -0.006}, ...}},
     "higher_is_better": {"auac,generation": true, ...},
     "n-samples": {"<model>/<task>/<method>": {"effective": 1000, "nonfinite": 0}},
     "config": {...}, "confidence_level": 0.95, "git_hash": "...", "git": {...}, "versions": {...},
     "hardware": {...}, "seeds": [0], "devices": ["cpu"], "date": "...", "run": "...", "schema_version": 1}

Missing numbers are ``null`` (never ``NaN``, which is not JSON).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic_io import write_csv_atomic, write_json_atomic
from ..rundir import CELL_COLUMNS, CELL_JOINED_COLUMNS, METRICS_CSV, METRICS_CSV_COLUMNS, METRICS_JSON, PAPER_COLUMNS
from .published import direction

SCHEMA_VERSION = 1
#: the fields of one ``"<metric>,<variant>"`` entry, in ``metrics.csv`` column names
ENTRY_FIELDS = ["value", "ci_low", "ci_high", "interval", "note", "n", "n_nonfinite", *PAPER_COLUMNS]
_INTEGER_FIELDS = {"n", "n_nonfinite"}


def _plain(value, integer: bool = False):
    """A CSV cell as a JSON value: NaN / empty -> None, numpy scalars -> Python, integers where they are counts."""
    if value is None:
        return None
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and value == "":
        return None
    if integer and isinstance(value, float):
        return int(value)
    return value


def cell_key(row) -> str:
    return f"{row['model']}/{row['task']}/{row['method']}"


def metrics_document(metrics: pd.DataFrame, manifest: dict | None = None) -> dict:
    """The ``metrics.json`` document of one run's ``metrics.csv`` rows (with the published columns) and its
    ``manifest.json``."""
    manifest = manifest or {}
    results: dict[str, dict] = {}
    higher: dict[str, bool | None] = {}
    samples: dict[str, dict] = {}
    for _, row in metrics.iterrows():
        key = cell_key(row)
        cell = results.setdefault(key, {"cell": {c: _plain(row.get(c)) for c in CELL_COLUMNS + CELL_JOINED_COLUMNS}})
        if cell["cell"]["causal"] is not None:
            cell["cell"]["causal"] = str(cell["cell"]["causal"]).lower() == "true"
        name = f"{row['metric']},{row['variant']}"
        cell[name] = {f: _plain(row.get(f), f in _INTEGER_FIELDS) for f in ENTRY_FIELDS}
        higher[name] = direction(str(row["metric"]), str(row["variant"]))
        n = samples.setdefault(key, {"effective": 0, "nonfinite": 0})
        n["effective"] = max(n["effective"], int(row["n"]))
        n["nonfinite"] = max(n["nonfinite"], int(row["n_nonfinite"]))
    environment = manifest.get("environment", {})
    invocations = manifest.get("invocations") or []
    config = invocations[-1].get("config") if invocations else None
    confidence = ((config or {}).get("report") or {}).get("confidence")
    return {
        "schema_version": SCHEMA_VERSION,
        "run": manifest.get("run"),
        "date": manifest.get("updated"),
        "results": results,
        "higher_is_better": higher,
        "n-samples": samples,
        "config": config,
        "confidence_level": confidence,
        "git_hash": (environment.get("git") or {}).get("commit"),
        "git": environment.get("git"),
        "versions": environment.get("versions"),
        "hardware": environment.get("hardware"),
        "seeds": manifest.get("seeds"),
        "devices": manifest.get("devices"),
    }


def write_metrics_json(run_dir: Path, metrics: pd.DataFrame, manifest: dict | None = None) -> Path:
    """Write ``<run_dir>/metrics.json`` (atomically); returns its path."""
    path = Path(run_dir) / METRICS_JSON
    write_json_atomic(path, metrics_document(metrics, manifest))
    return path


def write_metrics_files(run_dir: Path, metrics: pd.DataFrame, manifest: dict) -> tuple[Path, Path]:
    """Write ``metrics.csv`` and, from the CSV as written (the same rows, the same digits), ``metrics.json``.
    Callers hold :func:`palrp_bench.rundir.run_dir_lock`."""
    csv_path = Path(run_dir) / METRICS_CSV
    write_csv_atomic(metrics[METRICS_CSV_COLUMNS], csv_path)
    return csv_path, write_metrics_json(run_dir, pd.read_csv(csv_path, dtype={"variant": str}), manifest)
