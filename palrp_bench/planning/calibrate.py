"""``mode=calibrate``: measure the cost-model constants of the selected models on this machine
(docs/planning.md "Calibration").

Per model of the selected cells (its first cell): load it on the first device (timed: the load constant), take
the first samples of the task's pool and evaluate them as a job does, without selection and without storing
anything:

1. the first sample alone: a warm-up (reported, not used);
2. the next sample alone (batch 1, timed), when the run's batch size is above 1 and at least two samples are left
   for step 3;
3. the rest in batches of the size the run will use (timed), longest first as a job orders them:
   ``runner.batch_size``, or for ``auto`` the size :class:`~palrp_bench.runner.batching.BatchSizer` starts from
   (the size remembered for this model, task and device, else 64 on a GPU and 8 on the CPU), halved on
   out-of-memory as the runner does (the timing then restarts at the smaller size) and remembered once a full
   batch fitted.

By default ``b + 2`` samples (one full batch of ``b``; 3 at batch 1); ``runner.max_samples`` sets the number. The
units of each timed batch come from its real shapes (text: the batch's padded width explained, each sample's
own real tokens forwarded; the ViT's patches), and the two timings are two equations of the cost model
(:func:`palrp_bench.planning.cost.batch_seconds`)::

    alone:    t_1 = a + o * E + s * u_1
    batched:  T   = k * a + n * (o * E) + s * U            (n samples in k batches, U units in all)

solved for the per-batch overhead ``a`` and for ``s`` when the constants before calibration say compute
dominates (large models), else for the per-explanation overhead ``o`` (the embedded tiny models); the other of
``s`` / ``o`` keeps its value from before, and so does ``a`` without a batch-1 timing (a run at batch 1, or too
few samples). A negative ``a`` (noise) is taken as 0. Times are wall-clock seconds; on a machine shared with
other work set ``PALRP_CALIBRATE_CLOCK=process`` (and ``OMP_WAIT_POLICY=PASSIVE``, so waiting threads burn no CPU):
compute is then timed as the process's CPU time divided by torch's threads, and overhead as its CPU time, which
estimates the time on an idle machine (how the shipped CPU constants were measured, docs/planning.md). ``r``
(explanation cost in forwards) stays the shipped one. Per profile the median over its models is written, with
the batch size it was measured at, to the user's cache file (:func:`palrp_bench.planning.cost.user_cost_path`,
``~/.cache/palrp-bench/cost.json`` by default) under this device kind (with a GPU's memory, so that
``runner.plan_device`` can price it from elsewhere), next to the raw measurements; other device kinds and
profiles in the file are kept. Later plans on this machine use them. The batched timing is also split by stage
as a job's ``timings`` split it (:mod:`palrp_bench.stages`: data wait, explanations, forwards, metrics; nothing is
written), printed per model and kept in the measurements (``stages``).
"""
from __future__ import annotations

import gc
import logging
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..atomic_io import write_json_atomic
from ..errors import BadInputError
from ..numerics import device_kind, tf32_mode
from ..stages import STAGES, StageClock, measuring
from .cost import (GIGA, Architecture, CostConstants, Work, architecture_of, batch_seconds, estimate,
                   load_constants, profile_key, sample_work, work_units)
from ..runner.plan import Cell

__all__ = ["Measurement", "measure_cell", "fit_profiles", "write_calibration", "calibrate", "default_samples"]

log = logging.getLogger("palrp_bench.runner")

#: share of the predicted time that compute must have for a measurement to calibrate ``s`` (else ``o``)
COMPUTE_DOMINATED = 0.5
#: models smaller than this calibrate no load constant (their load time is start-up, not weights)
MIN_LOAD_PARAMS = 100_000_000
#: the batched timing separates the per-batch overhead from the batch-1 timing only when its samples per batch
#: exceed the batch-1 timing's by this share (else ``a`` keeps its value from before)
MIN_BATCH_CONTRAST = 0.1


@dataclass
class Measurement:
    """One model's calibration run: its profile, load time, first (warm-up) seconds; the batched timing
    (``per_sample`` seconds and ``units`` per sample of ``n_timed`` samples in ``n_batches`` batches of
    ``batch_size``); the batch-1 timing (``alone_*``, None when not taken); what the constants before calibration
    predicted for the batched samples, and the peak memory seen (CUDA: allocated; CPU: the process's peak RSS
    so far)."""

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
    batch_size: int = 1
    n_batches: int = 1
    alone_seconds: float | None = None
    alone_cpu: float | None = None
    alone_units: float | None = None
    #: seconds per sample of the batched timing in each stage of a job's evaluation (``<stage>_s``,
    #: :mod:`palrp_bench.stages`: what a job's ``timings`` records)
    stages: dict = field(default_factory=dict)


