"""``mode=calibrate``: measure the cost-model constants of the selected models on this machine
(docs/planning.md "Calibration").

Per model of the selected cells (its first cell): load it on the first device (timed: the load constant), take
the first ``n_samples`` (default 3) samples of the task's pool, evaluate the first one (warm-up, reported) and
the others as one batch (timed), exactly as a job does, without selection and without storing anything. The
units of the timed samples come from their real shapes (tokens of each text, the ViT's patches), so

    measured seconds per sample = o * explanations + s * units

(``o`` per explanation) is solved for ``s`` when the constants before calibration say compute dominates (large
models), else for the overhead ``o`` (the embedded tiny models). Times are wall-clock seconds; on a machine shared with other work set
``PALRP_CALIBRATE_CLOCK=process`` (and ``OMP_WAIT_POLICY=PASSIVE``, so waiting threads burn no CPU): compute is
then timed as the process's CPU time divided by torch's threads, and overhead as its CPU time, which estimates
the time on an idle machine (how the shipped CPU constants were measured, docs/planning.md). ``r`` (explanation cost in forwards) stays the shipped one. Per
profile the median over its models is written to the user's cache file (:func:`palrp_bench.planning.cost.
user_cost_path`, ``~/.cache/palrp-bench/cost.json`` by default) under this device kind, next to the raw
measurements; other device kinds and profiles in the file are kept. Later plans on this machine use them.
"""
from __future__ import annotations

import gc
import logging
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..atomic_io import write_json_atomic
from ..data.text_common import real_token_count
from ..errors import BadInputError
from ..numerics import tf32_mode
from .cost import (GIGA, Architecture, CostConstants, Work, architecture_of, device_kind, estimate, load_constants,
                   profile_key, sample_work, work_units)
from ..runner.plan import Cell

__all__ = ["Measurement", "measure_cell", "fit_profiles", "write_calibration", "calibrate"]

log = logging.getLogger("palrp_bench.runner")

#: share of the predicted time that compute must have for a measurement to calibrate ``s`` (else ``o``)
COMPUTE_DOMINATED = 0.5
#: models smaller than this calibrate no load constant (their load time is start-up, not weights)
MIN_LOAD_PARAMS = 100_000_000


@dataclass
class Measurement:
    """One model's calibration run: its profile, load time, first (warm-up) and per-sample seconds of the timed
    samples, their units, what the constants before calibration predicted for them, and the peak memory seen
    (CUDA: allocated; CPU: the process's peak RSS so far)."""

    model: str
    task: str
    method: str
    profile: str
    params: int
    load_seconds: float
    load_cpu: float
    first_seconds: float
    per_sample: float
    per_sample_cpu: float
    threads: int
    n_timed: int
    explanations: int
    units: float
    predicted: float | None
    peak_bytes: float | None
    estimated_peak: float | None


def _timed_work(cell: Cell, arch: Architecture, samples: list, constants: CostConstants) -> list[Work]:
    """The work of each timed sample from its real shape (text: the batch's padded width explained, its own real
    tokens forwarded); vision and the self-test: the cell's fixed work."""
    base = sample_work(cell, arch, constants)
    if cell.task.kind not in ("text_classification", "next_token"):
        return [base] * len(samples)
    width = max(len(s.input_ids) for s in samples)
    if base is None:
        return [None] * len(samples)
    return [Work(1, float(width), base.forwards, float(real_token_count(s)),
                 base.explain_forwards) for s in samples]


def _peak_bytes(device: str) -> float | None:
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0  # kB on Linux
    except (ImportError, OSError):
        return None


def measure_cell(cell: Cell, device: str, n_samples: int, constants: CostConstants, forward_batch_size: int = 64
                 ) -> Measurement:
    """Load the cell's model, evaluate ``n_samples`` samples (first = warm-up), return the timings."""
    from ..evaluation.tasks import task_adapter
    from ..runner.bundles import load_bundle

    if n_samples < 2:
        raise BadInputError(f"calibration needs at least 2 samples per model, got {n_samples}",
                            "leave runner.max_samples unset (3 samples) or set it to 2 or more")
    arch = architecture_of(cell.model, constants)
    if arch is None:
        raise BadInputError(f"architecture of {cell.model.name} unknown", "set model.base_model=<hub id>")
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(device)
    t0, c0 = time.perf_counter(), time.process_time()
    bundle = load_bundle(cell.model, device)
    load_seconds, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    adapter = task_adapter(cell.task.kind)
    ctx = cell.context(device, None, forward_batch_size)
    pool = adapter.load_samples(cell.task, bundle)
    samples = [pool[i] for i in range(min(n_samples, len(pool)))]
    if len(samples) < 2:
        raise BadInputError(f"task {cell.task.name} has {len(samples)} sample(s); calibration needs 2",
                            "calibrate on a task with more samples")
    metrics = tuple(cell.metrics)
    with tf32_mode(cell.tf32):  # the numerics the run will use (TF32 convolutions are faster on GPUs)
        t0 = time.perf_counter()
        adapter.evaluate(bundle, samples[:1], ctx, metrics)
        first = time.perf_counter() - t0
        timed = samples[1:]
        t0, c0 = time.perf_counter(), time.process_time()
        adapter.evaluate(bundle, timed, ctx, metrics)
        per_sample = (time.perf_counter() - t0) / len(timed)
        per_sample_cpu = (time.process_time() - c0) / len(timed)
    works = _timed_work(cell, arch, timed, constants)
    units = statistics.fmean(work_units(arch, w) for w in works) if works and works[0] is not None else 0.0
    kind = device_kind(device)
    before = constants.profile(kind, profile_key(cell.model, arch))
    explanations = max(works[0].explanations, 1) if works and works[0] is not None else 1
    predicted = (None if before is None or before.seconds_per_unit is None
                 else before.overhead_s * explanations + before.seconds_per_unit * units)
    estimated_peak = estimate(cell, len(timed), device, batch_size=len(timed), forward_batch_size=forward_batch_size,
                              constants=constants, kind=kind).peak_bytes
    peak = _peak_bytes(device)
    del bundle
    gc.collect()
    import torch

    return Measurement(cell.model.name, cell.task.name, cell.method, profile_key(cell.model, arch), arch.params,
                       load_seconds, load_cpu, first, per_sample, per_sample_cpu, int(torch.get_num_threads()), len(timed),
                       explanations, units, predicted, peak, estimated_peak)


