"""One check of a CUDA machine (``make gpu-check``; docs/rehearsal.md "GPU check"): the test suite, calibration,
a rehearsal of every target and the attribution bench, then one summary table.

    python scripts/gpu_check.py                                   # on a CUDA machine: everything
    python scripts/gpu_check.py --quick                           # about 8 minutes: suite + one target per table
    python scripts/gpu_check.py --skip suite --samples 5           # a shorter rehearsal, no test suite
    python scripts/gpu_check.py --device cpu --samples 2 --targets deit_tiny_imagenet_seg --skip suite,bench
    python scripts/gpu_check.py --quick --device cpu --targets deit_tiny_imagenet_seg --tests tests/bench

Steps, in this order (``--skip`` leaves any of them out):

* ``suite``: the test suite as ``make test`` runs it, on the machine's cores (pytest-xdist ``-n auto``, or
  ``$PYTEST_WORKERS``): ``pytest -q tests``, then the numerics directories (the Makefile's ``NUMERIC_TESTS``) again
  under ``ATEN_CPU_CAPABILITY=avx2`` and ``=default`` (x86 only); one row each, counted from pytest's JUnit XML.
* ``calibrate``: ``palrp-bench mode=calibrate`` once per model of the chosen targets (docs/planning.md
  "Calibration"), on the rehearsal's checkpoints and data, at the rehearsal's ``--batch-size``; one row each,
  read from the ``cost.json`` it writes. It runs before the rehearsal so that the plan's estimates beside the
  rehearsal's measurements use this device's constants (only the H100 has shipped ones).
* ``rehearse``: ``scripts/rehearse.py``'s pipeline of every chosen target through the CLI
  (:func:`rehearse.run_target`, ``--samples`` samples each), then the projected time of every paper table
  (:func:`rehearse.project`).
* ``hours``: ``scripts/bench_gpu.py`` on the chosen targets that price a paper table, ``--hours-samples`` samples
  each with the first batch (warm-up) left out: each table's projected hours beside its arithmetic floor and the
  goals for one H100; one row per target and per table.
* ``bench``: ``scripts/bench_attribution.py`` (on CUDA the LLaMA-2-7B preset in bf16 at 512,
  2048 and 4096 tokens), read from its ``--json`` file; one row per length and method.

``--quick`` runs the suite once (no kernel reruns) and the hours step on one target per paper table
(:data:`QUICK_TARGETS`, cheapest first, 72 samples in batches of 8: 64 timed after the first batch), each step in
its time box (:data:`QUICK_BOXES`, ``--box`` changes them: a pytest or a target stopped at its box still reports
what it finished, and the next step runs), while a thread builds the targets' checkpoints and data beside the suite
(random LLaMA weights drawn on the GPU). Its ``--out`` receives at most 8 small files (:data:`QUICK_FILES`, each
under 16 MB, no subfolder), written as the check goes; run directories and full logs stay under ``--work``.

A step that fails (a non-zero exit of what it runs, or an exception) is one FAILED row naming its log file, and
the next step still runs. Everything goes under ``--out`` (default ``gpu_check/<stamp>/``, ignored by git):
``summary.md`` / ``summary.json`` (the table, rewritten after every row), ``environment.json`` (machine, GPU,
library versions, commit), ``gpu_check.log`` (what was printed), one folder per step with its logs, and ``cache/``
(the palrp-bench user cache of this check: ``cost.json`` with the calibration, remembered batch sizes). The
checkpoints and data the rehearsal builds go to ``--work`` (default ``rehearsal/``, reused by later calls, about
35 GB). Exit status: 0 when no row failed, 1 otherwise, 2 when no CUDA device is present (unless ``--device cpu``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import threading
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

from . import gpu_hours as bench_gpu  # hours per table against the floor and the goals
from . import rehearse  # targets, their checkpoints and data, measurement

REPO = Path(__file__).resolve().parents[2]

GIB = 1024 ** 3
MIB = 1024 ** 2
STEPS = ("suite", "calibrate", "rehearse", "hours", "bench")
OK, FAILED, SKIPPED, PARTIAL = "ok", "FAILED", "skipped", "partial"
#: ``--quick``: one rehearsal target per paper table (Appendix F shares Table 4's DeiT), measured by the hours step
QUICK_TARGETS = {"table1": "tinyllama_imdb_csv", "table2": "llama2_7b_imdb", "table3": "llama3_8b_mcqa",
                 "table4+appendix_f": "deit_base_imagenet", "table5": "deit_base_imagenet_seg"}
#: ``--quick``: the steps that run (the others are skipped rows)
QUICK_STEPS = ("suite", "hours")
#: ``--quick``: each step's time box in seconds (``--box`` changes them): the suite took 307 s with 14 workers on an
#: H200 host with 16 cores; the hours step's five targets about 25-75 s each
QUICK_BOXES = {"suite": 330.0, "hours": 200.0}
#: ``--quick`` on CUDA: samples per target and batch size: one batch of warm-up, then 64 timed samples
QUICK_SAMPLES, QUICK_BATCH = 72, "8"
#: a target that would get less than this of its step's time box is skipped instead of started
MIN_TARGET_S = 20.0
#: seconds a child stopped at its time box (Ctrl-C) has to write what it finished before it is killed
GRACE_S = 20.0
#: largest file ``--quick`` leaves in ``--out`` (what comes back from a remote machine must stay small)
QUICK_FILE_BYTES = 15 * MIB
#: what the bench runs when --bench-args is not given: the LLaMA-2-7B shapes on a GPU, and a quick CPU dry run
BENCH_ARGS = {"cuda": "--preset llama2_7b --dtype bfloat16 --lengths 512 2048 4096",
              "cpu": "--preset small --lengths 128 --repeats 1 --warmup 0 --no-memory"}
COLUMNS = ("step", "target", "status", "wall", "s / sample", "plan s / sample", "measured / plan", "peak memory",
           "projected", "note", "log")


@dataclass
class Row:
    """One line of the summary: a step's result for one target (or the whole step)."""

    step: str
    target: str
    status: str  # ok / FAILED / skipped / partial (a projection with unmeasured cells)
    wall_s: float | None = None
    per_sample_s: float | None = None
    planned_s: float | None = None
    peak_gib: float | None = None
    projected_s: float | None = None
    note: str = ""
    log: str = ""


