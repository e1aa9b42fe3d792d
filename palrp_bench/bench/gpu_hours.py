"""Each paper table's projected hours on this device next to its arithmetic floor and the goals for one H100
(docs/rehearsal.md "Hours per table against the goals").

    python scripts/bench_gpu.py                        # on a CUDA machine: every target that prices a table
    python scripts/bench_gpu.py --only llama3_8b_mcqa deit_tiny_imagenet
    python scripts/bench_gpu.py --device cpu --samples 4 --targets deit_tiny_imagenet_seg    # a dry run on the CPU

Every target of ``scripts/rehearse.py`` that prices a paper table runs through the command line as the rehearsal
runs it (:func:`rehearse.run_target`: random weights at full size, data in the real formats, ``method=pa_lrp``),
with ``--samples`` samples (default 160 on CUDA, batch size ``auto``). The first batch (CUDA context, kernel
loading and autotuning, the fused stabilisers' compilation, the allocator's growth) is left out: the time per
sample is the evaluation time of the other batches over their samples (the job's ``timings``: ``total_s`` less
``warmup_s``, ``runner/execute.py``), so at least two batches must run (with ``auto`` on an H100, 64 per batch: 160
samples leave 96 measured). Per target it prints how that time splits into the stages a job records (data wait,
explanation, forwards, metrics and writing, the rest; ``palrp_bench/stages.py``), the explanation and the forwards
each beside their own floor, so the stage that is far from its arithmetic, or a device waiting for data, shows at
once. Each table is projected as the rehearsal projects it (:func:`rehearse.project`: model and data
load + paper samples x time per sample, every method priced like ``pa_lrp``).

The floor of a table is its arithmetic at the device's peak: for each cell, paper samples x methods x the FLOPs of
one sample, counted from the cost model's architecture and work (``palrp_bench/planning/cost.py``: one FLOP pair
per parameter and token, the attention's scores as parameter equivalents, the forwards of the protocol; the
explanation of ``pa_lrp`` one forward and one backward, a backward counted as one forward since only input
gradients are taken), divided by ``--peak-tflops`` (default on CUDA: 790, the dense bf16 figure the goals were set
with; the DeiT tables run in float32, so their floor is optimistic). On the CPU the peak is an assumption, stated
in the output: threads x 2.5 GHz x 32 float32 FLOP per cycle (two 256-bit FMA units; AVX-512 cores reach up to
twice that, so the CPU's ratios are upper bounds).

Goals on one H100: Table 1 <= 40 min (NF4 included), Table 3 <= 1 h, Tables 4 + 5 with Appendix F <= 15 min, the
whole paper <= 2 h. ``--json PATH`` writes the measurements and the table as data.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterator

from ..stages import steady_split
from . import rehearse  # targets, their checkpoints and data, measurement, projection

REPO = Path(__file__).resolve().parents[2]

#: the goals for one H100 (seconds) of groups of the rehearsal's tables (:data:`rehearse.TABLE_CELLS`)
GOALS = (("table1", ("table1",), 2400.0),
         ("table3", ("table3",), 3600.0),
         ("tables 4+5 + App. F", ("table4+appendix_f", "table5"), 900.0),
         ("whole paper", tuple(rehearse.TABLE_CELLS), 2 * 3600.0))
#: dense bf16 tensor-core throughput of one H100 as the goals take it (TFLOP/s)
H100_PEAK_TFLOPS = 790.0
#: the CPU's assumed peak per thread (FLOP/s): 2.5 GHz x 2 FMA units x 8 float32 lanes (256 bit) x 2
CPU_PEAK_PER_THREAD = 2.5e9 * 32
GIGA = 1e9
#: the stages of a job (palrp_bench/stages.py) whose arithmetic the floor counts, each with its own floor
FLOOR_PARTS = ("explain", "forwards")


@dataclass
class TableHours:
    """One row of the table: a group of paper tables, its projected seconds on this device (None when no cell was
    measured), its floor, the goal on one H100 (None: none set) and how many of its cells were measured."""

    name: str
    cells: int
    measured: int
    seconds: float | None
    floor_s: float | None
    goal_s: float | None

    @property
    def ratio(self) -> float | None:
        """Projected time over the floor (how far from the arithmetic the pipeline runs)."""
        return None if self.seconds is None or not self.floor_s else self.seconds / self.floor_s

    @property
    def verdict(self) -> str:
        if self.seconds is None or self.goal_s is None:
            return "-"
        met = "meets" if self.seconds <= self.goal_s else "misses"
        return met + ("" if self.measured == self.cells else " (measured cells only)")


def peak_flops(device: str, peak_tflops: float | None, threads: int) -> tuple[float, str]:
    """``(FLOP/s, how it was chosen)`` of the floor's peak."""
    if peak_tflops is not None:
        return peak_tflops * 1e12, f"{peak_tflops:g} TFLOP/s (--peak-tflops)"
    if device == "cuda":
        return H100_PEAK_TFLOPS * 1e12, f"{H100_PEAK_TFLOPS:g} TFLOP/s (one H100, dense bf16)"
    flops = threads * CPU_PEAK_PER_THREAD
    return flops, (f"{flops / 1e12:.2f} TFLOP/s, an assumption: {threads} thread(s) x 2.5 GHz x 32 float32 "
                   "FLOP/cycle (two 256-bit FMA units)")