def _process_clock() -> bool:
    clock = os.environ.get("PALRP_CALIBRATE_CLOCK", "wall").strip().lower()
    if clock not in ("wall", "process"):
        raise BadInputError(f"PALRP_CALIBRATE_CLOCK={clock!r}", "use wall (default) or process")
    return clock == "process"


def fit_profiles(measurements: list[Measurement], constants: CostConstants, kind: str) -> dict[str, dict]:
    """New constants per profile from the measurements (module docstring)."""
    fitted: dict[str, dict] = {}
    by_profile: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_profile.setdefault(m.profile, []).append(m)
    for key, group in by_profile.items():
        before = constants.profile(kind, key) or constants.profile("cpu", key)
        s0 = before.seconds_per_unit if before is not None else None
        o0 = before.overhead_s if before is not None else 0.0
        slopes, overheads = [], []
        process = _process_clock()
        for m in group:
            compute_time = m.per_sample_cpu / max(m.threads, 1) if process else m.per_sample
            overhead_time = m.per_sample_cpu if process else m.per_sample
            fixed = o0 * m.explanations
            if m.units <= 0:
                overheads.append(overhead_time / m.explanations)
            elif s0 is None or s0 * m.units >= COMPUTE_DOMINATED * (fixed + s0 * m.units):
                slopes.append(max(compute_time - fixed, 0.5 * compute_time) / m.units)
            else:
                overheads.append(max(overhead_time - s0 * m.units, 0.0) / m.explanations)
        loads = [(m.load_cpu if process else m.load_seconds) / (m.params / GIGA) for m in group
                 if m.params >= MIN_LOAD_PARAMS]
        fitted[key] = {"seconds_per_unit": statistics.median(slopes) if slopes else s0,
                       "overhead_s": statistics.median(overheads) if overheads else o0,
                       "load_s_per_gparam": statistics.median(loads) if loads else
                       (before.load_s_per_gparam if before is not None else 0.0)}
    return fitted


def write_calibration(path: Path, kind: str, profiles: dict[str, dict], measurements: list[Measurement],
                      measured_on: str) -> Path:
    """Merge ``profiles`` of device ``kind`` into the user's cost file (other kinds and profiles kept)."""
    import json

    data: dict = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
    data.setdefault("version", 1)
    entry = data.setdefault("devices", {}).setdefault(kind, {})
    entry["measured_on"] = measured_on
    entry["calibrated"] = time.strftime("%Y-%m-%d %H:%M")
    entry.setdefault("profiles", {}).update(profiles)
    entry["measurements"] = [asdict(m) for m in measurements]
    write_json_atomic(path, data)
    return path


def _describe_machine(kind: str) -> str:
    import torch

    return f"{kind}, torch {torch.__version__}"


def calibrate(cells: list[Cell], devices: tuple[str, ...], runner, *, out=sys.stdout,
              constants: CostConstants | None = None) -> Path:
    """Measure the first cell of each model of ``cells`` on ``devices[0]``, write the constants, print a table."""
    from .budget import format_seconds

    constants = constants or load_constants()
    device = devices[0]
    kind = device_kind(device)
    n_samples = int(runner.max_samples) if runner.max_samples is not None else 3
    firsts: dict[str, Cell] = {}
    for cell in cells:
        firsts.setdefault(cell.model.name, cell)
    measurements = []
    for cell in firsts.values():
        log.info("calibrating %s on %s (%s, %d samples)", cell.model.name, device, cell.task.name, n_samples)
        measurements.append(measure_cell(cell, device, n_samples, constants, int(runner.forward_batch_size)))
    profiles = fit_profiles(measurements, constants, kind)
    path = write_calibration(constants.user_file, kind, profiles, measurements, _describe_machine(kind))
    print(f"calibration on {kind} ({n_samples} samples per model, the first is warm-up):", file=out)
    print(f"{'model':<20} {'task':<20} {'load':>8} {'first':>8} {'per sample':>11} {'cpu/thread':>11} "
          f"{'predicted':>10}", file=out)
    for m in measurements:
        print(f"{m.model:<20} {m.task:<20} {format_seconds(m.load_seconds):>8} {format_seconds(m.first_seconds):>8} "
              f"{m.per_sample:>10.3f}s {m.per_sample_cpu / max(m.threads, 1):>10.3f}s "
              f"{('?' if m.predicted is None else f'{m.predicted:.3f}s'):>10}", file=out)
    for key, values in profiles.items():
        s = values["seconds_per_unit"]
        print(f"profile {key}: seconds_per_unit={'?' if s is None else f'{s:.4g}'} "
              f"overhead_s={values['overhead_s']:.4g} load_s_per_gparam={values['load_s_per_gparam']:.4g}", file=out)
    print(f"written to {path}; later plans on this machine use them", file=out)
    return path