def _batch_work(cell: Cell, arch: Architecture, batch: list, constants: CostConstants) -> list[Work | None]:
    """The work of each sample of one batch from its real shape where the task kind says it varies
    (:meth:`~palrp_bench.evaluation.tasks.base.TaskAdapter.batch_tokens`: text, the batch's padded width explained
    and each sample's real tokens forwarded); otherwise the cell's fixed work."""
    from ..evaluation.tasks import TASK_KINDS

    base = sample_work(cell, arch, constants)
    tokens = None if base is None else TASK_KINDS.lookup(cell.task.kind)().batch_tokens(batch)
    if tokens is None:
        return [base] * len(batch)
    return [replace(base, explanations=1, explain_tokens=explained, forward_tokens=forwarded, decoder_tokens=0.0)
            for explained, forwarded in tokens]


def _units(cell: Cell, arch: Architecture, batches: list[list], constants: CostConstants) -> tuple[float, int]:
    """Units of every sample of ``batches`` together, and the explanations per sample."""
    works = [w for batch in batches for w in _batch_work(cell, arch, batch, constants)]
    if not works or works[0] is None:
        return 0.0, 1
    return float(sum(work_units(arch, w) for w in works)), max(works[0].explanations, 1)


def _peak_bytes(device: str) -> float | None:
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.max_memory_allocated(device))
    try:
        import resource

        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024.0  # kB on Linux
    except (ImportError, OSError):
        return None


def default_samples(batch_size: int) -> int:
    """Samples a calibration takes unless ``runner.max_samples`` says otherwise: a warm-up, one sample alone and
    one full batch (3 at batch 1: a warm-up and two timed)."""
    return 3 if batch_size <= 1 else batch_size + 2


def _timed_batches(adapter, bundle, ctx, metrics, samples: list, sizer
                   ) -> tuple[list[list], float, float, dict[str, float]]:
    """Evaluate ``samples`` in batches of ``sizer.size`` as a job does (longest first, halved on out-of-memory
    under ``auto``: the timing restarts at the smaller size); the batches, their wall and CPU seconds and the
    seconds of each stage of the job's evaluation (:mod:`palrp_bench.stages`, as a job's ``timings`` has them)."""
    from ..runner.batching import length_sorted

    ordered = length_sorted(samples, adapter)
    while True:
        batches: list[list] = []
        clock = StageClock(ctx.device)
        t0, c0 = clock.now(), time.process_time()
        try:
            with measuring(clock):
                start = 0
                while start < len(ordered):
                    batch = ordered[start:start + sizer.size]
                    adapter.evaluate(bundle, list(batch), ctx, metrics)
                    if len(batch) == sizer.size:
                        sizer.worked()  # only a full batch shows the size fits
                    batches.append(batch)
                    start += len(batch)
        except Exception as err:  # noqa: BLE001 - only out-of-memory of batch_size=auto is retried
            if sizer.shrink(err):
                continue
            raise
        return batches, clock.now() - t0, time.process_time() - c0, dict(clock.seconds)