def flops_per_sample(cell, part: str | None = None) -> float | None:
    """FLOPs of one sample of ``cell`` (module docstring: the cost model's architecture and per-sample work, the
    explanation counted as its method's forwards plus backwards); ``part``: ``explain`` (the explanations only) or
    ``forwards`` (the procedures' plain forwards only); None when the cost model cannot describe it."""
    from ..attributors import method_passes
    from ..methods.registry import get_method
    from ..planning.cost import architecture_of, load_constants, sample_work, work_units

    constants = load_constants()
    arch = architecture_of(cell.model, constants)
    work = None if arch is None else sample_work(cell, arch, constants)
    if work is None:
        return None
    method = get_method(cell.method)
    forwards, backwards = method_passes(method, method.params_for(cell.task), max(1, round(work.explain_tokens)))
    work = replace(work, explain_forwards=float(forwards + backwards))
    if part is not None:
        work = replace(work, forwards=0.0) if part == "explain" else replace(work, explanations=0)
    return 2.0 * GIGA * work_units(arch, work)


def target_flops(target: rehearse.Target, work: Path) -> dict[str, float | None]:
    """:func:`flops_per_sample` of the cell ``target`` runs (its checkpoint's architecture): ``total``, and its
    parts ``explain`` and ``forwards``."""
    from .plan import config_of
    from ..runner.plan import plan_cells

    cell = plan_cells(config_of(rehearse.pipeline_overrides(target, work), work / "runs" / "bench-gpu-plan"))[0]
    return {"total": flops_per_sample(cell), **{part: flops_per_sample(cell, part) for part in FLOOR_PARTS}}


def table_hours(results: list[rehearse.Measured], flops: dict[str, float | None],
                targets: dict[str, rehearse.Target], peak: float) -> list[TableHours]:
    """Every group of :data:`GOALS` and every table: projected seconds (steady time per sample, warm-up
    excluded), floor seconds (paper samples x methods x FLOPs per sample / ``peak`` of the cells measured) and the
    goal. ``flops``: FLOPs per sample by target name."""
    steady = [replace(m, per_sample_s=m.steady_sample_s) for m in results if m.steady_sample_s is not None]
    projections = {p.table: p for p in rehearse.project(steady, targets)}
    floors: dict[str, float] = {}
    by_cell = {(targets[m.target].model, targets[m.target].task): m.target for m in steady if targets[m.target].tables}
    for table, cells in rehearse.TABLE_CELLS.items():
        total = 0.0
        for model, task, n_methods in cells:
            base = task.replace("_noncausal", "")
            name = by_cell.get((model, base))
            if name is not None and flops.get(name):
                total += n_methods * rehearse.PAPER_SAMPLES[base] * flops[name] / peak
        floors[table] = total
    rows = []
    goals = {name: (tables, goal) for name, tables, goal in GOALS}
    for name in [*rehearse.TABLE_CELLS, *(g[0] for g in GOALS if g[0] not in rehearse.TABLE_CELLS)]:
        tables, goal = goals.get(name, ((name,), None))
        parts = [projections[t] for t in tables]
        measured = [p.seconds for p in parts if p.seconds is not None]
        rows.append(TableHours(name, sum(p.cells for p in parts), sum(p.measured for p in parts),
                               sum(measured) if measured else None,
                               sum(floors[t] for t in tables) if measured else None, goal))
    return rows


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else (f"{seconds / 60:.1f} min" if seconds >= 60
                                                                  else f"{seconds:.1f} s")


