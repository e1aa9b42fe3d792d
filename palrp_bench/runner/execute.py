"""Running one job (one shard of one cell): load, select, skip what is stored, evaluate, append.

docs/architecture.md "Data flow of one run": per shard: load model + dataset shard -> batches -> explain -> scores ->
protocol -> per-sample rows appended to the shard's store. Resume is implicit: samples stored by ANY earlier
run of the cell (whatever its sharding) are skipped, so a killed job restarted with the same command computes
only what is missing.

The job's status file (``<store>.status.json``, copied into ``manifest.json``) records what it did and what it
cost: counts, the samples the task's loader or adapter dropped at load by reason (``dropped``: the evidence tasks,
docs/evidence.md), the selection record (:mod:`.selection`), the batch size used (:mod:`.batching`), the loader's
worker processes (``loader_workers``: 0 where the samples were in memory already, :mod:`.loader`), the stabilisers the explanations use (``stabilizers``,
:func:`check_stabilizers_used`), the ``embeddings`` switch where it applies (checked against the cell's record,
:func:`check_embeddings_used`), ``timings``: ``load_model_s``, ``load_data_s``, ``selection_s`` before the
evaluation, then where the evaluation's time went (:func:`job_timings`: the stages of :mod:`palrp_bench.stages`
after the first batch, ``warmup_s`` / ``warmup_samples`` of the first batch, ``total_s``, ``samples``; also in
the job's log line and the end-of-run summary), ``peak_device_bytes`` (CUDA only) and ``numerics``: the device
kind and the TF32 flags the job computed with (the cell's ``tf32`` switch, applied for the whole job by
:func:`palrp_bench.numerics.tf32_mode`).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from ..atomic_io import write_json_atomic
from ..data.registry import sample_ids_of
from ..errors import BadInputError
from ..evaluation.tasks import task_adapter
from ..numerics import device_kind, tf32_mode
from ..stages import StageClock, describe_timings, measuring, stage
from .batching import BatchSizer, length_sorted
from .bundles import BundleCache
from .loader import SampleLoader, resolve_loader_workers
from .plan import Cell, Job
from .selection import select_samples
from .sharding import shard_of
from .store import BackgroundWriter, ExplanationCache, ShardStore, encode_record, iter_cell_records, stored_metrics

log = logging.getLogger("palrp_bench.runner")


@dataclass
class JobReport:
    """What a job did (also written to ``<store>.status.json``)."""

    job: str
    status: str
    device: str
    n_selected: int = 0
    n_shard: int = 0
    n_skipped: int = 0
    n_computed: int = 0
    n_nonfinite: int = 0
    seconds: float = 0.0
    batch_size: int | None = None
    error: str | None = None
    #: the job's ``timings`` (module docstring), None until it ran
    timings: dict | None = None


def check_cell_record(cell: Cell, run_dir: Path) -> bool:
    """Whether ``cell.json`` exists; a one-line :class:`BadInputError` when it describes other settings (resuming
    would mix numbers of different configurations in one table). The runner checks every cell before it writes
    anything (a refused resume leaves the run dir as it was), each job again before its first write."""
    path = cell.directory(run_dir) / "cell.json"
    if not path.exists():
        return False
    stored = json.loads(path.read_text())
    if stored.get("fingerprint") != cell.fingerprint():
        changed = _changed_keys(stored.get("settings", {}), cell.settings())
        raise BadInputError(f"run dir {run_dir} already holds results of {cell.key} with other settings "
                            f"(changed: {', '.join(changed) or 'unknown'})",
                            "use a new run_dir, or the same settings to resume")
    return True


def ensure_cell_record(job: Job, run_dir: Path) -> None:
    """Write ``cell.json`` or check that the stored one describes the same settings (:func:`check_cell_record`)."""
    if not check_cell_record(job.cell, run_dir):
        write_json_atomic(job.cell.directory(run_dir) / "cell.json", job.cell.describe())


def check_stabilizers_used(job: Job, run_dir: Path, used: str | None) -> None:
    """Refuse, before anything is computed, to add samples explained with the stabilisers ``used`` to a cell whose
    stored samples were explained with other ones. The cell's recorded setting is the request
    (:attr:`~.plan.Cell.stabilizer_choice`), which resolves per model family, so the same request can mean
    another set after a change of the defaults or an explicit name equal to the protocol's (e.g. ``official`` on
    Qwen3); what each stored sample used is in its record."""
    if used is None:
        return
    records = iter_cell_records(job.cell.directory(run_dir))
    stored = {str(r.get("info", {}).get("stabilizers") or "") for _, r in records} - {""}
    if stored and stored != {used}:
        raise BadInputError(f"run dir {run_dir} holds samples of {job.cell.key} explained with stabilizers="
                            f"{'/'.join(sorted(stored))}, this run's explanations would use {used}",
                            f"use a new run_dir, or stabilizers={sorted(stored)[0]} to resume")


def check_embeddings_used(job: Job, used: str | None) -> None:
    """Refuse, before anything is computed, a job whose loaded model takes the ``embeddings`` switch otherwise than
    its cell recorded (``Cell.embeddings_setting``, decided from the model's ``config.json`` before it loaded): the
    fingerprint would not say what the explanations computed."""
    planned = job.cell.embeddings_setting
    if used != planned:
        raise BadInputError(f"{job.cell.key}: the loaded model takes embeddings={used or '(no effect)'}, the cell "
                            f"recorded {planned or '(no effect)'} from the model's config.json",
                            "point model.source (and model.base_model) at the same architecture the weights are")


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    keys = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            keys += _changed_keys(a, b, f"{prefix}{k}.")
        elif a != b:
            keys.append(f"{prefix}{k}")
    return keys


class RunProgress:
    """One progress display for every job of an invocation: a tqdm bar on stderr (samples done of the estimated
    total, samples/s, ETA) or, with ``runner.quiet``, a log line every ``log_every`` samples.

    A job knows how many samples it computes only once it has selected them, so the total grows as jobs start;
    jobs not started yet count with the mean of the started ones, which keeps the ETA about the whole invocation.
    """

    def __init__(self, n_jobs: int, quiet: bool = False, log_every: int = 50):
        self.n_jobs, self.quiet, self.log_every = max(1, n_jobs), quiet, max(1, log_every)
        self.started, self.known, self.done = 0, 0, 0
        self.logged = (0, 0)
        self.t0 = time.monotonic()
        self.bar = None if quiet else tqdm(total=0, unit="sample", dynamic_ncols=True, leave=True,
                                           desc=f"0/{self.n_jobs} jobs")

    @property
    def total(self) -> int:
        pending = self.n_jobs - self.started
        return self.known + (round(self.known / self.started * pending) if self.started else 0)

    def start_job(self, name: str, n_samples: int) -> None:
        self.started = min(self.started + 1, self.n_jobs)
        self.known += n_samples
        if self.bar is not None:
            self.bar.total = max(self.total, self.done)
            self.bar.set_description(f"job {self.started}/{self.n_jobs} {name}", refresh=False)
            self.bar.refresh()
        else:
            log.info("job %d/%d %s: %d sample(s) to compute", self.started, self.n_jobs, name, n_samples)

    def update(self, n: int) -> None:
        before = self.done
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.done // self.log_every != before // self.log_every or self.done == self.total:
            self._log_rate()

    def _log_rate(self) -> None:
        rate = self.done / max(time.monotonic() - self.t0, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        log.info("%d/%d samples (%.2f/s, ETA %.0fs)", self.done, self.total, rate, eta)
        self.logged = (self.done, self.total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.done and self.logged != (self.done, self.total):  # the final count, once
            self._log_rate()


def _reset_peak_memory(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(torch.device(device))


def _peak_memory(device: str) -> int | None:
    """Peak bytes allocated by torch on a CUDA device since :func:`_reset_peak_memory` (None on the CPU, where
    the process's peak resident memory is what counts: ``scripts/rehearse.py`` measures it from outside)."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    return int(torch.cuda.max_memory_allocated(torch.device(device)))


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and (when loaded) torch; the evaluations are deterministic, this guards the rest."""
    import random
    import sys

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def _evaluate(job: Job, run_dir: Path, selected, todo: dict[tuple[str, ...], list[int]], adapter, bundle, ctx, cache,
              sizer: BatchSizer, workers: int, status: dict, report: JobReport, progress) -> None:
    """The job's evaluation loop: the samples at ``todo``'s positions of ``selected`` loaded ahead
    (:class:`~.loader.SampleLoader`), evaluated batch by batch, their records handed to the store's background
    writer (:class:`~.store.BackgroundWriter`); the wall time of each stage (:mod:`palrp_bench.stages`) goes to
    ``status["timings"]``, also when the job fails."""
    ids = sample_ids_of(selected)
    order = {sid: i for i, sid in enumerate(ids)}
    by_length = getattr(adapter, "sample_length", None) is not None
    clock = StageClock(ctx.device)
    start = clock.now()
    warm: tuple[float, int, dict[str, float]] | None = None  # the first batch: seconds, samples, stages so far
    failed = True
    try:
        with ShardStore(job.store_path(run_dir)) as store, measuring(clock):
            writer = BackgroundWriter(store, cache)
            try:
                for metrics, positions in todo.items():
                    with stage("data_wait"):
                        loader = SampleLoader(selected, positions, workers=workers, ahead=2 * sizer.size,
                                              order=(lambda s: length_sorted(s, adapter)) if by_length else None)
                        status["loader_workers"] = max(status["loader_workers"], loader.workers)
                    try:
                        while True:
                            with stage("data_wait"):
                                batch = loader.take(sizer.size)
                            if not batch:
                                break
                            try:
                                results = adapter.evaluate(bundle, batch, ctx, metrics)
                            except Exception as err:  # noqa: BLE001 - only out-of-memory of batch_size=auto is retried
                                if sizer.shrink(err):
                                    loader.give_back(batch)
                                    continue
                                raise
                            sizer.worked()
                            if [r.sample_id for r in results] != [s.sample_id for s in batch]:
                                raise RuntimeError(f"task adapter for {job.cell.task.kind} returned results out "
                                                   "of order or incomplete")  # a programming error, not a user one
                            with stage("write"):
                                writer.put([(r.sample_id, r.explanation,
                                             encode_record(r.sample_id, order[r.sample_id], r.rows, r.info, metrics))
                                            for r in results])
                            for result in results:
                                report.n_computed += 1
                                report.n_nonfinite += int(result.nonfinite)
                                if result.nonfinite:
                                    log.warning("%s: sample %s has non-finite relevance (recorded, not fatal)",
                                                job.name, result.sample_id)
                            progress.update(len(results))
                            if warm is None:  # warm-up (kernels, allocator, autotuning, batch size search) is in it
                                warm = (clock.now() - start, len(batch), dict(clock.seconds))
                    finally:
                        with stage("data_wait"):  # the workers' exit is the loader's time too
                            loader.close()
                with stage("write"):
                    writer.close()
                failed = False
            finally:
                writer.close(raise_error=False)  # what was computed is written, also when the job fails
    finally:
        status["timings"].update(job_timings(clock, clock.now() - start, report.n_computed, warm))
        if failed:
            status["timings"]["failed"] = True


def job_timings(clock: StageClock, total: float, samples: int,
                warm: tuple[float, int, dict[str, float]] | None) -> dict:
    """A job's ``timings`` of its evaluation: every stage's seconds after the first batch (``<stage>_s``), the
    first batch's seconds and samples (``warmup_s``, ``warmup_samples``: CUDA context, kernel loading and autotuning,
    compilation, the allocator's growth, the batch size search), the evaluation's wall time ``total_s`` and the
    samples it computed; the stages and the warm-up add up to at most ``total_s`` (the rest is the loop's own
    work: progress, bookkeeping)."""
    before = warm[2] if warm is not None else dict.fromkeys(clock.seconds, 0.0)
    stages = {f"{name}_s": round(max(0.0, seconds - before[name]), 3) for name, seconds in clock.seconds.items()}
    return {**stages, "warmup_s": round(warm[0], 3) if warm else 0.0, "warmup_samples": warm[1] if warm else 0,
            "total_s": round(total, 3), "samples": int(samples)}


def run_job(job: Job, run_dir: Path, device: str, bundles: BundleCache, *, quiet: bool = False,
            log_every: int = 50, progress: RunProgress | None = None) -> JobReport:
    """Execute one job; returns what it did. User errors propagate as :class:`~palrp_bench.errors.PalrpError`
    after the status file records them (stored samples are never lost). ``progress``: the invocation's progress
    display (None: one of this job alone, shown with ``quiet`` / ``log_every``)."""
    run_dir = Path(run_dir)
    t0 = time.monotonic()
    report = JobReport(job.name, "running", device)
    status_path = job.status_path(run_dir)
    status = {"job": job.name, "cell": job.cell.key, "shard": job.shard, "n_shards": job.n_shards,
              "device": device, "host": socket.gethostname(), "pid": os.getpid(), "status": "running",
              "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    numerics = ExitStack()
    try:
        flags = numerics.enter_context(tf32_mode(job.cell.tf32))
        status["numerics"] = {"device_kind": device_kind(device), "tf32": job.cell.tf32, **flags}
        ensure_cell_record(job, run_dir)
        write_json_atomic(status_path, status)
        seed_everything(job.cell.seed)
        cell_dir = job.cell.directory(run_dir)
        adapter = task_adapter(job.cell.task.kind)
        timings = status["timings"] = {}
        mark = time.monotonic()
        bundle = bundles.get(job.cell.model, device)
        timings["load_model_s"] = round(time.monotonic() - mark, 3)  # 0 when the worker had it loaded already
        cache = ExplanationCache(cell_dir) if job.cache_explanations else None
        ctx = job.cell.context(device, cache, job.forward_batch_size, job.checkpoint)
        status["checkpoint"] = job.checkpoint
        status["stabilizers"] = ctx.stabilizers_used(bundle.model)
        check_stabilizers_used(job, run_dir, status["stabilizers"])
        status["embeddings"] = ctx.embeddings_used(bundle.model)
        check_embeddings_used(job, status["embeddings"])
        mark = time.monotonic()
        pool = adapter.load_samples(job.cell.task, bundle)
        timings["load_data_s"] = round(time.monotonic() - mark, 3)
        dropped = getattr(pool, "dropped", None)  # samples a loader or adapter removed at load, by reason
        if dropped is not None:  # recorded even when none was dropped: a count, never silence
            status["dropped"] = {str(k): int(v) for k, v in sorted(dropped.items())}
            reasons = ", ".join(f"{k}: {v}" for k, v in status["dropped"].items())
            log.info("%s: %d sample(s) dropped at load%s", job.name, sum(status["dropped"].values()),
                     f" ({reasons})" if reasons else "")
        selected, selection = select_samples(pool, job.cell, adapter, bundle, ctx, run_dir, job.max_samples,
                                             quiet=quiet)
        status["selection"] = asdict(selection)
        timings["selection_s"] = selection.seconds
        write_json_atomic(status_path, status)  # what loading cost survives a kill during the evaluation
        # by position and id only: the loader reads, decodes or tokenises the samples this shard still computes
        ids = sample_ids_of(selected)
        mine = [i for i, sid in enumerate(ids) if shard_of(sid, job.n_shards) == job.shard]
        done = stored_metrics(cell_dir)
        wanted = set(job.cell.metrics)
        todo: dict[tuple[str, ...], list[int]] = {}  # missing metrics -> positions in `selected` (dataset order)
        for i in mine:
            missing = tuple(sorted(wanted - done.get(ids[i], set())))
            if missing:
                todo.setdefault(missing, []).append(i)
        n_todo = sum(len(v) for v in todo.values())
        report.n_selected, report.n_shard = len(selected), len(mine)
        report.n_skipped = len(mine) - n_todo
        if report.n_skipped:
            log.info("%s: %d of %d samples already stored, computing %d", job.name, report.n_skipped, len(mine),
                     n_todo)
        own_progress = progress is None
        if own_progress:
            progress = RunProgress(1, quiet, log_every)
        progress.start_job(job.name, n_todo)
        _reset_peak_memory(device)
        sizer = BatchSizer(job.batch_size, device, job.cell)
        workers = resolve_loader_workers(job.loader_workers, device)
        status["loader_workers"] = 0
        try:
            _evaluate(job, run_dir, selected, todo, adapter, bundle, ctx, cache, sizer, workers, status, report,
                      progress)
            report.batch_size = sizer.size
        finally:
            if own_progress:
                progress.close()
            status["peak_device_bytes"] = _peak_memory(device)
        report.timings = timings
        log.info("%s: %s", job.name, describe_timings(timings))
        report.status = "done"
    except BaseException as err:
        report.status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
        report.error = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise
    finally:
        numerics.close()  # the TF32 flags as they were before the job
        report.seconds = round(time.monotonic() - t0, 3)
        status.update(status=report.status, finished=time.strftime("%Y-%m-%dT%H:%M:%S"),
                      n_selected=report.n_selected, n_shard=report.n_shard, n_skipped=report.n_skipped,
                      n_computed=report.n_computed, n_nonfinite=report.n_nonfinite, seconds=report.seconds,
                      batch_size=report.batch_size, error=report.error)
        try:
            write_json_atomic(status_path, status)
        except OSError:  # pragma: no cover - the run dir vanished; the original error matters more
            pass
    return report