class Check:
    """What the steps share: the options, the output folder and the environment of their child processes, and the
    running step's deadline (its time box, ``None`` without one).

    Without ``--quick`` everything goes under ``out`` (one folder per step). With ``--quick``, ``out`` receives only
    the few files meant to come back (:data:`QUICK_FILES`, written as the check goes) and everything else (run
    directories, each child's full log, JUnit files, the check's user cache) goes to the scratch folder
    ``<work>/gpu_check/<out's name>``."""

    def __init__(self, args, out: Path):
        self.args = args
        self.out = out
        self.work = args.work.resolve()
        self.quick = bool(getattr(args, "quick", False))
        self.scratch = self.work / "gpu_check" / out.name if self.quick else out
        self.env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                        TOKENIZERS_PARALLELISM="false")
        self.deadline: float | None = None
        self.clock = time.monotonic
        self.prebuild: "Prebuild | None" = None

    def folder(self, step: str) -> Path:
        path = self.scratch / step
        path.mkdir(parents=True, exist_ok=True)
        return path

    def returned(self, name: str) -> Path:
        """A file of ``out`` that comes back (``--quick``: one of :data:`QUICK_FILES`)."""
        self.out.mkdir(parents=True, exist_ok=True)
        return self.out / name

    def error_log(self, step: str) -> Path:
        """Where a failed step's traceback goes: ``<out>/<step>/error.log``, or ``errors.log`` with ``--quick``."""
        return self.returned("errors.log") if self.quick else self.out / step / "error.log"

    def remaining(self) -> float | None:
        """Seconds left in the running step's time box (None: no box)."""
        return None if self.deadline is None else self.deadline - self.clock()

    def targets(self) -> list[rehearse.Target]:
        """The chosen targets; with ``--quick`` cheapest first (by the memory they need), so that time a small target
        leaves in the box goes to the large ones."""
        chosen = [t for t in rehearse.TARGETS if t.name in self.args.targets]
        return sorted(chosen, key=lambda t: t.memory_gib) if self.quick else chosen

    def rehearse_args(self):
        a = self.args
        return argparse.Namespace(device=a.device, samples=a.samples, max_minutes=a.max_minutes,
                                  batch_size=a.batch_size, dtype="config")


# ----------------------------------------------------------------------------------------------- orchestration
def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _last_line(log: Path) -> str:
    """The CLI's one-line error if the log has one, else its last line."""
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if ": error:" in line]
    return _one_line((errors or lines or [""])[-1])


def failed_row(step: str, target: str, err: BaseException, log: Path, wall_s: float | None = None) -> Row:
    """The row of a step (or target) that raised: the exception in one line, its traceback in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:  # appended: with --quick every step's traceback goes to one errors.log
        f.write(f"[{step}] {target}\n" + "".join(traceback.format_exception(type(err), err, err.__traceback__)))
    what = f"exit {err.code}" if isinstance(err, SystemExit) else f"{type(err).__name__}: {err}"
    return Row(step, target, FAILED, wall_s=wall_s, note=_one_line(what), log=str(log))


def run_steps(steps: list[tuple[str, Callable[[], Iterable[Row]]]], skip: Iterable[str], out: Path,
              echo: Callable[[Row], None] = lambda row: None, timings: dict | None = None,
              boxes: dict[str, float] | None = None, set_deadline: Callable[[float | None], None] = lambda d: None,
              error_log: Callable[[str], Path] | None = None) -> list[Row]:
    """Run each step (a callable yielding rows) in order. A skipped step is one ``skipped`` row; a step that
    raises (or calls ``sys.exit``) keeps the rows it yielded and adds one FAILED row whose log (``error_log(step)``,
    default ``<out>/<step>/error.log``) holds the traceback; the next step runs anyway. Ctrl-C stops after a FAILED
    row for the interrupted step. A step with a time box in ``boxes`` (seconds) gets its deadline through
    ``set_deadline`` before it starts (the steps stop their children there); each row goes to ``echo`` as it
    comes, each step's wall seconds to ``timings``."""
    rows: list[Row] = []
    skip = set(skip)
    timings = {} if timings is None else timings
    boxes = boxes or {}
    error_log = error_log or (lambda name: out / name / "error.log")
    for name, step in steps:
        if name in skip:
            rows.append(Row(name, "-", SKIPPED, note="--skip"))
            echo(rows[-1])
            continue
        t0 = time.monotonic()
        set_deadline(t0 + boxes[name] if name in boxes else None)
        try:
            for row in step():
                rows.append(row)
                echo(row)
        except KeyboardInterrupt:
            rows.append(Row(name, "-", FAILED, wall_s=time.monotonic() - t0, note="interrupted (Ctrl-C)"))
            echo(rows[-1])
            timings[name] = time.monotonic() - t0
            break
        except (Exception, SystemExit) as err:  # noqa: BLE001 - one failed step is one row; the others still run
            rows.append(failed_row(name, "-", err, error_log(name), time.monotonic() - t0))
            echo(rows[-1])
        timings[name] = time.monotonic() - t0
    set_deadline(None)
    return rows