def _against(seconds: float, floor: float | None) -> str:
    """``seconds`` of a stage per sample beside its floor and their ratio."""
    text = rehearse._fmt(seconds, '.4f', ' s')
    return text if not floor else f"{text} ({rehearse._fmt(floor, '.4f', ' s')}, {seconds / floor:.1f}x)"


def report(results: list[rehearse.Measured], flops: dict[str, float | None], rows: list[TableHours], device: str,
           peak: float, peak_note: str) -> str:
    """The per-target measurements and the per-table hours as Markdown (``peak``: FLOP/s of the floor). Per target,
    the seconds per sample after the first batch split by stage (the job's ``timings``, palrp_bench/stages.py),
    the explanation and the forwards each beside their own floor (``m.extra["flops"]``), data wait also as a share
    of the sample's time."""
    lines = [f"Device: {device}; floor peak {peak_note}.", "",
             "| target | status | samples measured (after the first batch) | first batch | s / sample | data wait | "
             "explain (floor, ratio) | forwards (floor, ratio) | metrics + write | other | floor s / sample | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in results:
        f = flops.get(m.target)
        floor = None if not f else f / peak
        ratio = "-" if floor is None or m.steady_sample_s is None else f"{m.steady_sample_s / floor:.1f}"
        measured = m.samples - m.warmup_samples if m.steady_sample_s is not None else 0
        note = "" if m.steady_sample_s is not None else " (one batch: nothing after warm-up)"
        steady = steady_split(m.timings)
        if steady is None:
            stages = ["-"] * 5
        else:
            split, parts = steady[1], m.extra.get("flops") or {}
            share = f" ({100 * split['data_wait'] / split['total']:.0f} %)" if split["total"] else ""
            stages = [rehearse._fmt(split["data_wait"], '.4f', ' s') + share,
                      *(_against(split[part], parts[part] / peak if parts.get(part) else None)
                        for part in FLOOR_PARTS),
                      rehearse._fmt(split["metrics"] + split["write"], '.4f', ' s'),
                      rehearse._fmt(split["other"], '.4f', ' s')]
        lines.append(f"| {m.target} | {m.status} | {measured} of {m.samples}{note} | {m.warmup_samples} samples | "
                     f"{rehearse._fmt(m.steady_sample_s, '.3f', ' s')} | {' | '.join(stages)} | "
                     f"{rehearse._fmt(floor, '.4f', ' s')} | {ratio} |")
    lines += ["", "| tables | cells measured | projected | floor (FLOPs / peak) | projected / floor | "
              "goal (one H100) | verdict |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.1f}"
        lines.append(f"| {r.name} | {r.measured} of {r.cells} | {_hours(r.seconds)} | {_hours(r.floor_s)} | {ratio} | "
                     f"{_hours(r.goal_s) if r.goal_s else '-'} | {r.verdict} |")
    return "\n".join(lines)


def as_data(results, flops, rows, args, peak: float, peak_note: str) -> dict:
    """What :func:`report` prints, as data (the ``--json`` file)."""
    return {"device": args.device, "samples": args.samples, "batch_size": str(args.batch_size),
            "peak_flops": peak, "peak": peak_note, "targets": [asdict(m) for m in results],
            "flops_per_sample": flops,
            "tables": [dict(asdict(r), ratio=r.ratio, verdict=r.verdict) for r in rows]}


def table_targets() -> list[str]:
    """The rehearsal targets that price a paper table."""
    return [t.name for t in rehearse.TARGETS if t.tables]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--samples", type=int, default=None,
                        help="samples per target (default: 160 on cuda, 4 on cpu); the first batch is left out")
    parser.add_argument("--batch-size", default=None, help="runner.batch_size (default: auto on cuda, 2 on cpu)")
    parser.add_argument("--targets", "--only", dest="targets", nargs="+", choices=[t.name for t in rehearse.TARGETS],
                        default=None, metavar="TARGET", help=f"targets (default: {', '.join(table_targets())})")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help=f"peak of the floor (default: {H100_PEAK_TFLOPS:g} on cuda; an assumption on the cpu)")
    parser.add_argument("--max-minutes", type=float, default=30.0, help="time cap of each target's run")
    parser.add_argument("--work", type=Path, default=REPO / "rehearsal",
                        help="checkpoints and data of the rehearsal (large; reused by later calls)")
    parser.add_argument("--out", type=Path, default=None, help="run directories and logs (default: --work)")
    parser.add_argument("--json", type=Path, help="also write the measurements and the table to this JSON file")
    args = parser.parse_args(argv)
    if args.samples is None:
        args.samples = 160 if args.device == "cuda" else 4
    if args.batch_size is None:
        args.batch_size = "auto" if args.device == "cuda" else "2"
    args.targets = args.targets or table_targets()
    args.dtype = "config"
    return args


