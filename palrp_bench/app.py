"""One invocation of ``palrp-bench`` from a composed config: plan, check, run, merge, summarise.

docs/architecture.md "Data flow of one run": config (Hydra) -> job list (model x task x method x shard) -> per shard:
... -> merge -> tidy CSV + manifest -> report. Hydra (``palrp_bench.cli``) composes and validates the config;
everything after that is here, so tests can drive it without a command line.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from .atomic_io import write_json_atomic
from .errors import BadInputError, Interrupted, MissingDataError, PalrpError
from .hub import go_offline
from .planning.preflight import MissingRequirementsError, Problem, check_requirements, run_preflight
from .rundir import RESULTS_CSV, check_run_dir, make_run_dir
from .runner.devices import DevicePlan, resolve_devices
from .runner.execute import JobReport, check_cell_record
from .runner.merge import MergeOutcome, merge_run
from .runner.plan import Cell, Job, plan_cells, plan_jobs
from .runner.workers import run_jobs
from .schema import Mode
from .stages import describe_timings

log = logging.getLogger("palrp_bench.runner")


@dataclass
class RunOutcome:
    run_dir: Path
    cells: list[Cell]
    jobs: list[Job]
    reports: list[JobReport]
    merge: MergeOutcome | None
    summary: str


def describe_plan(cfg: DictConfig, cells: list[Cell], jobs: list[Job], devices: DevicePlan,
                  problems: list[Problem], constants=None, priced_on=None) -> tuple[str, list[Problem]]:
    """The printed plan and its problems: per cell the samples, stored samples, estimated time and peak memory on
    ``devices`` (or on ``priced_on``, the resolved ``runner.plan_device``); totals; every problem of the preflight
    and every cell that cannot fit its device even at batch 1 (:mod:`palrp_bench.planning.budget`)."""
    from .planning.budget import format_plan, memory_problems, plan_budget
    from .planning.cost import load_constants

    budget = plan_budget(cells, jobs, Path(cfg.run_dir), devices.devices, cfg.runner, constants or load_constants(),
                         priced_on)
    text = format_plan(budget, cfg.experiment if len(cells) > 1 else None, problems, len(jobs))
    return text, [*problems, *memory_problems(budget)]


def _planned_totals(cfg: DictConfig, cells: list[Cell], jobs: list[Job], devices: DevicePlan) -> list[str]:
    """The totals lines of the plan (device-hours per task and in all), or none if the cost model cannot price it."""
    from .planning.budget import format_totals, plan_budget
    from .planning.cost import load_constants

    try:
        return format_totals(plan_budget(cells, jobs, Path(cfg.run_dir), devices.devices, cfg.runner,
                                         load_constants()))
    except Exception as err:  # noqa: BLE001 - the missing pieces are the message; the estimate is a bonus
        log.debug("no plan totals: %s", err)
        return []


def _record_invocation(cfg: DictConfig, run_dir: Path, jobs: list[Job], devices: tuple[str, ...]) -> None:
    from .runner.manifest import environment

    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**9:09d}"
    record = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(), "devices": list(devices),
              "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
              "jobs": [job.name for job in jobs], "environment": environment()}
    write_json_atomic(run_dir / "invocations" / f"{stamp}-{os.getpid()}.json", record)


def _first_missing(path: Path) -> Path | None:
    """The top-most folder of ``path`` that does not exist yet (what creating it creates), or None."""
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _remove_refused(folder: Path) -> None:
    """Remove the folder this invocation created for a run refused before it stored anything (its log file closed
    first)."""
    import shutil

    for handler in list(logging.getLogger().handlers):
        if Path(getattr(handler, "baseFilename", "/")).is_relative_to(folder.resolve()):
            logging.getLogger().removeHandler(handler)
            handler.close()
    shutil.rmtree(folder, ignore_errors=True)


def sweep_summary(run_dirs: list[Path], confidence: float) -> str:
    """The summary of every cell of the run directories of a sweep's jobs (``run_dirs``: one entry per job that ran),
    printed once after the sweep."""
    import pandas as pd

    from .report.summary import summary_text
    from .rundir import METRICS_CSV

    parts = []
    for run_dir in dict.fromkeys(Path(d) for d in run_dirs):
        if (run_dir / METRICS_CSV).is_file():
            metrics = pd.read_csv(run_dir / METRICS_CSV, dtype={"variant": str})
            parts.append(f"\nall {len(run_dirs)} jobs of the sweep, {run_dir}:\n\n{summary_text(metrics, confidence)}")
    return "\n".join(parts)


def _run_dir_is_default(cfg: DictConfig) -> bool:
    """Whether ``run_dir`` is the config's default (a new time stamp under ``run_root``), i.e. not given."""
    node = cfg._get_node("run_dir")
    return node is not None and "${now:" in str(node._value())


