"""Build the full report of one or more runs: the paper's tables (Markdown + LaTeX), the run's other cells, paired
tests, plots.

Input: run directories (their ``results.csv`` and ``metrics.csv``) or tidy CSV files (the table numbers are then
computed from them with :func:`palrp_bench.metrics.table.table_metrics`, unless a ``metrics.csv`` lies beside them).
Output in ``out_dir`` (default ``<first run>/report``): ``report.md``, ``report.tex``, ``comparison.csv``,
``paired.csv``, ``curves_*.png``, ``gallery_*.png`` and, for the needle in a haystack, ``needle_*.png`` (and ``report.html`` on request; :func:`write_run_html`
writes a run's own ``<run_dir>/report.html``). Each input run directory also gets its ``metrics.csv`` and
``metrics.json`` refreshed with the published numbers of this version (:mod:`palrp_bench.metrics.published`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import MissingDataError
from ..metrics.table import metric_samples, table_metrics
from ..metrics.metrics_json import write_metrics_files
from ..metrics.published import attach_published, load_published
from ..rundir import MANIFEST_JSON, METRICS_CSV, RESULTS_CSV, published_withheld, run_dir_lock
from .html import DEFAULT_MAX_MB, HTML_NAME, write_html
from .plots import NEEDLE_METRIC, needle_grid_metrics
from .stats import N_PERMUTATIONS
from .tables import (REPRODUCED_ONLY, comparison_frame, latex, markdown, paired_frame, paired_tables, paper_tables,
                     reproduced_only, tie_break_frame, tie_break_table)

_METHOD_NOTE = (
    "Table numbers: each metric's own function over the samples (metrics.csv); intervals: {conf}% BCa bootstrap "
    "(scipy.stats.bootstrap, all components of a sample resampled together, {n_boot} resamples). Paired comparisons: "
    "the difference of the table numbers on the common samples, its paired BCa bootstrap interval "
    "(scipy.stats.bootstrap, paired=True) and a two-sided paired permutation test (scipy.stats.permutation_test, "
    "permutation_type='samples', {n_perm} resamples), p-values Holm-adjusted within each table."
)


@dataclass
class ReportResult:
    out_dir: Path
    text: str
    comparison: pd.DataFrame
    paired: pd.DataFrame
    metrics: pd.DataFrame
    files: list[Path] = field(default_factory=list)


def _read_inputs(paths: list[Path], confidence: float, n_boot: int) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    """``(results, metrics, run_dirs)`` of the inputs."""
    frames, metric_frames, run_dirs = [], [], []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            csv = path / RESULTS_CSV
            if not csv.exists():
                if (path / "cells").is_dir():
                    raise MissingDataError(f"{path} has stored results but no {RESULTS_CSV} yet (an interrupted run)",
                                           f"merge it with: palrp-bench mode=report run_dir={path}")
                raise MissingDataError(f"{path} is not a palrp-bench run directory (no {RESULTS_CSV}, no cells/)",
                                       "pass a run_dir printed by palrp-bench, or a results.csv")
            run_dirs.append(path)
        elif path.is_file():
            csv = path
            if (path.parent / "cells").is_dir():
                run_dirs.append(path.parent)
        else:
            raise MissingDataError(f"{path} does not exist", "pass a run directory or a results.csv")
        results = pd.read_csv(csv, dtype={"variant": str, "sample_id": str})
        frames.append(results)
        beside = csv.parent / METRICS_CSV
        metric_frames.append(pd.read_csv(beside, dtype={"variant": str}) if beside.is_file()
                             else table_metrics(results, confidence, n_boot))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    metrics = pd.concat(metric_frames, ignore_index=True) if metric_frames else pd.DataFrame()
    return df, metrics, run_dirs


def _option(cfg, name: str, default):
    value = getattr(cfg, name, None) if cfg is not None else None
    if value is None:
        return default
    return getattr(value, "value", value)


def _sections(tables, empty: str) -> list[str]:
    lines = []
    for t in tables:
        lines += [f"### {t.name}", "", markdown(t), ""]
    return lines or [empty, ""]


def refresh_run_files(run_dir: Path, metrics: pd.DataFrame) -> list[Path]:
    """Rewrite ``metrics.csv`` and ``metrics.json`` of ``run_dir`` from its rows of ``metrics`` (published numbers
    attached); the manifest summary comes from its ``manifest.json``."""
    run_dir = Path(run_dir)
    rows = metrics[metrics["run"].astype(str) == run_dir.name]
    if rows.empty:
        return []
    with run_dir_lock(run_dir):  # never between a concurrent merge's writes
        manifest_path = run_dir / MANIFEST_JSON
        manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"run": run_dir.name}
        return list(write_metrics_files(run_dir, rows, manifest))


def write_run_html(run_dir: Path, report_cfg=None, max_mb: float | None = None) -> Path:
    """``<run_dir>/report.html`` (:mod:`palrp_bench.report.html`) from the run's files: written at the end of every
    run unless ``runner.html=false``. ``max_mb`` bounds the embedded explanations."""
    confidence = float(_option(report_cfg, "confidence", 0.95))
    n_boot = int(_option(report_cfg, "n_boot", 1000))
    df, metrics, run_dirs = _read_inputs([Path(run_dir)], confidence, n_boot)
    published = load_published(_option(report_cfg, "paper_dir", None))
    withheld = _withheld(run_dirs)
    metrics = attach_published(metrics, published, withheld)
    return _write_html(Path(run_dir) / HTML_NAME, df, metrics, published, run_dirs, confidence, n_boot, max_mb,
                       withheld=withheld,
                       needle_metrics=needle_grid_metrics(_option(report_cfg, "needle_metric", NEEDLE_METRIC)))


def _withheld(run_dirs: list[Path]) -> dict:
    """The models of ``run_dirs`` that are not the paper's checkpoint (:func:`palrp_bench.rundir.published_withheld`)."""
    return {key: reason for run_dir in run_dirs for key, reason in published_withheld(run_dir).items()}


