"""Compare the plan's estimate with a measured run (docs/planning.md "How good is the estimate").

    python scripts/bench_plan.py                      # the embedded experiment (what `palrp-bench` runs)
    python scripts/bench_plan.py -- model=tinyllama task=imdb method=pa_lrp model.source=/ckpt/x runner.max_samples=2

Computes the plan of the given overrides (``mode=plan``: device-hours and the wall-clock lower bound), runs
``palrp-bench`` with the same overrides in a fresh run directory, and prints one Markdown row: the estimate, the
measured wall time, the CPU time (user + system) of the run, the machine's load average, and the ratio measured /
estimated. On a machine shared with other work the wall time is inflated by the load; the CPU time is the better
comparison there (for a multi-threaded run, divide it by the threads torch uses).

The estimate uses the constants a plan on this machine would use (the user's calibration file first). A benchmark,
not a test: nothing asserts on the ratio.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def config_of(overrides: list[str], run_dir: Path):
    """The config ``palrp-bench <overrides> run_dir=<run_dir>`` composes."""
    from hydra import compose, initialize_config_dir

    from ..catalog import CONFIG_DIR
    from ..schema import register_schemas

    register_schemas()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=[f"run_dir={run_dir}", *overrides])


def plan_of(overrides: list[str], run_dir: Path):
    """The :class:`~palrp_bench.planning.budget.PlanBudget` that ``palrp-bench mode=plan <overrides>`` prints."""
    from ..planning.budget import plan_budget
    from ..planning.cost import load_constants
    from ..runner.devices import resolve_devices
    from ..runner.plan import plan_cells, plan_jobs

    cfg = config_of(overrides, run_dir)
    cells = plan_cells(cfg)
    devices = resolve_devices(list(cfg.runner.devices))
    return plan_budget(cells, plan_jobs(cfg, cells, devices.n_workers), run_dir, devices.devices, cfg.runner,
                       load_constants())


def plan_seconds(overrides: list[str], run_dir: Path) -> tuple[float | None, float | None, str]:
    """``(device seconds, wall-clock lower bound, origin of the constants)`` of the plan."""
    budget = plan_of(overrides, run_dir)
    return budget.total_device_seconds(), budget.wall_seconds(), budget.origin


def measure(overrides: list[str], run_dir: Path) -> tuple[float, float, int]:
    """``(wall seconds, CPU seconds, exit code)`` of ``palrp-bench <overrides> run_dir=<run_dir>``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "palrp_bench.cli", *overrides, f"run_dir={run_dir}",
                           "runner.quiet=true"], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    return wall, cpu, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="palrp-bench overrides (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="palrp-bench-plan-") as tmp:
        run_dir = Path(tmp) / "run"
        device_s, wall_bound, origin = plan_seconds(args.overrides, run_dir)
        load = os.getloadavg()[0]
        wall, cpu, code = measure(args.overrides, run_dir)
        load = max(load, os.getloadavg()[0])
    if code != 0:
        print(f"palrp-bench exited with {code}", file=sys.stderr)
        return code
    what = " ".join(args.overrides) or "(embedded default)"
    ratio = "?" if wall_bound is None else f"{wall / wall_bound:.2f}"
    cpu_ratio = "?" if wall_bound is None else f"{cpu / wall_bound:.2f}"
    print("| run | estimate (wall, lower bound) | device-seconds | measured wall | CPU time | load avg | "
          "wall / estimate | CPU / estimate |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| `{what}` | {wall_bound:.1f} s | {device_s:.1f} s | {wall:.1f} s | {cpu:.1f} s | {load:.1f} | {ratio} | "
          f"{cpu_ratio} |" if wall_bound is not None else f"| `{what}` | ? | ? | {wall:.1f} s | {cpu:.1f} s | "
          f"{load:.1f} | ? | ? |")
    print(f"constants: {origin}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