def measure_cell(cell: Cell, device: str, n_samples: int | None, constants: CostConstants,
                 forward_batch_size: int = 64, batch_size: int | str = 1) -> Measurement:
    """Load the cell's model, evaluate its first samples (module docstring: a warm-up, one alone, the rest in
    batches of ``batch_size`` as the run would; ``n_samples`` None: :func:`default_samples`), return the
    timings."""
    from ..evaluation.tasks import task_adapter
    from ..runner.batching import BatchSizer, check_batch_size
    from ..runner.bundles import load_bundle

    if n_samples is not None and n_samples < 2:
        raise BadInputError(f"calibration needs at least 2 samples per model, got {n_samples}",
                            "leave runner.max_samples unset (one warm-up, one alone and a full batch) or set it "
                            "to 2 or more")
    arch = architecture_of(cell.model, constants)
    if arch is None:
        raise BadInputError(f"architecture of {cell.model.name} unknown", "set model.base_model=<hub id>")
    sizer = BatchSizer(check_batch_size(batch_size), device, cell)
    n_samples = default_samples(sizer.size) if n_samples is None else int(n_samples)
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
    alone = alone_cpu = alone_units = None
    with tf32_mode(cell.tf32):  # the numerics the run will use (TF32 convolutions are faster on GPUs)
        t0 = time.perf_counter()
        adapter.evaluate(bundle, samples[:1], ctx, metrics)
        first = time.perf_counter() - t0
        timed = samples[1:]
        if sizer.size > 1 and len(timed) >= 3:
            t0, c0 = time.perf_counter(), time.process_time()
            adapter.evaluate(bundle, timed[:1], ctx, metrics)
            alone, alone_cpu = time.perf_counter() - t0, time.process_time() - c0
            alone_units = _units(cell, arch, [timed[:1]], constants)[0]
            timed = timed[1:]
        batches, wall, cpu, stages = _timed_batches(adapter, bundle, ctx, metrics, timed, sizer)
    total_units, explanations = _units(cell, arch, batches, constants)
    units = total_units / len(timed)
    kind = device_kind(device, cpu_detail=True)
    before = constants.profile(kind, profile_key(cell.model, arch))
    predicted = (None if before is None or before.seconds_per_unit is None
                 else batch_seconds(before, explanations, units, len(timed), sizer.size) / len(timed))
    estimated_peak = estimate(cell, len(timed), device, batch_size=sizer.size, forward_batch_size=forward_batch_size,
                              constants=constants, kind=kind).peak_bytes
    peak = _peak_bytes(device)
    del bundle
    gc.collect()
    import torch

    return Measurement(cell.model.name, cell.task.name, cell.method, profile_key(cell.model, arch), arch.params,
                       load_seconds, load_cpu, first, wall / len(timed), cpu / len(timed),
                       int(torch.get_num_threads()), len(timed), explanations, units, predicted, peak, estimated_peak,
                       sizer.size, len(batches), alone, alone_cpu, alone_units,
                       {f"{name}_s": value / len(timed) for name, value in stages.items()})


def _process_clock() -> bool:
    clock = os.environ.get("PALRP_CALIBRATE_CLOCK", "wall").strip().lower()
    if clock not in ("wall", "process"):
        raise BadInputError(f"PALRP_CALIBRATE_CLOCK={clock!r}", "use wall (default) or process")
    return clock == "process"


def _fit_one(rows: list[tuple[float, float, float, float]], a_before: float, floor_share: float
             ) -> tuple[float, float]:
    """``(a, x)`` of ``y = a * k + x * c`` from rows ``(k batches, c coefficient of x, y seconds less the known
    terms, t seconds)``: both from two rows whose samples per batch differ enough, else ``a = a_before`` and ``x``
    from the totals; ``x`` at least ``floor_share`` of the raw seconds per coefficient."""
    a = None
    if len(rows) == 2:
        (k1, c1, y1, _), (k2, c2, y2, _) = rows
        det = k1 * c2 - k2 * c1
        if abs(det) > MIN_BATCH_CONTRAST * max(abs(k1 * c2), abs(k2 * c1)):
            a, x = (y1 * c2 - y2 * c1) / det, (k1 * y2 - k2 * y1) / det
            if a >= 0 and x > 0:
                return a, x
            a = max(a, 0.0)
    a = a_before if a is None else a
    k, c, y, t = (sum(r[i] for r in rows) for i in range(4))
    return a, max(y - a * k, floor_share * t) / c


def fit_profiles(measurements: list[Measurement], constants: CostConstants, kind: str) -> dict[str, dict]:
    """New constants per profile from the measurements (module docstring)."""
    fitted: dict[str, dict] = {}
    by_profile: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_profile.setdefault(m.profile, []).append(m)
    process = _process_clock()
    for key, group in by_profile.items():
        before = constants.profile(kind, key) or constants.profile("cpu", key)
        s0 = before.seconds_per_unit if before is not None else None
        o0 = before.overhead_s if before is not None else 0.0
        a0 = before.batch_overhead_s if before is not None else 0.0
        slopes, overheads, batch_overheads = [], [], []
        for m in group:
            e = m.explanations
            compute = m.units > 0 and (s0 is None or s0 * m.units >= COMPUTE_DOMINATED * (o0 * e + s0 * m.units))
            # process clock: compute as CPU time per thread, overhead as CPU time
            per_cpu_second = (1.0 / max(m.threads, 1) if compute else 1.0) if process else None
            # (batches, samples, units, seconds) of the batched timing, then of the batch-1 one
            timings = [(m.n_batches, m.n_timed, m.units * m.n_timed,
                        (m.per_sample if per_cpu_second is None else m.per_sample_cpu * per_cpu_second) * m.n_timed)]
            if m.alone_seconds is not None and m.alone_units is not None:
                alone = (m.alone_seconds if per_cpu_second is None
                         else (m.alone_cpu if m.alone_cpu is not None else m.alone_seconds) * per_cpu_second)
                timings.append((1, 1, m.alone_units, alone))
            if compute:
                rows = [(k, u, t - o0 * e * n, t) for k, n, u, t in timings]
                a, x = _fit_one(rows, a0, 0.5)
                slopes.append(x)
            else:
                rows = [(k, e * n, t - (s0 or 0.0) * u, t) for k, n, u, t in timings]
                a, x = _fit_one(rows, a0, 0.0)
                overheads.append(x)
            batch_overheads.append(a)
        loads = [(m.load_cpu if process else m.load_seconds) / (m.params / GIGA) for m in group
                 if m.params >= MIN_LOAD_PARAMS]
        fitted[key] = {"seconds_per_unit": statistics.median(slopes) if slopes else s0,
                       "overhead_s": statistics.median(overheads) if overheads else o0,
                       "batch_overhead_s": statistics.median(batch_overheads),
                       "load_s_per_gparam": statistics.median(loads) if loads else
                       (before.load_s_per_gparam if before is not None else 0.0),
                       "batch_size": statistics.median_low(m.batch_size for m in group)}
    return fitted