def _write_html(path: Path, df, metrics, published, run_dirs, confidence: float, n_boot: int, max_mb,
                paired: pd.DataFrame | None = None, withheld: dict | None = None, needle_metrics=None) -> Path:
    samples = metric_samples(df)
    if paired is None:
        paired = paired_frame(samples, confidence, n_boot)
    note = _METHOD_NOTE.format(conf=int(round(confidence * 100)), n_boot=n_boot, n_perm=N_PERMUTATIONS)
    return write_html(path, df, metrics, run_dirs, confidence,
                      paper=paper_tables(metrics, published, confidence, withheld),
                      paired=paired_tables(paired, confidence), note=note, samples=samples,
                      max_mb=DEFAULT_MAX_MB if max_mb is None else float(max_mb), needle_metrics=needle_metrics)


def build_report(paths: list[Path], report_cfg=None, *, plots: bool = True, html: bool = False,
                 html_max_mb: float | None = None) -> ReportResult:
    """Tables, paired comparisons and plots of the runs / CSVs in ``paths`` under ``report_cfg``
    (:class:`~palrp_bench.schema.ReportConfig` or anything with the same attributes); with ``html`` also
    ``report.html`` in the output folder (:mod:`palrp_bench.report.html`)."""
    confidence = float(_option(report_cfg, "confidence", 0.95))
    n_boot = int(_option(report_cfg, "n_boot", 1000))
    gallery = list(_option(report_cfg, "gallery_ids", []) or [])
    grids = needle_grid_metrics(_option(report_cfg, "needle_metric", NEEDLE_METRIC))
    df, metrics, run_dirs = _read_inputs(paths, confidence, n_boot)
    out_dir = Path(_option(report_cfg, "out_dir", None) or (
        (run_dirs[0] if run_dirs else Path(paths[0]).parent) / "report"))
    out_dir.mkdir(parents=True, exist_ok=True)

    published = load_published(_option(report_cfg, "paper_dir", None))
    withheld = _withheld(run_dirs)
    metrics = attach_published(metrics, published, withheld)
    files: list[Path] = []
    for run_dir in run_dirs:
        files += refresh_run_files(run_dir, metrics)
    comparison = comparison_frame(metrics, published, withheld)
    paired = paired_frame(metric_samples(df), confidence, n_boot)
    paper = paper_tables(metrics, published, confidence, withheld)
    only = reproduced_only(metrics, published, confidence, withheld)
    pairs = paired_tables(paired, confidence)

    note = _METHOD_NOTE.format(conf=int(round(confidence * 100)), n_boot=n_boot, n_perm=N_PERMUTATIONS)
    md = ["# palrp-bench report", "", note, "", "## The paper's tables: published vs reproduced", ""]
    md += _sections(paper, "no number of the paper's tables in the input")
    md += [f"## {REPRODUCED_ONLY.capitalize()} (cells the paper has no number for)", ""]
    md += _sections(only, "none")
    md += ["## Paired comparisons (same samples)", ""]
    md += _sections(pairs, "no method pairs on common samples")
    by_tie_break = tie_break_table(tie_break_frame(metrics), confidence)
    if by_tie_break is not None:
        md += ["## Table 4 under each pixel-perturbation tie-break", "", markdown(by_tie_break), ""]
    tex = [f"% palrp-bench report. {note}", "% The paper's tables: published vs reproduced"]
    tex += [latex(t) for t in paper]
    tex += [f"% {REPRODUCED_ONLY}"] + [latex(t) for t in only]
    tex += ["% Paired comparisons (same samples)"] + [latex(t) for t in pairs]
    if by_tie_break is not None:
        tex += ["% Table 4 under each pixel-perturbation tie-break", latex(by_tie_break)]
    for name, content in (("report.md", "\n".join(md).rstrip() + "\n"), ("report.tex", "\n\n".join(tex) + "\n")):
        (out_dir / name).write_text(content)
        files.append(out_dir / name)
    comparison.to_csv(out_dir / "comparison.csv", index=False)
    paired.to_csv(out_dir / "paired.csv", index=False)
    files += [out_dir / "comparison.csv", out_dir / "paired.csv"]
    if html:
        files.append(_write_html(out_dir / HTML_NAME, df, metrics, published, run_dirs, confidence, n_boot,
                                 html_max_mb, paired, withheld, grids))
    if plots and not df.empty:
        from .plots import plot_curves, plot_gallery, plot_needle_grids

        files += plot_curves(df, metrics, out_dir, confidence)
        files += plot_needle_grids(df, out_dir, grids)
        for run_dir in run_dirs:
            for model_dir in sorted((run_dir / "cells").glob("*")):
                for task_dir in sorted(model_dir.glob("*")):
                    path = plot_gallery(run_dir, model_dir.name, task_dir.name, out_dir, gallery)
                    if path is not None:
                        files.append(path)
    return ReportResult(out_dir, "\n".join(md), comparison, paired, metrics, files)