def exit_status(rows: list[Row]) -> int:
    return 1 if any(r.status == FAILED for r in rows) else 0


def _seconds(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f} s" if x < 1 else (f"{x:.1f} s" if x < 100 else f"{x:.0f} s")


def _relative(path: str, out: Path) -> str:
    if not path:
        return ""
    try:
        return str(Path(path).resolve().relative_to(out.resolve()))
    except ValueError:
        return path


def summary_table(rows: list[Row], out: Path) -> str:
    """The Markdown summary: one line per row (log paths relative to ``out``)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        ratio = f"{r.per_sample_s / r.planned_s:.2f}" if r.per_sample_s is not None and r.planned_s else "-"
        cells = (r.step, r.target, r.status, _seconds(r.wall_s), _seconds(r.per_sample_s), _seconds(r.planned_s),
                 ratio, rehearse._fmt(r.peak_gib, ".1f", " GiB"),
                 "-" if r.projected_s is None else rehearse._hours(r.projected_s), r.note.replace("|", "/"),
                 _relative(r.log, out))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- the steps
def _run(command: list[str], log: Path, env: dict, cwd: Path = REPO, timeout: float | None = None
         ) -> tuple[int, float]:
    """Run ``command`` with its output in ``log`` (the command first); ``(exit code, wall seconds)``. With a
    ``timeout`` (seconds) the command's process group gets Ctrl-C then (so pytest still writes its report), and
    is killed :data:`GRACE_S` seconds later; the exit code is then :data:`TIMED_OUT` if it had not ended."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write(" ".join(shlex.quote(c) for c in command) + "\n")
        f.flush()
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            code = child.wait(timeout=None if timeout is None else max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGINT)
            try:
                child.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
            code = TIMED_OUT
    return code, time.monotonic() - t0


#: :func:`_run`'s exit code of a command stopped at its time box
TIMED_OUT = -999


