"""Local execution: one worker per device, each pinned to it; the job list spread over the workers.

With a single device the jobs run in this process. With several (``runner.devices=[0,1]``, or ``[cpu, cpu]``
to exercise the path without GPUs) one ``spawn``-ed process per device pulls jobs from a shared queue until it
is empty, so a slow cell does not hold the others back. A worker pins itself with ``torch.cuda.set_device``
before loading anything and loads each model once for consecutive jobs. Results go straight to the shard
stores, so the parent only collects reports and progress; the first failure is re-raised as one line. Either way
one progress display (:class:`~palrp_bench.runner.execute.RunProgress`) covers every job of the invocation.
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import signal
import traceback
from pathlib import Path

from ..errors import BadInputError, Interrupted, MissingDataError, PalrpError, UnsupportedModelError
from .bundles import BundleCache
from .execute import JobReport, RunProgress, run_job
from .plan import Job

log = logging.getLogger("palrp_bench.runner")

_ERROR_TYPES = {cls.__name__: cls for cls in (BadInputError, MissingDataError, UnsupportedModelError, PalrpError)}


def _pin(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))


def run_jobs_in_process(jobs: list[Job], run_dir: Path, device: str, *, quiet: bool, log_every: int) -> list[JobReport]:
    """Run every job sequentially on ``device`` in this process."""
    _pin(device)
    bundles = BundleCache()
    progress = RunProgress(len(jobs), quiet, log_every)
    try:
        return [run_job(job, run_dir, device, bundles, quiet=quiet, progress=progress) for job in jobs]
    finally:
        progress.close()


class _QueueProgress:
    """A worker's side of the invocation's progress display: forwards job starts and sample counts to the parent."""

    def __init__(self, results: "mp.Queue", index: int):
        self.results, self.index = results, index

    def start_job(self, name: str, n_samples: int) -> None:
        self.results.put(("start", self.index, name, n_samples))

    def update(self, n: int) -> None:
        self.results.put(("progress", self.index, n, None))

    def close(self) -> None:
        pass


def _setup_worker_logging(run_dir: Path, index: int) -> None:
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_dir / "logs" / f"worker-{index}.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root.addHandler(handler)


def _stop_on_sigterm(signum, frame) -> None:
    raise Interrupted(signum)


def _worker_main(index: int, device: str, run_dir: str, jobs: "mp.Queue", results: "mp.Queue") -> None:
    """Entry point of a worker process (must stay importable for ``spawn``). Ctrl-C reaches the whole process group:
    a worker ignores it and stops when the parent terminates it (SIGTERM, raised as
    :class:`~palrp_bench.errors.Interrupted` so that the job's status, store and files close as after Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    run_path = Path(run_dir)
    _setup_worker_logging(run_path, index)
    try:
        _pin(device)
    except Exception as err:  # noqa: BLE001
        results.put(("error", index, "BadInputError", f"cannot use device {device}: {err}"))
        return
    bundles = BundleCache()
    while True:
        try:
            job = jobs.get_nowait()
        except queue.Empty:
            break
        try:
            # quiet: a worker draws no bar of its own (its selection included); the parent shows the one bar
            report = run_job(job, run_path, device, bundles, quiet=True, progress=_QueueProgress(results, index))
            results.put(("ok", index, report, None))
        except PalrpError as err:
            results.put(("error", index, type(err).__name__, str(err)))
            return
        except KeyboardInterrupt:  # the parent stopped the invocation (it reports it)
            return
        except BaseException as err:  # noqa: BLE001 - report, then stop this worker
            logging.getLogger("palrp_bench.runner").error("%s failed:\n%s", job.name, traceback.format_exc())
            results.put(("error", index, "RuntimeError", f"{job.name}: {type(err).__name__}: {err}"))
            return
    results.put(("exit", index, None, None))


def run_jobs_on_workers(jobs: list[Job], run_dir: Path, devices: tuple[str, ...], *, quiet: bool,
                        log_every: int) -> list[JobReport]:
    """Spread ``jobs`` over one spawned worker process per entry of ``devices``."""
    ctx = mp.get_context("spawn")
    job_queue = ctx.Queue()
    for job in jobs:
        job_queue.put(job)
    result_queue = ctx.Queue()
    procs = [ctx.Process(target=_worker_main, name=f"palrp-worker-{i}",
                         args=(i, dev, str(run_dir), job_queue, result_queue))
             for i, dev in enumerate(devices)]
    for p in procs:
        p.start()
    reports: list[JobReport] = []
    errors: list[tuple[str, str]] = []
    running = len(procs)
    progress = RunProgress(len(jobs), quiet, log_every)
    try:
        while running:
            try:
                kind, index, payload, message = result_queue.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead and result_queue.empty():
                    # a worker died without reporting (e.g. killed, out of memory)
                    errors.append(("RuntimeError", f"worker {dead[0].name} died with exit code {dead[0].exitcode}"))
                    break
                continue
            if kind == "progress":
                progress.update(payload)
            elif kind == "start":
                progress.start_job(payload, message)
            elif kind == "ok":
                reports.append(payload)
            else:
                running -= 1
                if kind == "error":
                    errors.append((payload, message))
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        raise
    finally:
        progress.close()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join()
    if errors:
        name, message = errors[0]
        cls = _ERROR_TYPES.get(name)
        if cls is not None:
            err = cls.__new__(cls)
            PalrpError.__init__(err, message)
            raise err
        raise RuntimeError(message)
    return reports


def run_jobs(jobs: list[Job], run_dir: Path, devices: tuple[str, ...], *, quiet: bool = False,
             log_every: int = 50) -> list[JobReport]:
    """Run ``jobs`` locally on ``devices`` (in process for one device, worker processes otherwise)."""
    if not jobs:
        return []
    if len(devices) == 1:
        return run_jobs_in_process(jobs, run_dir, devices[0], quiet=quiet, log_every=log_every)
    return run_jobs_on_workers(jobs, run_dir, devices, quiet=quiet, log_every=log_every)
