"""What a plan costs (``mode=plan``; docs/planning.md): per cell the samples its selection rule yields, how many
the run directory already stores, and the estimated time and peak memory on the chosen devices
(:mod:`palrp_bench.planning.cost`); totals per paper task and for the experiment in device-hours; the table the
plan prints. Nothing here loads a model or writes a file.

Sample counts (docs/protocol.md section 2 selection rules, :mod:`palrp_bench.runner.selection`):

* ``selection=all``: the pool (dataset size, ``pool_size``), up to ``select_count``;
* ``correct_only`` / ``until_correct`` need one forward per candidate. The per-candidate flags computed so far
  are cached (the user cache's ``selection/``, shared by every run directory); when they already decide the
  list, its count; else the plan shows ``<=N*`` (correct_only: at most ``select_count``) or ``~N*``
  (until_correct: every sample up to the ``select_count``-th correct one), assumes the shipped
  ``assumed_accuracy`` for the count and for the candidates still to forward, and charges that selection time
  once per model and task.

``runner.max_samples`` caps every count (and, as in the runner, stops the selection once the capped list is
known); stored samples (all the cell's metrics present) are not estimated again.

Each cell is priced at the batch size its job will use (:func:`estimate_cell`), and on the devices of
``runner.devices``, or with ``runner.plan_device=<kind>`` on that device kind from a machine without it
(:func:`plan_device`; docs/planning.md "Pricing a device this machine does not have").
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..schema import Selection
from .cost import CostConstants, Estimate, estimate, format_bytes, resolve_device_kind
from .training import COMMAND, ClassifierTraining, OFFICIAL_RECIPE, price_missing_classifiers
from ..runner.devices import _CUDA_INDEX
from ..runner.plan import Cell, Job

__all__ = ["SampleCount", "CellBudget", "PlanBudget", "PlanDevice", "plan_device", "estimate_cell", "pool_size",
           "sample_count", "stored_count", "plan_budget", "format_plan", "format_totals", "format_seconds",
           "format_bytes", "too_long", "memory_problems"]


@dataclass(frozen=True)
class SampleCount:
    """``expected``: samples the estimate assumes; ``label``: what the table shows; ``pending``: a
    prediction-dependent selection not computed yet; ``candidates``: selection forwards still to run."""

    expected: int | None
    label: str
    pending: bool = False
    candidates: int = 0


def pool_size(task) -> int | None:
    """Candidates of a task in dataset order: the pool its dataset's spec gives for the task's options
    (:meth:`~palrp_bench.data.registry.DatasetSpec.pool`), capped by ``task.pool_size``; None when unknown."""
    from ..data.registry import dataset_spec

    spec = dataset_spec(task.dataset, f" (task {task.name})")
    size = spec.pool(spec.resolve_options(task.options))
    if task.pool_size is not None:
        size = task.pool_size if size is None else min(size, task.pool_size)
    return size


def cached_flags(cell: Cell, run_dir: Path) -> list[bool] | None:
    """The per-candidate flags of the cell's selection cache entry (user cache, else the run directory's), read
    only; None when there is none."""
    from ..runner.selection import cache_file_name
    from ..runner.user_cache import user_cache_dir

    name = cache_file_name(cell)
    for folder in (user_cache_dir() / "selection", Path(run_dir) / "selection"):
        try:
            return [bool(f) for f in json.loads((folder / name).read_text())["flags"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def sample_count(cell: Cell, run_dir: Path, constants: CostConstants, max_samples: int | None) -> SampleCount:
    """The samples ``cell`` will evaluate (module docstring)."""
    from ..runner.selection import _known

    task = cell.task
    pool = pool_size(task)
    rule = task.selection if isinstance(task.selection, Selection) else Selection(task.selection)
    wanted = task.select_count
    if rule == Selection.all:
        n = pool if wanted is None else (wanted if pool is None else min(pool, wanted))
        if max_samples is not None and n is not None:
            n = min(n, max_samples)
        return SampleCount(n, "?" if n is None else str(n))
    flags = cached_flags(cell, run_dir) or []
    chosen, done = _known(flags, rule, wanted, max_samples)
    if done or (pool is not None and len(flags) >= pool):
        return SampleCount(len(chosen), str(len(chosen)))
    accuracy = constants.assumed_accuracy
    # the selection stops as soon as the (capped) list is known (runner/selection.py)
    target = wanted if max_samples is None else (max_samples if wanted is None else min(wanted, max_samples))
    if rule == Selection.correct_only:
        needed = None if target is None else math.ceil(target / accuracy)
    else:
        needed = None if wanted is None else math.ceil(wanted / accuracy)
        if max_samples is not None:
            needed = max_samples if needed is None else min(needed, max_samples)
    candidates = pool if needed is None else (needed if pool is None else min(pool, needed))
    if candidates is None:
        return SampleCount(None, "?*", True, 0)
    candidates = max(candidates, len(flags))
    if rule == Selection.correct_only:
        n = math.floor(candidates * accuracy) if target is None else min(target, math.floor(candidates * accuracy))
        label = f"<={target if target is not None else candidates}*"
    else:
        n, label = candidates, f"~{candidates}*"
    if max_samples is not None and n >= max_samples:
        n, label = max_samples, f"{max_samples}*"
    return SampleCount(n, label, True, candidates - len(flags))


def stored_count(cell: Cell, run_dir: Path) -> int:
    """Samples of ``cell`` whose every metric is stored in ``run_dir`` (what a resumed run skips)."""
    from ..runner.store import stored_metrics

    directory = cell.directory(Path(run_dir))
    if not directory.is_dir():
        return 0
    wanted = set(cell.metrics)
    return sum(wanted <= metrics for metrics in stored_metrics(directory).values())


@dataclass
class CellBudget:
    """One cell of the plan: its count, what is stored, the estimate of the remaining samples and (for the first
    cell of each model and task) the pending selection's forwards."""

    cell: Cell
    count: SampleCount
    stored: int
    estimate: Estimate
    selection_seconds: float | None = 0.0
    n_jobs: int = 1
    #: why its explanations cannot fit the device even at batch 1, with the setting that would (:func:`too_long`)
    refusal: "Problem | None" = None

    @property
    def remaining(self) -> int | None:
        return None if self.count.expected is None else max(self.count.expected - self.stored, 0)

    @property
    def seconds(self) -> float | None:
        if self.estimate.seconds is None or self.selection_seconds is None:
            return None
        return self.estimate.seconds + self.selection_seconds