def numeric_tests(makefile: Path = REPO / "Makefile") -> list[str]:
    """The Makefile's ``NUMERIC_TESTS`` (the directories ``make test`` runs again on other CPU kernels)."""
    match = re.search(r"^NUMERIC_TESTS\s*:?=\s*(.+)$", makefile.read_text(), flags=re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no NUMERIC_TESTS line in {makefile}")
    return match.group(1).split()


def junit_counts(xml_path: Path) -> tuple[dict[str, int], list[str]]:
    """``({tests, failures, errors, skipped}, failing test ids)`` of a pytest JUnit XML file."""
    root = ET.parse(xml_path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    failing = [f"{case.get('classname', '')}::{case.get('name', '')}" for case in root.iter("testcase")
               if case.find("failure") is not None or case.find("error") is not None]
    return counts, failing


def suite_workers() -> list[str]:
    """pytest-xdist's worker option for the suite: ``$PYTEST_WORKERS`` (as in the Makefile; ``0`` = one process),
    else ``auto`` (one worker per core); none where pytest-xdist is not installed."""
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        return []
    return ["-n", os.environ.get("PYTEST_WORKERS", "").strip() or "auto"]


def _cap_file(path: Path, limit: int = QUICK_FILE_BYTES) -> None:
    """Keep the last ``limit`` bytes of ``path`` (a file that comes back must stay small), after a line saying
    so."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size <= limit:
        return
    with open(path, "rb") as f:
        f.seek(size - limit)
        tail = f.read()
    path.write_bytes(f"[first {size - limit} bytes left out: the file is capped at {limit} bytes]\n".encode() + tail)


def pytest_row(check: Check, name: str, label: str, paths: list[str], extra_env: dict | None = None) -> Row:
    """Run pytest on ``paths`` (as ``make test`` does, with :func:`suite_workers`; output in ``suite/<name>.log``,
    with ``--quick`` in ``suite.log``, stopped at the step's time box) and summarise it in one row labelled
    ``label``."""
    folder = check.folder("suite")
    log = check.returned("suite.log") if check.quick else folder / f"{name}.log"
    xml = folder / f"{name}.junit.xml"
    xml.unlink(missing_ok=True)
    env = dict(check.env, **(extra_env or {}))
    code, wall = _run([sys.executable, "-m", "pytest", "-q", *suite_workers(), *paths, f"--junitxml={xml}"], log,
                      env, timeout=check.remaining())
    if check.quick:
        _cap_file(log)
    box = getattr(check.args, "box", {}).get("suite")
    stopped = f"stopped at the {box or 0:.0f} s time box" if code == TIMED_OUT else ""
    if not xml.is_file():
        what = stopped or f"pytest exit {code}: {_last_line(log)}"
        return Row("suite", label, FAILED, wall_s=wall, note=what, log=str(log))
    counts, failing = junit_counts(xml)
    bad = counts["failures"] + counts["errors"]
    passed = counts["tests"] - bad - counts["skipped"]
    note = f"{passed} passed, {counts['skipped']} skipped"
    if bad:
        shown = ", ".join(failing[:3]) + (f" and {len(failing) - 3} more" if len(failing) > 3 else "")
        note = f"{bad} failed of {counts['tests']}: {shown}"
    elif code not in (0, TIMED_OUT):
        note += f"; pytest exit {code}"
    if stopped:
        return Row("suite", label, FAILED if bad else PARTIAL, wall_s=wall, note=f"{stopped}: {note} so far",
                   log=str(log))
    return Row("suite", label, OK if code == 0 else FAILED, wall_s=wall, note=note, log=str(log))


#: the CPU kernel sets ``make test`` runs the numerics directories again with: (name, label, ATEN_CPU_CAPABILITY)
KERNEL_RUNS = (("numerics_avx2", "numerics, AVX2 kernels", "avx2"),
               ("numerics_default", "numerics, baseline kernels", "default"))


def suite_step(check: Check) -> Iterable[Row]:
    """The suite, then its numerics directories on AVX2 and on the baseline kernels (``make test``); ``--tests``
    replaces the paths of every run. ``--quick`` runs the suite once, on this host's own kernels."""
    chosen = check.args.tests
    yield pytest_row(check, "tests", "tests", chosen or ["tests"])
    for name, label, capability in KERNEL_RUNS:
        if getattr(check.args, "quick", False):
            yield Row("suite", label, SKIPPED, note="--quick: the suite once, on this host's kernels")
            continue
        if platform.machine().lower() not in ("x86_64", "amd64"):
            yield Row("suite", label, SKIPPED, note=f"not an x86 CPU ({platform.machine()})")
            continue
        yield pytest_row(check, name, label, chosen or numeric_tests(), {"ATEN_CPU_CAPABILITY": capability})


def _per_model(targets: list[rehearse.Target]) -> list[rehearse.Target]:
    """The first target of each model (model config and checkpoint): what calibration measures."""
    seen, out = set(), []
    for t in targets:
        if (t.model, t.checkpoint) not in seen:
            seen.add((t.model, t.checkpoint))
            out.append(t)
    return out


def _calibration_of(cost_file: Path, model: str) -> tuple[dict | None, dict]:
    """The newest measurement of ``model`` in ``cost_file`` and the profiles of its device kind."""
    try:
        devices = json.loads(cost_file.read_text()).get("devices", {})
    except (OSError, ValueError):
        return None, {}
    found = [(entry.get("calibrated", ""), m, entry.get("profiles", {})) for entry in devices.values()
             for m in entry.get("measurements", []) if m.get("model") == model]
    if not found:
        return None, {}
    _, measurement, profiles = max(found, key=lambda f: f[0])
    return measurement, profiles


def calibrate_step(check: Check) -> Iterable[Row]:
    """``palrp-bench mode=calibrate`` per model of the chosen targets; the measurements go to
    ``calibrate/calibrate.json`` (each run replaces the measurements of its device kind in ``cost.json``)."""
    from ..planning.cost import user_cost_path

    folder = check.folder("calibrate")
    collected = []
    for target in _per_model(check.targets()):
        too_large = rehearse.memory_shortfall(target, check.args.device)
        if too_large:
            yield Row("calibrate", target.name, SKIPPED, note=too_large)
            continue
        log = folder / f"{target.name}.log"
        t0 = time.monotonic()
        try:
            overrides = rehearse.pipeline_overrides(target, check.work)
        except Exception as err:  # noqa: BLE001 - a checkpoint or data set that cannot be built fails one row
            yield failed_row("calibrate", target.name, err, log, time.monotonic() - t0)
            continue
        built = time.monotonic() - t0
        code, wall = _run([sys.executable, "-m", "palrp_bench.cli", "mode=calibrate", *overrides,
                           f"runner.devices={rehearse.devices_override(check.args.device)}",
                           f"runner.batch_size={check.args.batch_size}", "runner.quiet=true"],
                          log, check.env, cwd=check.work)
        measurement, profiles = _calibration_of(user_cost_path(), target.model) if code == 0 else (None, {})
        if measurement is None:
            yield Row("calibrate", target.name, FAILED, wall_s=wall,
                      note=f"exit {code}: {_last_line(log)}" if code else "no measurement in cost.json", log=str(log))
            continue
        collected.append(measurement)
        fitted = profiles.get(measurement["profile"], {})
        s = fitted.get("seconds_per_unit")
        note = (f"{target.model} ({measurement['profile']}): load {_seconds(measurement['load_seconds'])}, "
                f"{measurement['n_timed']} timed at batch {measurement.get('batch_size', '?')}; plan = constants "
                f"before; fitted s/unit "
                f"{'?' if s is None else f'{s:.3g}'}, overhead {fitted.get('overhead_s', 0):.3g} s")
        if measurement.get("estimated_peak"):
            note += f"; estimated peak {measurement['estimated_peak'] / GIB:.1f} GiB"
        if built > 1:
            note += f"; built checkpoint/data {built:.0f} s"
        yield Row("calibrate", target.name, OK, wall_s=wall, per_sample_s=measurement["per_sample"],
                  planned_s=measurement.get("predicted"),
                  peak_gib=None if measurement.get("peak_bytes") is None else measurement["peak_bytes"] / GIB,
                  note=note, log=str(log))
        (folder / "calibrate.json").write_text(json.dumps(collected, indent=1) + "\n")


def measured_row(m: rehearse.Measured, device: str) -> Row:
    """A rehearsal measurement as a summary row (a run stopped by ``--max-minutes`` is ok if it timed samples)."""
    peak = m.peak_device_gib if device != "cpu" else m.peak_rss_gib
    if m.status == "ok":
        status, note = OK, m.note
    elif m.status == "capped":
        status = OK if m.per_sample_s is not None else FAILED
        note = f"stopped at --max-minutes after {m.samples} sample(s)"
    elif m.status == "skipped":
        status, note = SKIPPED, m.note
    else:
        status, note = FAILED, f"{m.status}: {m.note}"
    loads = [f"{what} load {x:.0f} s" for what, x in (("model", m.load_model_s), ("data", m.load_data_s))
             if x is not None]
    if m.samples:
        loads.insert(0, f"{m.samples} samples")
    note = "; ".join(x for x in (", ".join(loads), note) if x)
    return Row("rehearse", m.target, status, wall_s=m.wall_s or None, per_sample_s=m.per_sample_s,
               planned_s=m.planned_sample_s, peak_gib=peak, note=note, log=m.log)


def rehearse_step(check: Check) -> Iterable[Row]:
    """Every chosen target through the CLI, one row each, then one row per paper table's projection and one for
    the whole paper; ``rehearse/rehearse.json`` holds the measurements (:func:`rehearse.as_data`)."""
    folder = check.folder("rehearse")
    targets = {t.name: t for t in rehearse.TARGETS}
    args = check.rehearse_args()
    results, rows = [], []
    for target in check.targets():
        t0 = time.monotonic()
        try:
            m = rehearse.run_target(target, args, check.work, folder)
        except Exception as err:  # noqa: BLE001 - e.g. a checkpoint that cannot be built: one row
            yield failed_row("rehearse", target.name, err, folder / "logs" / f"{target.name}.error.log",
                             time.monotonic() - t0)
            continue
        results.append(m)
        rows.append(measured_row(m, check.args.device))
        yield rows[-1]
    projections = rehearse.project(results, targets)
    (folder / "rehearse.json").write_text(json.dumps(rehearse.as_data(results, targets, args), indent=1) + "\n")
    for row in rows:  # each target's share of the paper's projected time
        shares = [p.by_target[row.target] for p in projections if row.target in p.by_target]
        row.projected_s = sum(shares) if shares else None
    for p in projections:
        status = SKIPPED if p.seconds is None else (OK if p.measured == p.cells else "partial")
        yield Row("projection", p.table, status, projected_s=p.seconds,
                  note=f"{p.measured} of {p.cells} cells measured" + ("" if p.measured in (0, p.cells)
                                                                     else " (the others not counted)"))
    measured = [p for p in projections if p.seconds is not None]
    cells = sum(p.cells for p in projections)
    done = sum(p.measured for p in projections)
    yield Row("projection", "whole paper", SKIPPED if not measured else (OK if done == cells else "partial"),
              projected_s=sum(p.seconds for p in measured) if measured else None,
              note=f"{done} of {cells} cells measured; load + paper samples x time per sample, every method "
                   f"priced like pa_lrp")


class Prebuild:
    """The checkpoints and data of the chosen targets built in a thread while the suite runs (``--quick``: the
    random 7B / 8B weights are drawn on the GPU, :func:`rehearse.weights_device`, and written to disk); the hours
    step waits for it within its time box. A build that fails is left to the step, which builds again and reports
    the error in that target's row."""

    def __init__(self, check: Check):
        self.check = check
        self.seconds: dict[str, float] = {}
        self.thread = threading.Thread(target=self._build, name="gpu-check-prebuild", daemon=True)

    def _build(self) -> None:
        for target in self.check.targets():
            if rehearse.memory_shortfall(target, self.check.args.device):
                continue
            t0 = time.monotonic()
            try:
                rehearse.pipeline_overrides(target, self.check.work)
            except Exception:  # noqa: BLE001 - the step builds it again and reports why in the target's row
                continue
            self.seconds[target.name] = time.monotonic() - t0

    def start(self) -> "Prebuild":
        self.thread.start()
        return self

    def wait(self, timeout: float | None) -> bool:
        """Whether every build has finished (waiting at most ``timeout`` seconds)."""
        self.thread.join(timeout=None if timeout is None else max(timeout, 0.0))
        return not self.thread.is_alive()


def _target_cap(check: Check, targets_left: int) -> float | None:
    """Seconds the next target may run: its fair share of what is left of the step's time box, at least
    :data:`MIN_TARGET_S` while that much is left (None: no box; below :data:`MIN_TARGET_S`: none left for it)."""
    left = check.remaining()
    if left is None:
        return None
    return min(left, max(left / max(targets_left, 1), MIN_TARGET_S))


def _append_log(check: Check, m: rehearse.Measured, limit: int = 2 * MIB) -> None:
    """``--quick``: the end of a target's CLI log (at most ``limit`` bytes) appended to ``rehearse.log``."""
    try:
        text = Path(m.log).read_bytes()[-limit:].decode(errors="replace") if m.log else ""
    except OSError:
        text = ""
    with open(check.returned("rehearse.log"), "a") as f:
        f.write(f"===== {m.target}: {m.status} ({m.wall_s:.0f} s); run dir {m.run_dir}\n{text}\n")


def hours_step(check: Check) -> Iterable[Row]:
    """``scripts/bench_gpu.py`` on the chosen targets that price a paper table (``--hours-samples`` each, the first
    batch left out): one row per target (steady seconds per sample against the floor), then one per table and group
    of tables (projected time, floor, the goal for one H100); ``hours/hours.md`` and ``hours.json`` hold its table
    (with ``--quick``: ``hours.md`` and each target's log in ``rehearse.log``). With a time box, each target gets
    its fair share of what is left of it, at least :data:`MIN_TARGET_S` (stopped there with Ctrl-C: its finished
    batches still count), and once less than that is left the remaining targets are skipped rows."""
    folder = check.folder("hours")
    chosen = [t for t in check.targets() if t.tables]
    if not chosen:
        yield Row("hours", "-", SKIPPED, note="none of the chosen targets prices a paper table")
        return
    a = check.args
    import torch

    peak, _ = bench_gpu.peak_flops(a.device, None, torch.get_num_threads())
    results, flops = [], {}
    for k, target in enumerate(chosen):
        if check.prebuild is not None and not check.prebuild.wait(check.remaining()):
            yield Row("hours", target.name, SKIPPED, note="time box over while its checkpoints and data were built")
            continue
        cap = _target_cap(check, len(chosen) - k)
        if cap is not None and cap < MIN_TARGET_S:
            box = getattr(a, "box", {}).get("hours", 0)
            yield Row("hours", target.name, SKIPPED, note=f"the step's {box:.0f} s time box ran out")
            continue
        args = argparse.Namespace(device=a.device, samples=a.hours_samples, batch_size=a.batch_size,
                                  targets=[target.name], peak_tflops=None, dtype="config", work=a.work, out=folder,
                                  max_minutes=a.max_minutes if cap is None else min(a.max_minutes, cap / 60),
                                  grace_s=120.0 if cap is None else GRACE_S)
        t0 = time.monotonic()
        try:
            [(m, f)] = list(bench_gpu.measure(args, echo=lambda text: None))
        except Exception as err:  # noqa: BLE001 - e.g. a checkpoint that cannot be built: one row, the rest run
            yield failed_row("hours", target.name, err, check.error_log("hours"), time.monotonic() - t0)
            continue
        results.append(m)
        flops[m.target] = f
        if check.quick:
            _append_log(check, m)
        row = measured_row(m, a.device)
        floor = None if not f else f / peak
        row.step, row.per_sample_s, row.planned_s = "hours", m.steady_sample_s, None
        timed = m.samples - m.warmup_samples
        row.note = (f"{timed} samples after a first batch of {m.warmup_samples}"
                    if m.steady_sample_s is not None else "one batch only: nothing measured after the warm-up")
        if m.status == "capped" and cap is not None:  # the box's decision, not a failure: what it finished counts
            row.note += f"; stopped at its share of the time box ({cap:.0f} s)"
            row.status = OK if m.steady_sample_s is not None else PARTIAL
        elif m.status == "capped":
            row.note += "; stopped at --max-minutes"
        if floor and m.steady_sample_s is not None:
            row.note += f"; floor {floor:.3g} s ({m.steady_sample_s / floor:.1f}x)"
        if m.steady_sample_s is not None and m.timings:
            row.note += f"; per sample {rehearse.stage_split(m.timings)}"
        if m.status == "skipped":
            row.note = m.note
        if check.quick:
            row.log = str(check.returned("rehearse.log"))
        yield row
    if not results:
        return
    args = argparse.Namespace(device=a.device, samples=a.hours_samples, batch_size=a.batch_size, peak_tflops=None)
    bench = bench_gpu.summarise(results, flops, args)
    hours_md = check.returned("hours.md") if check.quick else folder / "hours.md"
    hours_md.write_text(bench.report(a.device) + "\n")
    (folder / "hours.json").write_text(json.dumps(bench_gpu.as_data(results, flops, bench.rows, args, bench.peak,
                                                                    bench.peak_note), indent=1) + "\n")
    for r in bench.rows:
        status = SKIPPED if r.seconds is None else (OK if r.measured == r.cells else PARTIAL)
        note = f"{r.measured} of {r.cells} cells measured"
        if r.seconds is not None:
            note += f"; floor {bench_gpu._hours(r.floor_s)}" + ("" if r.ratio is None else f" ({r.ratio:.1f}x)")
        if r.goal_s is not None:
            note += f"; goal {bench_gpu._hours(r.goal_s)} on one H100: {r.verdict}"
        yield Row("hours", r.name, status, projected_s=r.seconds, note=note, log=str(hours_md))


def bench_step(check: Check) -> Iterable[Row]:
    """``python -m palrp_bench.bench.attribution`` with ``--bench-args`` on the device; one row per length and
    method."""
    folder = check.folder("bench")
    log, data = folder / "bench.log", folder / "bench.json"
    bench_args = shlex.split(check.args.bench_args or BENCH_ARGS[check.args.device])
    code, wall = _run([sys.executable, "-m", "palrp_bench.bench.attribution", *bench_args,
                       "--device", check.args.device, "--json", str(data)], log, check.env)
    result = json.loads(data.read_text()) if data.is_file() else {"rows": []}
    for r in result["rows"]:
        yield Row("bench", f"{r['family']} {r['length']} tokens {r['method']}", OK, per_sample_s=r["ms"] / 1000,
                  peak_gib=None if r.get("peak_mib") is None else r["peak_mib"] / 1024,
                  note=f"{r['ratio']:.2f}x {result['reference']}; {result['preset']} {result['dtype']}", log=str(log))
    if code != 0:
        yield Row("bench", "-", FAILED, wall_s=wall, note=f"exit {code}: {_last_line(log)}", log=str(log))
    elif not result["rows"]:
        yield Row("bench", "-", FAILED, wall_s=wall, note="no rows in bench.json", log=str(log))


def steps_for(check: Check) -> list[tuple[str, Callable[[], Iterable[Row]]]]:
    """The steps in their order (calibration before the rehearsal: its plan estimates use the constants)."""
    return [("suite", lambda: suite_step(check)), ("calibrate", lambda: calibrate_step(check)),
            ("rehearse", lambda: rehearse_step(check)), ("hours", lambda: hours_step(check)),
            ("bench", lambda: bench_step(check))]


# ----------------------------------------------------------------------------------------------- main
def environment(args) -> dict:
    """What the results depend on: machine, GPU, library versions, commit (each field best-effort)."""
    info: dict = {"argv": sys.argv, "device": args.device, "python": sys.version.split()[0],
                  "machine": platform.machine(), "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}

    def record(key, fn):
        try:
            info[key] = fn()
        except Exception as err:  # noqa: BLE001 - a missing tool is one field, not a failed check
            info[key] = f"unknown ({type(err).__name__}: {_one_line(err, 120)})"

    def commit() -> str:
        # what `palrp-bench --version` prints: this checkout's commit, none for a tree that is not a checkout (e.g.
        # an archive unpacked inside another git repository, whose commit git would report)
        from palrp_bench.cli import checkout_commit

        return checkout_commit() or "none (not a git checkout)"

    record("commit", commit)
    record("cpu", lambda: next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                               .splitlines() if line.lower().startswith("model name")))
    import importlib.metadata as md

    for package in ("torch", "torchvision", "transformers", "timm", "bitsandbytes"):
        record(package, lambda p=package: md.version(p))
    if args.device == "cuda":
        import torch

        record("gpu", lambda: torch.cuda.get_device_name(0))
        record("cuda", lambda: torch.version.cuda)
        record("nvidia-smi", lambda: subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, check=True).stdout.strip())
    return info


def _targets(text: str) -> list[str]:
    names = [t.name for t in rehearse.TARGETS]
    chosen = [x for x in text.split(",") if x]
    unknown = [x for x in chosen if x not in names]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(names)}")
    return chosen


def _steps(text: str) -> list[str]:
    chosen = [x for x in text.split(",") if x]
    unknown = [x for x in chosen if x not in STEPS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEPS)}")
    return chosen


