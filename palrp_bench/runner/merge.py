"""Shard stores -> the run's tidy ``results.csv``, its table numbers ``metrics.csv`` / ``metrics.json`` and
``manifest.json``
(docs/design.md section 6, "Tidy CSV"; columns in :mod:`palrp_bench.rundir`).

``results.csv`` is long format: one row per (run, sample_id, method, metric, variant, step) with ``value``,
plus the columns that make it self-describing: model, quantization, dtype, task, paper_task, protocol, causal,
tie_break (empty for cells without pixel perturbation), tie_device (the device kind that ordered tied pixels, per
sample: the shards of one cell may run on different devices), stabilizers (what each sample's explanation used),
rules, aggregation, embeddings (the ``full`` / ``partial`` switch where it changes the cell's scores, else empty). Scalar metrics have an empty ``step``.
Runs whose samples carry descriptors (:data:`palrp_bench.rundir.SAMPLE_COLUMNS`: the needle's ``length`` and
``depth``) get a column for each after ``value``; the results of other runs keep their columns.
A sample whose relevance was non-finite has a single row ``metric=nonfinite_relevance, value=1``.

Merging is idempotent and safe to run from several processes (every job of a multirun sweep merges when it
finishes, under the run directory's exclusive lock, :func:`palrp_bench.rundir.run_dir_lock`; the last one sees every shard). Both files are
written to a temporary name and renamed.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import MissingDataError
from ..metrics.table import table_metrics
from ..rundir import (MANIFEST_JSON, METRICS_CSV, METRICS_CSV_COLUMNS, NONFINITE_METRIC, RESULTS_CSV,
                      SAMPLE_COLUMNS, published_withheld, run_dir_lock, result_columns)
from ..atomic_io import write_csv_atomic, write_json_atomic
from ..metrics.metrics_json import write_metrics_files
from ..metrics.published import attach_published, load_published
from .manifest import environment
from .store import decode_rows, iter_cell_records, record_metrics


@dataclass
class MergeOutcome:
    results_csv: Path
    metrics_csv: Path
    manifest: Path
    n_rows: int
    n_samples: int
    n_nonfinite: int
    n_cells: int


def cell_dirs(run_dir: Path) -> list[Path]:
    return sorted(p.parent for p in Path(run_dir).glob("cells/*/*/*/cell.json"))


def collect_rows(run_dir: Path) -> tuple[pd.DataFrame, list[dict]]:
    """Every stored row of the run as a tidy frame, and one summary per cell."""
    run_dir = Path(run_dir)
    run_id = run_dir.name
    frames = []
    cells = []
    described: set[str] = set()  # the sample descriptors some sample of the run has
    for cdir in cell_dirs(run_dir):
        cell = json.loads((cdir / "cell.json").read_text())
        records = [r for _, r in iter_cell_records(cdir)]
        records.sort(key=lambda r: (r["order"], r["sample_id"]))
        shards = [json.loads(p.read_text()) for p in sorted(cdir.glob("shard-*.status.json"))]
        n_nonfinite = 0
        rows = []
        seen: set[tuple] = set()  # a row of a sample is kept once, however many records repeat it
        for rec in records:
            info = rec.get("info", {})
            rules = info.get("rules", cell.get("rules")) or ""
            aggregation = info.get("aggregation", cell.get("aggregation")) or ""
            stabilizers = info.get("stabilizers") or ""  # what the explanation used (none for baselines, GPT-2, ...)
            tie_device = info.get("tie_device") or ""  # who ordered the tied pixels (pixel perturbation only)
            descriptors = tuple(info.get(c) for c in SAMPLE_COLUMNS)
            described.update(c for c, v in zip(SAMPLE_COLUMNS, descriptors) if v is not None)
            for metric, variant, step, value in decode_rows(rec):
                key = (rec["sample_id"], metric, variant, None if step != step else step)
                if key in seen:
                    continue
                seen.add(key)
                rows.append((rec["sample_id"], rules, aggregation, stabilizers, tie_device, metric, variant, step,
                             value, *descriptors))
                n_nonfinite += int(metric == NONFINITE_METRIC)
        frame = pd.DataFrame(rows, columns=["sample_id", "rules", "aggregation", "stabilizers", "tie_device", "metric",
                                            "variant", "step", "value", *SAMPLE_COLUMNS])
        for col in ("model", "quantization", "dtype", "task", "paper_task", "protocol", "method"):
            frame[col] = cell[col]
        frame["causal"] = bool(cell.get("causal", cell["settings"]["task"].get("causal", True)))
        frame["tie_break"] = cell.get("tie_break") or ""
        frame["embeddings"] = cell.get("embeddings") or ""  # cells recorded before the switch existed: empty
        frame["run"] = run_id
        frames.append(frame[result_columns(SAMPLE_COLUMNS)])
        cells.append({"key": cell["key"], "fingerprint": cell["fingerprint"],
                      "metrics": sorted({m for r in records for m in record_metrics(r)}),
                      "settings": cell["settings"], "n_samples": len({r["sample_id"] for r in records}),
                      "n_nonfinite": n_nonfinite, "shards": shards})
    columns = result_columns(described)
    if frames:
        df = pd.concat(frames, ignore_index=True)[columns]
    else:
        df = pd.DataFrame(columns=columns)
    return df, cells


def merge_run(run_dir: Path, confidence: float = 0.95, n_boot: int = 1000) -> MergeOutcome:
    """(Re)build ``results.csv``, ``metrics.csv`` and ``manifest.json`` of ``run_dir`` from its shard stores.

    ``metrics.csv`` is computed from ``results.csv`` as written (:func:`palrp_bench.metrics.table.table_metrics`,
    intervals at ``confidence`` with ``n_boot`` bootstrap resamples), so a report recomputing it from the CSV gets
    the same numbers; the published numbers and the differences to them are attached
    (:func:`palrp_bench.metrics.published.attach_published`; not to a model that is not the paper's checkpoint,
    :func:`palrp_bench.rundir.published_withheld`) and ``metrics.json`` holds the same rows."""
    run_dir = Path(run_dir)
    if not (run_dir / "cells").is_dir():
        raise MissingDataError(f"{run_dir} holds no results (no cells/ directory)",
                               "pass the run_dir of a palrp-bench run")
    with run_dir_lock(run_dir):
        df, cells = collect_rows(run_dir)
        csv_path = run_dir / RESULTS_CSV
        write_csv_atomic(df, csv_path)
        written = pd.read_csv(csv_path, dtype={"variant": str, "sample_id": str})
        metrics = attach_published(table_metrics(written, confidence, n_boot), load_published(),
                                   published_withheld(run_dir))
        invocations = [json.loads(p.read_text()) for p in sorted((run_dir / "invocations").glob("*.json"))]
        manifest = {
            "run": run_dir.name,
            "run_dir": str(run_dir.resolve()),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "results_csv": csv_path.name,
            "metrics_csv": METRICS_CSV,
            "columns": list(df.columns),
            "metric_columns": METRICS_CSV_COLUMNS,
            "n_rows": int(len(df)),
            "environment": environment(),
            "seeds": sorted({c["settings"]["seed"] for c in cells}),
            "devices": sorted({s.get("device") for c in cells for s in c["shards"] if s.get("device")}),
            # how the jobs computed float32 (device kind, tf32 switch, the flags in effect), each distinct one once
            "numerics": [json.loads(n) for n in sorted({json.dumps(s["numerics"], sort_keys=True)
                                                        for c in cells for s in c["shards"] if s.get("numerics")})],
            "cells": cells,
            "invocations": invocations,
        }
        manifest_path = run_dir / MANIFEST_JSON
        write_json_atomic(manifest_path, manifest)
        metrics_path, _ = write_metrics_files(run_dir, metrics, manifest)
    return MergeOutcome(csv_path, metrics_path, manifest_path, int(len(df)), int(sum(c["n_samples"] for c in cells)),
                        int(sum(c["n_nonfinite"] for c in cells)), len(cells))