@dataclass(frozen=True)
class PlanDevice:
    """A device kind a plan is priced on from a machine without it (``runner.plan_device``): the kind, the name
    the plan prints, its memory (None: not known) and how many such devices run the jobs, one worker each."""

    kind: str
    name: str
    memory_bytes: float | None
    n_workers: int = 1

    @property
    def devices(self) -> tuple[str, ...]:
        """Stand-in device strings, one per worker (nothing is ever placed on them)."""
        if self.kind.startswith("cuda"):
            return tuple(f"cuda:{k}" for k in range(self.n_workers))
        return ("cpu",) * self.n_workers




def plan_device(runner, constants: CostConstants) -> PlanDevice | None:
    """``runner.plan_device`` resolved (None when unset): its kind (:func:`~palrp_bench.planning.cost.
    resolve_device_kind`: a short name or a device kind with constants, else one line listing those), its memory
    from the constants, and one worker per GPU index in ``runner.devices`` (``[0,1,2,3]``: four), else one
    (``[auto]`` cannot know how many the other machine has). Touches no device."""
    value = getattr(runner, "plan_device", None)
    if value is None or not str(value).strip():
        return None
    kind = resolve_device_kind(str(value), constants)
    entry = constants.device_entry(kind)
    indices = [d for d in (getattr(runner, "devices", None) or []) if _CUDA_INDEX.match(str(d).strip().lower())]
    memory = entry.get("memory_bytes")
    return PlanDevice(kind, str(entry.get("short_name") or kind), None if memory is None else float(memory),
                      max(1, len(indices)))