def write_calibration(path: Path, kind: str, profiles: dict[str, dict], measurements: list[Measurement],
                      measured_on: str, memory_bytes: float | None = None) -> Path:
    """Merge ``profiles`` of device ``kind`` into the user's cost file (other kinds and profiles kept), with the
    device's memory when given (what ``runner.plan_device`` judges peaks against)."""
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
    if memory_bytes:
        entry["memory_bytes"] = float(memory_bytes)
    entry.setdefault("profiles", {}).update(profiles)
    entry["measurements"] = [asdict(m) for m in measurements]
    write_json_atomic(path, data)
    return path


def _describe_machine(kind: str) -> str:
    import torch

    return f"{kind}, torch {torch.__version__}"


def _device_memory(device: str) -> float | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return float(torch.cuda.get_device_properties(torch.device(device)).total_memory)


def calibrate(cells: list[Cell], devices: tuple[str, ...], runner, *, out=sys.stdout,
              constants: CostConstants | None = None) -> Path:
    """Measure the first cell of each model of ``cells`` on ``devices[0]`` at ``runner.batch_size`` (module
    docstring), write the constants, print a table."""
    from .budget import format_seconds

    constants = constants or load_constants()
    device = devices[0]
    kind = device_kind(device, cpu_detail=True)
    n_samples = int(runner.max_samples) if runner.max_samples is not None else None
    firsts: dict[str, Cell] = {}
    for cell in cells:
        firsts.setdefault(cell.model.name, cell)
    measurements = []
    for cell in firsts.values():
        log.info("calibrating %s on %s (%s, batch size %s, %s samples)", cell.model.name, device, cell.task.name,
                 runner.batch_size, "default" if n_samples is None else n_samples)
        measurements.append(measure_cell(cell, device, n_samples, constants, int(runner.forward_batch_size),
                                         runner.batch_size))
    profiles = fit_profiles(measurements, constants, kind)
    path = write_calibration(constants.user_file, kind, profiles, measurements, _describe_machine(kind),
                             _device_memory(device))
    print(f"calibration on {kind} (per model: a warm-up sample, one sample alone, then batches of the run's size):",
          file=out)
    print(f"{'model':<20} {'task':<16} {'load':>8} {'first':>8} {'alone':>8} {'batch':>5} {'per sample':>11} "
          f"{'cpu/thread':>11} {'predicted':>10}", file=out)
    for m in measurements:
        alone = "-" if m.alone_seconds is None else f"{m.alone_seconds:.3f}s"
        print(f"{m.model:<20} {m.task:<16} {format_seconds(m.load_seconds):>8} {format_seconds(m.first_seconds):>8} "
              f"{alone:>8} {m.batch_size:>5} {m.per_sample:>10.3f}s {m.per_sample_cpu / max(m.threads, 1):>10.3f}s "
              f"{('?' if m.predicted is None else f'{m.predicted:.3f}s'):>10}", file=out)
    for m in measurements:  # where the batched timing's time went, as a job's timings split it
        split = ", ".join(f"{name.replace('_', ' ')} {m.stages.get(f'{name}_s', 0.0):.3f}s" for name in STAGES)
        print(f"{m.model:<20} per sample: {split}", file=out)
    for key, values in profiles.items():
        s = values["seconds_per_unit"]
        print(f"profile {key}: seconds_per_unit={'?' if s is None else f'{s:.4g}'} "
              f"overhead_s={values['overhead_s']:.4g} batch_overhead_s={values['batch_overhead_s']:.4g} "
              f"load_s_per_gparam={values['load_s_per_gparam']:.4g} (batch {values['batch_size']})", file=out)
    print(f"written to {path}; later plans on this machine use them", file=out)
    return path
