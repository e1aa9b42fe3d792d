"""What a run directory holds: file names, the columns of its tables and the vocabulary of its rows.

docs/design.md section 6, "Tidy CSV" as one typed schema (in the spirit of lm-evaluation-harness's results schema):
the runner
writes these files, the report reads them, and neither needs the other's code.

```
<run_dir>/
  results.csv      tidy per-sample rows (RESULT_COLUMNS)
  metrics.csv      the final table numbers with intervals and the published ones (METRICS_CSV_COLUMNS)
  metrics.json     the same rows per cell plus the run's summary (lm-evaluation-harness style results JSON)
  manifest.json    resolved config, versions, git commit, hardware, cells
  report.html      tables, curves and a sample explorer in one offline page (palrp_bench/report/html.py)
  cells/<model>/<task>/<method>/   cell.json (incl. whether the model is the paper's checkpoint), shard stores,
                                   explanations/<sample>.npz
  logs/, invocations/, selection/, .hydra/<stamp>/ (each invocation's resolved config), multirun.yaml (a sweep)
```

Nothing is written to a run directory before the run starts (palrp_bench/cli.py, palrp_bench/app.py).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .errors import BadInputError

RESULTS_CSV = "results.csv"
METRICS_CSV = "metrics.csv"
METRICS_JSON = "metrics.json"
MANIFEST_JSON = "manifest.json"
#: the exclusive lock every writer of a run directory's merged files takes (:func:`run_dir_lock`)
MERGE_LOCK = ".merge.lock"

#: columns identifying one reproduced cell (one method of one model on one task under one protocol); ``tie_break``
#: is the pixel-perturbation tie-break (``topk`` / ``random``), empty for cells without pixel perturbation;
#: ``stabilizers`` the epsilon-rule stabilisers the explanations used (``official`` / ``none``; ``none`` for the
#: methods without them and, by default, the families the official code never ran; empty for cells that explain
#: nothing); ``cell.json`` records the request instead (``Cell.stabilizer_choice`` in runner/plan.py);
#: ``embeddings`` the ``full`` / ``partial`` switch where it changes the scores (text models with learned absolute
#: positions, methods scoring the semantic part alone; palrp_bench/methods/token_aggregation.py), empty elsewhere
CELL_COLUMNS = ["run", "model", "quantization", "dtype", "task", "paper_task", "protocol", "causal", "tie_break",
                "stabilizers", "aggregation", "embeddings", "method"]

#: columns a cell's rows may hold several values of, joined with "," in ``metrics.csv`` rather than grouped by:
#: ``tie_device`` the device kind that ordered tied pixels under ``tie_break=topk`` (``cpu``, ``cuda/<GPU name>``;
#: ``any`` under ``random``; empty for rows without pixel perturbation; :mod:`palrp_bench.numerics`), ``rules`` the
#: composite the explanations used
CELL_JOINED_COLUMNS = ["tie_device", "rules"]

#: ``results.csv``: one row per (run, sample_id, method, metric, variant, step) with its value
RESULT_COLUMNS = ["run", "model", "quantization", "dtype", "task", "paper_task", "protocol", "causal", "tie_break",
                  "tie_device", "stabilizers", "rules", "aggregation", "embeddings", "method", "sample_id", "metric",
                  "variant", "step", "value"]

#: per-sample descriptors some tasks vary by design, taken from each sample's info: the needle's ``length`` (input
#: tokens) and ``depth`` (the needle's place in the haystack, 0..1; data/needle.py). ``results.csv`` has a column for
#: each after ``value`` only when a sample of the run has it, so the results of every other task keep
#: :data:`RESULT_COLUMNS` exactly (:func:`result_columns`)
SAMPLE_COLUMNS = ["length", "depth"]

#: ``metrics.csv``: one row per (cell, table metric, variant): the table number, its confidence interval, the
#: number of samples it was computed from and how many samples had non-finite values (docs/evaluation.md)
METRIC_COLUMNS = CELL_COLUMNS + CELL_JOINED_COLUMNS + ["metric", "variant", "value", "ci_low", "ci_high", "n",
                                                       "n_nonfinite", "interval", "note"]
#: ``metrics.csv`` also holds, where the paper has the number, the tables it appears in, the published value and
#: ``value - published`` (:func:`palrp_bench.metrics.published.attach_published`)
PAPER_COLUMNS = ["paper_table", "published", "difference"]
METRICS_CSV_COLUMNS = METRIC_COLUMNS + PAPER_COLUMNS

def result_columns(present) -> list[str]:
    """The columns of a ``results.csv`` whose rows carry the descriptors ``present``: :data:`RESULT_COLUMNS`, then
    those of :data:`SAMPLE_COLUMNS` in ``present``."""
    present = set(present)
    return RESULT_COLUMNS + [c for c in SAMPLE_COLUMNS if c in present]


#: the single row a sample with non-finite relevance gets instead of metric rows
NONFINITE_METRIC = "nonfinite_relevance"
#: per-sample 0/1 row: was the model's prediction correct (tasks with a label)
CORRECT_METRIC = "correct"
#: per-sample row, and the metric config (``configs/metric/``) that computes it: how far the sample's map lies from
#: the float64 map of the same model (``runner.map_sensitivity``; docs/evaluation.md "Maps that rounding decides")
MAP_SENSITIVITY_METRIC = "map_sensitivity"
#: step of scalar rows (stored as an empty CSV cell, read back as NaN)
SCALAR = None
#: variant of rows that have none
NO_VARIANT = "all"


#: the fix of every run-directory problem (:func:`check_run_dir`)
RUN_DIR_FIX = ("give run_dir a directory this user can write (a new one, or an earlier run's to resume), "
               "e.g. run_dir=runs/<name>")


def check_run_dir(run_dir: Path) -> None:
    """A one-line :class:`~palrp_bench.errors.BadInputError` unless ``run_dir`` is a writable directory or can be
    created as one (checked before anything is written, so a bad ``run_dir`` never ends in a traceback)."""
    path = Path(run_dir)
    if path.exists():
        if not path.is_dir():
            raise BadInputError(f"run_dir {path} is a file, not a directory", RUN_DIR_FIX)
        if not os.access(path, os.W_OK | os.X_OK):
            raise BadInputError(f"run_dir {path} is not writable", RUN_DIR_FIX)
        return
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise BadInputError(f"run_dir {path} cannot be created: {ancestor} is a file", RUN_DIR_FIX)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise BadInputError(f"run_dir {path} cannot be created: {ancestor} is not writable", RUN_DIR_FIX)


def make_run_dir(run_dir: Path) -> None:
    """Create ``run_dir`` (and its parents) or raise a one-line :class:`~palrp_bench.errors.BadInputError` (what
    :func:`check_run_dir` cannot foresee: a read-only file system, a full disk, a race)."""
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BadInputError(f"cannot create run_dir {run_dir}: {err.strerror or type(err).__name__}",
                            RUN_DIR_FIX) from None


def cell_directory(run_dir: Path, model: str, task: str, method: str) -> Path:
    """``<run_dir>/cells/<model>/<task>/<method>``."""
    return Path(run_dir) / "cells" / model / task / method


def published_withheld(run_dir: Path) -> dict[tuple[str, str], str]:
    """``{(run, model): reason}`` for the models of a run that are not the paper's checkpoint of the shipped config
    they are named after (``paper_checkpoint`` in each ``cell.json``: recorded when the run started,
    palrp_bench/runner/model_identity.py): their table numbers are not compared with the published ones."""
    import json

    run_dir = Path(run_dir)
    withheld = {}
    for path in sorted(run_dir.glob("cells/*/*/*/cell.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        entry = record.get("paper_checkpoint")
        if isinstance(entry, dict) and entry.get("matches") is not True:
            withheld[(run_dir.name, str(record.get("model")))] = str(entry.get("reason") or "not the paper's model")
    return withheld


def explanation_file(cell_dir: Path, sample_id: str) -> Path:
    """The cached explanation of ``sample_id`` in a cell: a readable, file-system-safe and collision-free name."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", sample_id)[:80]
    digest = hashlib.blake2b(sample_id.encode("utf-8"), digest_size=6).hexdigest()
    return Path(cell_dir) / "explanations" / f"{readable}-{digest}.npz"


def read_explanation(path: Path) -> dict | None:
    """The arrays of a cached explanation file (``sample_id`` left out), or None when there is none."""
    import numpy as np

    path = Path(path)
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files if k != "sample_id"}


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's exclusive lock (:data:`MERGE_LOCK`): merges of concurrent workers and report
    refreshes of results.csv, metrics.csv, metrics.json and the manifest never interleave."""
    with open(Path(run_dir) / MERGE_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