def _boxes(text: str) -> dict[str, float]:
    """``suite=330,hours=200``: a time box in seconds per step."""
    boxes = {}
    for part in (x for x in text.split(",") if x):
        step, _, seconds = part.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if step not in STEPS or value <= 0:
            raise argparse.ArgumentTypeError(f"bad time box {part!r}: write STEP=SECONDS with a step of "
                                             f"{', '.join(STEPS)}, e.g. suite=330,hours=200")
        boxes[step] = value
    return boxes


def quick_targets() -> list[str]:
    """The ``--quick`` targets: one per paper table (:data:`QUICK_TARGETS`), each pricing its table."""
    return list(dict.fromkeys(QUICK_TARGETS.values()))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (default; refused without a CUDA device) or cpu (a dry run)")
    parser.add_argument("--quick", action="store_true",
                        help=f"about 8 minutes: the suite once and the hours step on one target per paper table "
                             f"({', '.join(quick_targets())}), each step in its time box "
                             f"({', '.join(f'{k} {v:.0f} s' for k, v in QUICK_BOXES.items())}), at most "
                             f"{len(QUICK_FILES)} small files in --out")
    parser.add_argument("--samples", type=int, default=20, help="rehearsal samples per target")
    parser.add_argument("--targets", type=_targets, default=None,
                        help="comma-separated rehearsal targets (default: all; --quick: one per paper table) for "
                             "calibration, rehearsal and the hours step")
    parser.add_argument("--skip", type=_steps, default=None,
                        help=f"comma-separated steps to leave out: {','.join(STEPS)} (--quick: all but "
                             f"{','.join(QUICK_STEPS)})")
    parser.add_argument("--box", type=_boxes, default=None,
                        help="time boxes, STEP=SECONDS,... (default: none; --quick: "
                             + ",".join(f"{k}={v:.0f}" for k, v in QUICK_BOXES.items()) + ")")
    parser.add_argument("--max-minutes", type=float, default=30.0, help="time cap of each rehearsal target")
    parser.add_argument("--hours-samples", type=int, default=None,
                        help=f"samples per target of the hours step (default: 160 on cuda, {QUICK_SAMPLES} with "
                             "--quick, 4 on cpu; the first batch is left out)")
    parser.add_argument("--batch-size", default=None,
                        help=f"runner.batch_size of the rehearsal and the hours step (default: auto on cuda, "
                             f"{QUICK_BATCH} with --quick; 1 on cpu, 2 with --quick)")
    parser.add_argument("--bench-args", default=None,
                        help=f"arguments of bench_attribution.py (default on cuda: {BENCH_ARGS['cuda']!r}; "
                             f"on cpu: {BENCH_ARGS['cpu']!r})")
    parser.add_argument("--tests", nargs="+", default=None, metavar="PATH",
                        help="test paths for both suite runs (default: tests, then the Makefile's NUMERIC_TESTS)")
    parser.add_argument("--work", type=Path, default=REPO / "rehearsal",
                        help="checkpoints and data of the rehearsal (large; reused by later calls); --quick also "
                             "keeps its run directories and full logs there, under gpu_check/<stamp>/")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: gpu_check/<stamp>/)")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    if args.targets is None:
        args.targets = quick_targets() if args.quick else [t.name for t in rehearse.TARGETS]
    if args.skip is None:
        args.skip = [s for s in STEPS if s not in QUICK_STEPS] if args.quick else []
    if args.box is None:
        args.box = dict(QUICK_BOXES) if args.quick else {}
    if args.batch_size is None:
        args.batch_size = (QUICK_BATCH if cuda else "2") if args.quick else ("auto" if cuda else "1")
    if args.hours_samples is None:
        args.hours_samples = (QUICK_SAMPLES if args.quick else 160) if cuda else 4
    return args