@dataclass
class PlanBudget:
    """Every cell's budget plus what the whole invocation adds: model loads (once per model and worker) and the
    fixed start-up and merge of a run. ``plan_device``: the device kind it was priced on from a machine without
    it (None: this machine's ``devices``); ``training``: the classifiers whose finetuned weights are missing, priced
    on the same device kind (:mod:`palrp_bench.planning.training`)."""

    cells: list[CellBudget]
    devices: tuple[str, ...]
    device_kind: str
    origin: str
    load_seconds: float | None
    run_overhead_s: float
    merge_seconds: float
    memory_bytes: float | None
    assumed_accuracy: float = 0.9
    plan_device: PlanDevice | None = None
    training: list[ClassifierTraining] = field(default_factory=list)

    @property
    def n_workers(self) -> int:
        return len(self.devices)

    def device_seconds(self, cells: list[CellBudget] | None = None) -> float | None:
        """Sum of the cells' seconds (None if any is unknown)."""
        cells = self.cells if cells is None else cells
        values = [c.seconds for c in cells]
        return None if any(v is None for v in values) else float(sum(values))

    def total_device_seconds(self) -> float | None:
        cells = self.device_seconds()
        return None if cells is None or self.load_seconds is None else cells + self.load_seconds

    def wall_seconds(self) -> float | None:
        """A lower bound of the wall-clock time: perfectly balanced workers, plus start-up and merge."""
        total = self.total_device_seconds()
        return None if total is None else total / max(1, self.n_workers) + self.run_overhead_s + self.merge_seconds


def _machine_memory(devices: tuple[str, ...]) -> float | None:
    """Bytes of the first device (GPU memory, or the machine's RAM)."""
    import os

    device = devices[0] if devices else "cpu"
    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.get_device_properties(int(device.partition(":")[2] or 0)).total_memory)
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _run_constant(constants: CostConstants, kind: str, key: str) -> float:
    """A per-run constant (start-up, merge per cell) of ``kind``, else the shipped CPU one: both are CPU work (imports,
    bootstrap intervals) on any machine."""
    for candidate in (kind, "cpu"):
        value = (constants.devices.get(candidate) or {}).get(key)
        if value is not None:
            return float(value)
    return 0.0