@dataclass
class Bench:
    """What one invocation measured: the targets' measurements, their FLOPs per sample, the table and the floor's
    peak (FLOP/s) with how it was chosen."""

    results: list
    flops: dict
    rows: list
    peak: float
    peak_note: str

    def report(self, device: str) -> str:
        return report(self.results, self.flops, self.rows, device, self.peak, self.peak_note)


def measure(args, echo=print) -> Iterator[tuple[rehearse.Measured, float | None]]:
    """Each chosen target's measurement (:func:`rehearse.run_target` with ``args``) and FLOPs per sample, one at a
    time."""
    work = args.work.resolve()
    targets = {t.name: t for t in rehearse.TARGETS}
    for name in args.targets:
        target = targets[name]
        echo(f"[{name}] model={target.model} task={target.task}, {args.samples} samples")
        t0 = time.monotonic()
        m = rehearse.run_target(target, args, work, args.out.resolve() if args.out else None)
        if m.status != "skipped":
            m.extra["flops"] = target_flops(target, work)
        echo(f"[{name}] {m.status}: {rehearse._fmt(m.steady_sample_s, '.3f', ' s')} / sample after "
             f"{m.warmup_samples} warm-up samples ({time.monotonic() - t0:.0f} s): {rehearse.stage_split(m.timings)} "
             f"{m.note}")
        yield m, m.extra.get("flops", {}).get("total")


def summarise(results: list[rehearse.Measured], flops: dict, args) -> Bench:
    """The table of ``results`` (:func:`table_hours`) with the floor's peak for ``args.device``."""
    import torch

    peak, peak_note = peak_flops(args.device, args.peak_tflops, torch.get_num_threads())
    targets = {t.name: t for t in rehearse.TARGETS}
    return Bench(results, flops, table_hours(results, flops, targets, peak), peak, peak_note)


def run(args, echo=print) -> Bench:
    """Measure the chosen targets and compute the table (what :func:`main` prints)."""
    results, flops = [], {}
    for m, f in measure(args, echo):
        results.append(m)
        flops[m.target] = f
    return summarise(results, flops, args)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and rehearse.cuda_missing(
            "bench_gpu", "python scripts/bench_gpu.py --device cpu --samples 4 --targets deit_tiny_imagenet_seg"):
        return 2
    bench = run(args)
    print(bench.report(args.device))
    if args.json:
        args.json.write_text(json.dumps(as_data(bench.results, bench.flops, bench.rows, args, bench.peak,
                                                bench.peak_note), indent=1) + "\n")
    return 0 if all(not m.status.startswith("failed") for m in bench.results) else 1


if __name__ == "__main__":
    sys.exit(main())