#: what ``--quick`` leaves in ``--out``: the summary (rewritten after every row), the environment, the console, the
#: suite's pytest output, the hours table, the targets' CLI logs and the tracebacks of failed steps (only if any)
QUICK_FILES = ("summary.md", "summary.json", "environment.json", "gpu_check.log", "suite.log", "hours.md",
               "rehearse.log", "errors.log")


def write_summary(out: Path, env: dict, rows: list[Row], timings: dict, elapsed: float, done: bool) -> str:
    """``summary.md`` and ``summary.json`` of the rows so far (rewritten after every row, so a check that dies
    leaves what it finished); returns the Markdown."""
    status = exit_status(rows)
    table = summary_table(rows, out)
    state = "" if done else " -- still running"
    header = (f"gpu-check {env['started']} on {env.get('gpu', env.get('cpu', env.get('device')))} "
              f"(torch {env.get('torch')}, commit {env.get('commit')}): {_seconds(elapsed)} "
              f"({', '.join(f'{k} {_seconds(v)}' for k, v in timings.items()) or 'no step finished'}){state}; "
              f"peak memory: CUDA allocated on cuda, resident on cpu (bench: over the model's weights)")
    text = header + "\n\n" + table + "\n"
    (out / "summary.md").write_text(text)
    (out / "summary.json").write_text(json.dumps({"environment": env, "exit_status": status, "finished": done,
                                                  "step_seconds": timings, "rows": [asdict(r) for r in rows]},
                                                 indent=1) + "\n")
    return text


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and rehearse.cuda_missing(
            "gpu-check", 'make gpu-check ARGS="--device cpu --samples 2 --targets deit_tiny_imagenet_seg '
                         '--skip suite,bench" (or ARGS="--quick --device cpu --targets deit_tiny_imagenet_seg '
                         '--tests tests/bench/test_gpu_check.py")'):
        return 2
    out = (args.out or REPO / "gpu_check" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    check = Check(args, out)
    # this check's own user cache: its calibration, batch sizes and selections neither come from nor go to the
    # user's (copy cache/cost.json to ~/.cache/palrp-bench/ to plan with this calibration)
    os.environ["PALRP_CACHE_DIR"] = str(check.scratch / "cache")
    check.env["PALRP_CACHE_DIR"] = os.environ["PALRP_CACHE_DIR"]
    console = open(out / "gpu_check.log", "a")
    rows: list[Row] = []
    timings: dict = {}
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(text, flush=True)
        console.write(text + "\n")
        console.flush()

    env = environment(args)
    (out / "environment.json").write_text(json.dumps(env, indent=1) + "\n")

    def echo(row: Row) -> None:
        rows.append(row)
        parts = [f"[{row.step}] {row.target}: {row.status}"]
        if row.per_sample_s is not None:
            parts.append(f"{_seconds(row.per_sample_s)} / sample (plan {_seconds(row.planned_s)})")
        if row.peak_gib is not None:
            parts.append(f"peak {row.peak_gib:.1f} GiB")
        if row.wall_s is not None:
            parts.append(f"{_seconds(row.wall_s)}")
        say(", ".join(parts) + (f" -- {row.note}" if row.note and row.status != OK else ""))
        write_summary(out, env, rows, timings, time.monotonic() - t0, done=False)

    steps = [s for s in STEPS if s not in args.skip]
    boxes = ", ".join(f"{k} {v:.0f} s" for k, v in args.box.items() if k in steps)
    say(f"gpu-check on {env.get('gpu', args.device)}: steps {', '.join(steps)}"
        + (f" (time boxes: {boxes})" if boxes else "") + f"; {len(args.targets)} target(s), "
        + (f"{args.hours_samples} sample(s) each in the hours step" if args.quick else f"{args.samples} sample(s) each")
        + f"; output {out}" + (f" (run directories and full logs: {check.scratch})" if args.quick else ""))
    if args.quick and "hours" in steps:
        check.prebuild = Prebuild(check).start()  # beside the suite: the hours step's checkpoints and data
    run_steps(steps_for(check), args.skip, out, echo, timings, boxes=args.box,
              set_deadline=lambda d: setattr(check, "deadline", d), error_log=check.error_log)
    built = {k: v for k, v in (check.prebuild.seconds if check.prebuild is not None else {}).items() if v >= 1}
    if built:
        say("built during the suite: " + ", ".join(f"{k} {_seconds(v)}" for k, v in built.items()))
    status = exit_status(rows)
    text = write_summary(out, env, rows, timings, time.monotonic() - t0, done=True)
    say("\n" + text)
    failed = [r for r in rows if r.status == FAILED]
    say(f"{len(failed)} row(s) FAILED; send back the folder {out}" if failed
        else f"all steps passed; send back the folder {out}")
    console.close()
    return status


if __name__ == "__main__":
    sys.exit(main())