def _stored_records(cells: list[Cell], run_dir: Path) -> int:
    """Sample records stored in the shard stores of ``cells`` (complete lines only:
    :func:`palrp_bench.runner.store.read_records`)."""
    from .runner.store import STORE_GLOB, read_records

    return sum(len(read_records(path)) for cell in cells for path in cell.directory(run_dir).glob(STORE_GLOB))


def _what(cfg: DictConfig, cells: list[Cell]) -> str:
    if len(cells) == 1:
        return f"cell {cells[0].key}"
    return f"experiment {cfg.experiment.name}"


def run(cfg: DictConfig, *, out=sys.stdout, on_start: Callable[[Path], None] | None = None) -> RunOutcome | None:
    """Execute ``cfg`` (a composed :class:`~palrp_bench.schema.PalrpConfig`).

    Nothing is written to ``run_dir`` before the run starts: the plan, the preflight, the run directory and the
    stored cells' settings are checked first, so a refused invocation leaves no new directory and an existing one
    as it was. ``on_start(run_dir)`` is called once the run directory exists and the run starts writing to it (or
    a report of an existing run directory is built): the command line records its resolved config and opens the
    run's log file there (:func:`palrp_bench.cli.record_start`). The summary printed at the end holds this
    invocation's cells (a sweep's job its own; the command line prints the whole run after the sweep). Ctrl-C or
    SIGTERM once the run started raises :class:`~palrp_bench.errors.Interrupted` with the run directory and the
    samples this invocation stored."""
    mode = cfg.mode if isinstance(cfg.mode, Mode) else Mode(cfg.mode)
    run_dir = Path(cfg.run_dir)
    if mode == Mode.report:
        from .report.build import build_report

        from .report.cli import latest_run, written_line

        if _run_dir_is_default(cfg):  # no run_dir given: the newest run, as palrp-bench-report does
            run_dir = latest_run(Path(cfg.run_root))
            log.info("report of the newest run under %s: %s", cfg.run_root, run_dir)

        if on_start is not None and ((run_dir / "cells").is_dir() or (run_dir / RESULTS_CSV).exists()):
            on_start(run_dir)  # a run directory to report on
        if (run_dir / "cells").is_dir() and not (run_dir / RESULTS_CSV).exists():
            merge_run(run_dir, float(cfg.report.confidence), int(cfg.report.n_boot))  # an interrupted run

        result = build_report([run_dir], cfg.report)
        print(result.text, file=out)
        print(f"\n{written_line(result.files, result.out_dir)}", file=out)
        if cfg.runner.html:
            _write_html(cfg, run_dir, out)
        return None
    cells = plan_cells(cfg)
    if mode == Mode.run:
        check_run_dir(run_dir)  # before the preflight: a run with nowhere to write stops at once
    try:
        devices, device_problem = resolve_devices(list(cfg.runner.devices)), None
    except BadInputError as err:  # listed with every other problem; planning goes on as on the CPU
        devices, device_problem = DevicePlan(("cpu",), False), Problem(err.problem, err.fix or "")
    constants = priced_on = None
    if mode == Mode.plan:  # runner.plan_device: priced on that device kind; unknown: one line, nothing else
        from .planning.budget import plan_device
        from .planning.cost import load_constants

        constants = load_constants()
        priced_on = plan_device(cfg.runner, constants)
    jobs = plan_jobs(cfg, cells, priced_on.n_workers if priced_on is not None else devices.n_workers)
    from .models.loading import loader_spec

    if all(loader_spec(c.model.loader).offline for c in cells):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    selected = frozenset(g for g in ("model", "task", "method", "metric") if cfg.get(g) is not None)
    if mode == Mode.plan:
        found = run_preflight(cells, devices, selected, device_problem)
        text, problems = describe_plan(cfg, cells, jobs, devices, found.problems, constants, priced_on)
        print(text, file=out)
        if problems:
            raise MissingDataError(f"plan incomplete: {len(problems)} problem(s) listed above",
                                   "fix them, then run again")
        return RunOutcome(run_dir, cells, jobs, [], None, "")
    if cfg.runner.quiet:  # no progress bar anywhere (ours, the loaders', the hub's); workers inherit this
        os.environ["TQDM_DISABLE"] = "1"
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        found = check_requirements(cells, devices, _what(cfg, cells), selected, device_problem)
    except MissingRequirementsError as err:  # show what the fixed run will cost, as mode=plan would
        err.planned = _planned_totals(cfg, cells, jobs, devices)
        raise
    if found.hub == "unreachable":
        log.warning("the hub did not answer; running offline from the local cache")
        go_offline()
    if mode == Mode.calibrate:
        from .planning.calibrate import calibrate

        calibrate(cells, devices.devices, cfg.runner, out=out)
        return RunOutcome(run_dir, cells, jobs, [], None, "")
    for cell in cells:  # a resume with other settings is refused before anything is written
        check_cell_record(cell, run_dir)
    created = _first_missing(run_dir)  # the top folder this invocation creates (None: the run directory existed)
    stored_before = _stored_records(cells, run_dir)
    try:
        make_run_dir(run_dir)
        if on_start is not None:
            on_start(run_dir)
        _record_invocation(cfg, run_dir, jobs, devices.devices)
        log.info("run dir %s: %d job(s) on %s", run_dir, len(jobs), ", ".join(devices.devices))
        try:
            from tqdm.contrib.logging import logging_redirect_tqdm

            with logging_redirect_tqdm():  # log lines above the one progress bar, never through it (both on stderr)
                reports = run_jobs(jobs, run_dir, devices.devices, quiet=bool(cfg.runner.quiet),
                                   log_every=int(cfg.runner.log_every))
        except PalrpError:
            # a user error stops the run, but what finished before it stays usable: merge it, then report the error;
            # a refusal before any sample was stored leaves no run directory it created (its one line says it all)
            if any(p.stat().st_size for p in (run_dir / "cells").glob("*/*/*/shard-*.jsonl")):
                merge_run(run_dir, float(cfg.report.confidence), int(cfg.report.n_boot))
            elif created is not None:
                _remove_refused(created)
            raise
        merged = merge_run(run_dir, float(cfg.report.confidence), int(cfg.report.n_boot))
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM: every stored sample stays; say how to resume
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        raise Interrupted(signum, run_dir, _stored_records(cells, run_dir) - stored_before) from None
    import pandas as pd

    from .report.summary import summary_text

    metrics = pd.read_csv(merged.metrics_csv, dtype={"variant": str})
    mine = {(c.model.name, c.task.name, c.method) for c in cells}  # a sweep's job prints its own cells only
    metrics = metrics[[key in mine for key in zip(metrics["model"], metrics["task"], metrics["method"])]]
    summary = summary_text(metrics, float(cfg.report.confidence))
    print(summary, file=out)
    for report in reports:  # where each job's time went (docs/rehearsal.md "Where a job's time goes")
        if report.timings:
            print(f"time of {report.job}: {describe_timings(report.timings)}", file=out)
    print(f"results: {merged.results_csv} ({merged.n_samples} samples, {merged.n_nonfinite} with non-finite "
          f"relevance); table numbers: {merged.metrics_csv} (and metrics.json); manifest: {merged.manifest}", file=out)
    if cfg.runner.html:
        _write_html(cfg, run_dir, out)
    return RunOutcome(run_dir, cells, jobs, reports, merged, summary)


def _write_html(cfg: DictConfig, run_dir: Path, out) -> None:
    """``<run_dir>/report.html`` (``runner.html``; palrp_bench/report/html.py), its path printed."""
    from .report.build import write_run_html

    path = write_run_html(run_dir, cfg.report, max_mb=float(cfg.runner.html_max_mb))
    print(f"report: {path} (tables, curves and a sample explorer; opens offline in a browser)", file=out)
