"""Build the full report of one or more runs: tables (Markdown + LaTeX + CSV), paired tests, plots.

Input: run directories (their ``results.csv`` and ``metrics.csv``) or tidy CSV files (the table numbers are then computed from them with
:func:`palrp_bench.metrics.table.table_metrics`, unless a ``metrics.csv`` lies beside them). Output in ``out_dir``
(default ``<first run>/report``): ``report.md``, ``report.tex``, ``comparison.csv``, ``paired.csv``,
``curves_*.png`` and ``gallery_*.png``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import MissingDataError
from ..metrics.table import metric_samples, table_metrics
from ..rundir import METRICS_CSV, RESULTS_CSV
from .published import load_published
from .tables import (comparison_frame, comparison_latex, comparison_markdown, paired_frame, paired_latex,
                     paired_markdown, reproduced_frame, tie_break_frame, tie_break_markdown)

_METHOD_NOTE = (
    "Intervals: {conf}% BCa bootstrap over samples of the table metric's own function (scipy.stats.bootstrap; "
    "metrics.csv). Paired comparisons: paired bootstrap of the difference on common samples ({n_boot} resamples, "
    "seed 0) and a two-sided Wilcoxon signed-rank test on per-sample values (palrp_bench/report/stats.py)."
)


@dataclass
class ReportResult:
    out_dir: Path
    text: str
    comparison: pd.DataFrame
    paired: pd.DataFrame
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


def build_report(paths: list[Path], report_cfg=None, *, plots: bool = True) -> ReportResult:
    """Tables, paired comparisons and plots of the runs / CSVs in ``paths`` under ``report_cfg``
    (:class:`~palrp_bench.schema.ReportConfig` or anything with the same attributes)."""
    confidence = float(_option(report_cfg, "confidence", 0.95))
    n_boot = int(_option(report_cfg, "n_boot", 1000))
    gallery = list(_option(report_cfg, "gallery_ids", []) or [])
    df, metrics, run_dirs = _read_inputs(paths, confidence, n_boot)
    out_dir = Path(_option(report_cfg, "out_dir", None) or (
        (run_dirs[0] if run_dirs else Path(paths[0]).parent) / "report"))
    out_dir.mkdir(parents=True, exist_ok=True)

    reproduced = reproduced_frame(metrics)
    published = load_published(_option(report_cfg, "paper_dir", None))
    comparison = comparison_frame(reproduced, published)
    paired = paired_frame(metric_samples(df), confidence, n_boot)

    note = _METHOD_NOTE.format(conf=int(round(confidence * 100)), n_boot=n_boot)
    md = ["# palrp-bench report", "", note, "", "## Published vs reproduced", "",
          comparison_markdown(comparison, confidence) if not comparison.empty else "no table metrics in the input",
          "", "## Paired comparisons (same samples)", "", paired_markdown(paired)]
    by_tie_break = tie_break_frame(metrics)
    if not by_tie_break.empty:
        md += ["", "## Table 4 under each pixel-perturbation tie-break", "",
               tie_break_markdown(by_tie_break, confidence)]
    tex = [f"% palrp-bench report. {note}", comparison_latex(comparison, confidence), paired_latex(paired)]
    files = []
    for name, content in (("report.md", "\n".join(md) + "\n"), ("report.tex", "\n\n".join(tex) + "\n")):
        (out_dir / name).write_text(content)
        files.append(out_dir / name)
    comparison.to_csv(out_dir / "comparison.csv", index=False)
    paired.to_csv(out_dir / "paired.csv", index=False)
    files += [out_dir / "comparison.csv", out_dir / "paired.csv"]
    if plots and not df.empty:
        from .plots import plot_curves, plot_gallery

        files += plot_curves(df, out_dir)
        for run_dir in run_dirs:
            for model_dir in sorted((run_dir / "cells").glob("*")):
                for task_dir in sorted(model_dir.glob("*")):
                    path = plot_gallery(run_dir, model_dir.name, task_dir.name, out_dir, gallery)
                    if path is not None:
                        files.append(path)
    return ReportResult(out_dir, "\n".join(md), comparison, paired, files)
