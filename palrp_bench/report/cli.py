"""``palrp-bench-report``: tidy CSVs -> the paper's tables (Markdown, LaTeX), paired tests, plots; refreshes the
run's ``metrics.csv`` / ``metrics.json`` with the published numbers.

::

    palrp-bench-report                       # the newest run under ./runs
    palrp-bench-report runs/2025-01-01_12-00-00 other/results.csv --confidence 0.9 --out report/
    palrp-bench-report runs/2025-01-01_12-00-00 --html   # also report.html: tables, curves, sample explorer

Also reachable as ``palrp-bench mode=report run_dir=<run>``. Errors are one line and exit code 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

from ..errors import MissingDataError, PalrpError
from .build import build_report
from .plots import NEEDLE_METRIC


#: ``--help``'s description: the module docstring's first paragraph, whole, without reST markup
DESCRIPTION = " ".join(__doc__.split("\n\n")[0].replace("``", "").split())


def written_line(files: list[Path], out_dir: Path) -> str:
    """What the report command wrote, every file by name (no "..."): the tables, the curve plots, the heatmap
    galleries (those in ``out_dir`` relative to it), then the refreshed run files; one line per kind."""
    out_dir = Path(out_dir)
    inside = [Path(f).relative_to(out_dir).as_posix() for f in files if Path(f).parent == out_dir]
    kinds = [("curve plots", [n for n in inside if n.startswith("curves_") and n.endswith(".png")]),
             ("heatmap galleries", [n for n in inside if n.startswith("gallery_") and n.endswith(".png")])]
    plotted = {n for _, names in kinds for n in names}
    lines = [f"written to {out_dir}/: {', '.join(n for n in inside if n not in plotted)}"]
    lines += [f"  {len(names)} {kind}: {', '.join(names)}" for kind, names in kinds if names]
    elsewhere = [str(f) for f in files if Path(f).parent != out_dir]
    if elsewhere:
        lines.append(f"refreshed: {', '.join(elsewhere)}")
    return "\n".join(lines)


def latest_run(root: Path) -> Path:
    """The most recently modified run directory under ``root`` that has results."""
    candidates = [p.parent for p in Path(root).glob("*/results.csv")]
    if not candidates:
        raise MissingDataError(f"no finished run under {root}/",
                               "run `make demo` (or palrp-bench) first, or pass a run directory / results.csv")
    return max(candidates, key=lambda p: (p / "results.csv").stat().st_mtime)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="palrp-bench-report", description=DESCRIPTION)
    p.add_argument("paths", nargs="*", type=Path, help="run directories or results.csv files (default: newest run)")
    p.add_argument("--runs-root", type=Path, default=Path("runs"), help="where to look for the newest run")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: <first run>/report)")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (intervals of the paired differences; "
                   "metrics.csv of a run keeps the intervals it was merged with)")
    p.add_argument("--paper-dir", type=Path, default=None,
                   help="folder of published-number CSVs (default: the paper's tables shipped with palrp-bench)")
    p.add_argument("--gallery-ids", default="", help="comma-separated sample ids for the heatmap galleries")
    p.add_argument("--needle-metric", default=NEEDLE_METRIC,
                   help="<table metric>:<variant> of the needle grid drawn beside the positional share's "
                        "(results with length and depth columns; e.g. pg:key)")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument("--html", action="store_true", help="also write report.html: one self-contained page with the "
                   "tables, curves and a sample explorer (opens offline in any browser)")
    p.add_argument("--html-max-mb", type=float, default=None,
                   help="most MB of cached explanations report.html embeds (default 30; the rest is listed)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if not 0.0 < args.confidence < 1.0:
            from ..errors import BadInputError

            raise BadInputError(f"--confidence must be in (0, 1), got {args.confidence}", "use e.g. --confidence 0.95")
        paths = args.paths or [latest_run(args.runs_root)]
        cfg = SimpleNamespace(confidence=args.confidence, n_boot=args.n_boot,
                              gallery_ids=[s for s in args.gallery_ids.split(",") if s], out_dir=args.out,
                              paper_dir=args.paper_dir, needle_metric=args.needle_metric)
        result = build_report(paths, cfg, plots=not args.no_plots, html=args.html, html_max_mb=args.html_max_mb)
    except PalrpError as err:
        print(f"palrp-bench-report: error: {err}", file=sys.stderr)
        return 2
    print(result.text)
    print(f"\n{written_line(result.files, result.out_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