def _batch_candidates(cell: Cell, device: str, requested, virtual: bool) -> list[int]:
    """The batch sizes a job of ``cell`` may end up with, in the order :class:`~palrp_bench.runner.batching.
    BatchSizer` tries them: a fixed ``runner.batch_size``; for ``auto`` the size remembered for this model, task and
    device, else the CPU's fixed size, else on a GPU the automatic start halved down to 1. On a device this machine
    does not have (``virtual``) nothing is remembered and no device is queried."""
    from ..runner.batching import AUTO, CPU_AUTO_BATCH_SIZE, CUDA_AUTO_START, BatchSizer

    if requested != AUTO:
        return [int(requested)]
    cuda = device.startswith("cuda")
    if virtual:
        start, known = (CUDA_AUTO_START if cuda else CPU_AUTO_BATCH_SIZE), False
    else:
        sizer = BatchSizer(AUTO, device, cell)
        start, known = sizer.size, sizer.remembered
    if known or not cuda:
        return [start]
    sizes = [start]
    while sizes[-1] > 1:
        sizes.append(max(1, sizes[-1] // 2))
    return sizes


def _checkpoint(runner) -> str:
    from ..lrp.recompute import check_checkpoint

    return check_checkpoint(getattr(runner, "checkpoint", None))


def estimate_cell(cell: Cell, n: int, device: str, runner, constants: CostConstants, kind: str,
                  memory: float | None, virtual: bool = False) -> Estimate:
    """The cell's estimate at the batch size a job will use (:func:`_batch_candidates`) with ``runner.checkpoint``:
    the first candidate whose estimated peak fits ``memory`` (the last when none does; a fixed or remembered size
    is taken as it is)."""
    from ..runner.batching import check_batch_size

    requested = check_batch_size(runner.batch_size)
    for size in _batch_candidates(cell, device, requested, virtual):
        est = estimate(cell, n, device, batch_size=size, forward_batch_size=int(runner.forward_batch_size),
                       constants=constants, kind=kind, checkpoint=_checkpoint(runner))
        if memory is None or est.peak_bytes is None or est.peak_bytes <= memory:
            break
    return est


def too_long(cell: Cell, est: Estimate, device: str, runner, constants: CostConstants, kind: str,
             memory: float | None):
    """A :class:`~palrp_bench.planning.preflight.Problem` when the cell does not fit ``memory`` even at batch 1
    (its inputs are too long for the device as configured), naming ``runner.checkpoint=layers`` where that would
    fit; None when it fits at some batch size (the totals then suggest a smaller one)."""
    from .preflight import Problem

    if memory is None or est.peak_bytes is None or est.peak_bytes <= memory or est.work is None:
        return None
    checkpoint = _checkpoint(runner)

    def at_batch_one(mode: str) -> float:
        return estimate(cell, 1, device, batch_size=1, forward_batch_size=int(runner.forward_batch_size),
                        constants=constants, kind=kind, checkpoint=mode).peak_bytes

    need = at_batch_one(checkpoint)
    if need <= memory:
        return None
    longest = max(est.work.explain_tokens, est.work.longest_tokens)  # what peak_memory sizes a batch for
    tokens = f"{round(longest)} tokens" if est.work.explanations else "its inputs"
    item = (f"{cell.key}: {format_bytes(need)} at batch 1 for {tokens} (runner.checkpoint={checkpoint}), more "
            f"than the {format_bytes(memory)} of the device")
    if checkpoint == "none" and est.work.explanations:
        layers = at_batch_one("layers")
        if layers <= memory:
            return Problem(item, f"set runner.checkpoint=layers ({format_bytes(layers)} at batch 1: each layer "
                                 "recomputed in the backward)")
        item += f"; {format_bytes(layers)} with runner.checkpoint=layers"
    return Problem(item, "explain shorter inputs, lower runner.forward_batch_size, or use a device with more "
                         "memory (runner.plan_device)")


def memory_problems(budget: "PlanBudget") -> list:
    """The cells that cannot fit their device at any batch size (:func:`too_long`), as preflight problems."""
    return [c.refusal for c in budget.cells if c.refusal is not None]


def plan_budget(cells: list[Cell], jobs: list[Job], run_dir: Path, devices: tuple[str, ...], runner,
                constants: CostConstants, priced_on: PlanDevice | None = None) -> PlanBudget:
    """The budget of ``cells`` (and their ``jobs``) on ``devices`` with the ``runner`` settings, or on
    ``priced_on`` (its kind, memory and workers, without touching this machine's devices)."""
    from ..numerics import device_kind

    if priced_on is not None:
        devices, kind, memory = priced_on.devices, priced_on.kind, priced_on.memory_bytes
    else:
        kind, memory = device_kind(devices[0] if devices else "cpu", cpu_detail=True), _machine_memory(devices)
    device = devices[0] if devices else "cpu"
    jobs_per_cell: dict[str, int] = {}
    for job in jobs:
        jobs_per_cell[job.cell.key] = jobs_per_cell.get(job.cell.key, 0) + 1
    budgets: list[CellBudget] = []
    selection_charged: set[tuple[str, str]] = set()
    load_per_model: dict[str, float | None] = {}
    jobs_per_model: dict[str, int] = {}
    origins: list[str] = []
    for cell in sorted(cells, key=lambda c: (c.model.name, c.task.name)):
        if cell.key not in jobs_per_cell:
            continue
        count = sample_count(cell, run_dir, constants, runner.max_samples)
        stored = stored_count(cell, run_dir)
        remaining = 0 if count.expected is None else max(count.expected - stored, 0)
        est = estimate_cell(cell, remaining, device, runner, constants, kind, memory, priced_on is not None)
        if count.expected is None:
            est.seconds = None
            est.note = est.note or f"size of the {cell.task.dataset} pool unknown (set task.pool_size)"
        selection = 0.0
        group = (cell.model.name, cell.task.name)
        if count.candidates and group not in selection_charged:
            selection_charged.add(group)
            selection = (None if est.select_per_candidate is None
                         else count.candidates * est.select_per_candidate)
        n_jobs = jobs_per_cell[cell.key]
        refusal = too_long(cell, est, device, runner, constants, kind, memory) if remaining else None
        budgets.append(CellBudget(cell, count, stored, est, selection, n_jobs, refusal))
        if est.origin and est.origin not in origins:
            origins.append(est.origin)
        if remaining or count.candidates:  # a job with work loads its model (once per worker: jobs are grouped)
            load_per_model[cell.model.name] = est.load_seconds
            jobs_per_model[cell.model.name] = jobs_per_model.get(cell.model.name, 0) + n_jobs
    loads = [None if seconds is None else seconds * min(len(devices), jobs_per_model[name])
             for name, seconds in load_per_model.items()]
    load_seconds = None if any(v is None for v in loads) else float(sum(loads))
    run_overhead = _run_constant(constants, kind, "run_overhead_s")
    merge = _run_constant(constants, kind, "merge_s_per_cell") * len(budgets)
    training = price_missing_classifiers([b.cell for b in budgets], kind, memory, constants)
    return PlanBudget(budgets, tuple(devices), kind, "; ".join(origins), load_seconds, run_overhead, merge, memory,
                      constants.assumed_accuracy, priced_on, training)


# ------------------------------------------------------------------------------------------------ printing
def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 100 else f"{hours:,.0f} h"


def _hours(seconds: float | None) -> str:
    """Device-hours with the precision the number deserves."""
    if seconds is None:
        return "?"
    hours = seconds / 3600
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.1f}" if hours >= 0.95 else f"{hours:.2g}"


def _short_devices(devices: tuple[str, ...]) -> str:
    if len(set(devices)) == 1:
        return devices[0] if len(devices) == 1 else f"{devices[0]} x{len(devices)}"
    return ",".join(devices)


def format_plan(budget: PlanBudget, experiment=None, problems: list | None = None,
                n_jobs: int | None = None) -> str:
    """The plan as printed by ``palrp-bench mode=plan`` (at most ~100 columns)."""
    from .preflight import format_problems

    lines = [] if experiment is None else [f"experiment {experiment.name}: {experiment.description}"]
    n_jobs = n_jobs if n_jobs is not None else sum(c.n_jobs for c in budget.cells)
    workers = f"{budget.n_workers} worker{'s' if budget.n_workers != 1 else ''}"
    if budget.plan_device is None:
        lines.append(f"{len(budget.cells)} cell(s), {n_jobs} job(s) on {_short_devices(budget.devices)} "
                     f"({workers}); device kind {budget.device_kind}")
    else:
        lines.append(f"{len(budget.cells)} cell(s), {n_jobs} job(s) on {budget.n_workers} x "
                     f"{budget.plan_device.name} ({workers}); priced for device kind {budget.device_kind} "
                     "(runner.plan_device), not on this machine")
    lines.append(f"cost constants: {budget.origin or 'none'}")
    header = ("model", "task", "method", "samples", "stored", "batch", "time", "peak mem")
    rows = [(c.cell.model.name, c.cell.task.name, c.cell.method, c.count.label, str(c.stored),
             str(c.estimate.batch_size),
             format_seconds(c.seconds) if c.seconds is not None
             else ("uncal." if c.estimate.note.startswith("uncalibrated") else "?"),
             format_bytes(c.estimate.peak_bytes)) for c in budget.cells]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    align = ["<", "<", "<", ">", ">", ">", ">", ">"]

    def line(values) -> str:
        return "  ".join(f"{str(v):{a}{w}}" for v, a, w in zip(values, align, widths)).rstrip()

    lines += ["", line(header)] + [line(r) for r in rows]
    if any(c.n_jobs > 1 for c in budget.cells):
        lines.append(f"(each cell is split into {max(c.n_jobs for c in budget.cells)} shard jobs)")
    pending = [c for c in budget.cells if c.count.pending]
    if pending:
        rules = sorted({(c.cell.task.name, getattr(c.cell.task.selection, "value", c.cell.task.selection),
                         c.cell.task.select_count) for c in pending})
        described = "; ".join(f"{t} {r}" + ("" if n is None else f" {n}") for t, r, n in rules)
        selection = sum(c.selection_seconds or 0.0 for c in pending)
        lines.append(f"* selection pending: {described}")
        lines.append(f"  counts assume accuracy {budget.assumed_accuracy:g}; the selection forwards "
                     f"({format_seconds(selection)}) count once per model and task")
    notes = list(dict.fromkeys(c.estimate.note for c in budget.cells if c.estimate.note))
    lines += [f"note: {n}" for n in notes]
    lines.append("")
    lines += format_totals(budget)
    lines += format_training(budget)
    if problems:
        lines += ["", f"missing ({len(problems)}): a run would stop before loading anything; fix each, then run "
                      "again"]
        lines += format_problems(problems)
    refused = memory_problems(budget)
    if refused:
        lines += ["", f"does not fit ({len(refused)}): these cells need more memory than the device has at any "
                      "batch size"]
        lines += format_problems(refused)
    if not problems and not refused:
        lines += ["", "nothing missing: `palrp-bench` with the same arguments runs this plan"]
    return "\n".join(_wrap(line) for line in lines)


def format_totals(budget: PlanBudget) -> list[str]:
    """The plan's totals: device time per task, device-hours of the whole plan, the largest peak memory (also
    printed when a run stops on missing pieces, so the user sees what the fixed run will cost)."""
    lines: list[str] = []
    groups: dict[str, list[CellBudget]] = {}
    for c in budget.cells:
        groups.setdefault(c.cell.task.paper_task or c.cell.task.name, []).append(c)
    unit = budget.plan_device.name if budget.plan_device is not None else budget.device_kind.split("/")[0]
    per_task = ", ".join(f"{name} {format_seconds(budget.device_seconds(cs))}" for name, cs in groups.items())
    lines.append(f"{unit} time per task: {per_task}; model loads {format_seconds(budget.load_seconds)}")
    total = budget.total_device_seconds()
    workers = f"{budget.n_workers} worker{'s' if budget.n_workers != 1 else ''}"
    lines.append(f"total: {_hours(total)} device-hours ({format_seconds(total)} of {unit} time); wall-clock at "
                 f"best {format_seconds(budget.wall_seconds())} on {workers}")
    peaks = [c.estimate.peak_bytes for c in budget.cells if c.estimate.peak_bytes is not None]
    if peaks:
        memory = budget.memory_bytes
        where = unit if budget.plan_device is not None else budget.devices[0]
        fits = "" if memory is None else f" of {format_bytes(memory)} on {where}"
        lines.append(f"largest peak memory: {format_bytes(max(peaks))}{fits}")
        if memory is not None and max(peaks) > memory:
            lines.append("  more than the device has: lower runner.batch_size / runner.forward_batch_size")
    lines += _training_total(budget, total)
    return [part for line in lines for part in _wrap(line).split("\n")]


# ------------------------------------------------------------------------- finetuning the missing classifiers
def _training_seconds(budget: PlanBudget) -> float | None:
    values = [t.estimate.device_seconds if t.estimate is not None else None for t in budget.training]
    return None if any(v is None for v in values) else float(sum(values))


def _training_total(budget: PlanBudget, evaluation: float | None) -> list[str]:
    """The ``training:`` line of the totals: device-hours of the missing classifiers' finetuning, apart from the
    evaluation's, and both together."""
    if not budget.training:
        return []
    seconds = _training_seconds(budget)
    both = None if seconds is None or evaluation is None else seconds + evaluation
    n = len(budget.training)
    return [f"training: {_hours(seconds)} device-hours, {n} missing classifier{'s' if n != 1 else ''}; with the "
            f"evaluation {_hours(both)} device-hours"]


def format_training(budget: PlanBudget) -> list[str]:
    """One line per missing classifier: device-hours of its finetuning on the plan's device kind (the cheapest
    setting that fits, else the recipe as is), peak memory per device, and what fits (docs/planning.md
    "Finetuning the classifiers")."""
    if not budget.training:
        return []
    recipe = OFFICIAL_RECIPE
    header = ("classifier", "hours", "peak mem", "verdict")
    rows = [(t.model, "?" if t.estimate is None else f"{_hours(t.estimate.device_seconds)} h",
             "?" if t.estimate is None else format_bytes(t.estimate.memory.total),
             t.verdict + (" (4-bit: only the head trains)" if t.head_only else "")) for t in budget.training]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header) - 1)]

    def line(values) -> str:
        return "  ".join([f"{values[0]:<{widths[0]}}", f"{values[1]:>{widths[1]}}", f"{values[2]:>{widths[2]}}",
                          values[3]]).rstrip()

    return (["", f"finetuning ({COMMAND}, {recipe.train_rows} rows x {recipe.epochs} epochs) on {budget.device_kind}:",
             line(header)] + [line(r) for r in rows]
            + ["  hours: device-hours (on n GPUs, wall-clock hours / n); peak memory: per device"])


def _wrap(line: str) -> str:
    """Long prose lines wrapped at :data:`~palrp_bench.planning.preflight.WIDTH` (table rows are shorter)."""
    import textwrap

    from .preflight import WIDTH

    if len(line) <= WIDTH:
        return line
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return "\n".join(textwrap.wrap(line, WIDTH, subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False))
