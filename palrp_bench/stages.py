"""Wall time per stage of a job's evaluation (docs/rehearsal.md "Where a job's time goes").

A job's evaluation loop splits its time into five stages, each the wall time the job's main thread spent in it:

* ``data_wait``: waiting for the next samples from the loader (:mod:`palrp_bench.runner.loader`) and building the
  batch's input tensors from them (stacking images, padding token ids);
* ``explain``: the explanations (``palrp_bench.explain``, or reading them back from the explanation cache);
* ``forwards``: the evaluation procedures' model forwards (perturbed inputs built and evaluated);
* ``metrics``: turning what the forwards returned into per-sample rows (curves, scores, counts);
* ``write``: handing the rows to the store (its background writer) and waiting for it to finish.

:class:`StageClock` accumulates them. Stages may nest: the time of an inner stage counts for the inner stage only
(a procedure's ``metrics`` inside ``forwards``), so the stages never count a second twice and their sum is at most
the wall time between the first and the last boundary. On a CUDA device every boundary synchronises the device
(:func:`torch.cuda.synchronize`), so that a stage is charged the kernels it queued rather than the stage that
waits for them; nowhere else is the device synchronised.

The code that does the work marks its stage with :func:`stage`; it records into the clock the calling thread is
:func:`measuring` with, and does nothing otherwise (a background thread, a procedure called outside a job). The job
runner reports the totals (``timings`` in the job's status and in ``manifest.json``: :data:`STAGES` as
``<stage>_s``, beside ``warmup_s``, ``total_s`` and ``samples``).
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Iterator

__all__ = ["STAGES", "StageClock", "stage", "measuring", "current_clock", "steady_split", "describe_timings"]

#: the stages of a job's evaluation, in the order of a batch's life
STAGES: tuple[str, ...] = ("data_wait", "explain", "forwards", "metrics", "write")

_LOCAL = threading.local()


class StageClock:
    """Seconds per stage (:data:`STAGES`), the device synchronised at every boundary on CUDA (module docstring)."""

    def __init__(self, device: str | None = None):
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._device = None
        if device is not None and str(device).startswith("cuda"):
            import torch

            self._device = torch.device(device)
        self._open: list[list] = []  # [stage, since] of the stages entered and not left, innermost last

    def now(self) -> float:
        """The clock's time: :func:`time.perf_counter` after the device's queued work finished."""
        if self._device is not None:
            import torch

            torch.cuda.synchronize(self._device)
        return time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Charge the time inside to ``name`` (an enclosing stage is paused meanwhile)."""
        if name not in self.seconds:
            raise ValueError(f"unknown stage {name!r}; the stages are {', '.join(STAGES)}")
        now = self.now()
        if self._open:
            outer = self._open[-1]
            self.seconds[outer[0]] += now - outer[1]
        self._open.append([name, now])
        try:
            yield
        finally:
            now = self.now()
            inner, since = self._open.pop()
            self.seconds[inner] += now - since
            if self._open:
                self._open[-1][1] = now

    def as_record(self, digits: int = 3) -> dict[str, float]:
        """``{"<stage>_s": seconds}`` of every stage, rounded."""
        return {f"{name}_s": round(value, digits) for name, value in self.seconds.items()}


def current_clock() -> StageClock | None:
    """The clock this thread is :func:`measuring` with, or None."""
    return getattr(_LOCAL, "clock", None)


@contextmanager
def measuring(clock: StageClock | None) -> Iterator[StageClock | None]:
    """Let :func:`stage` record into ``clock`` in this thread (None: record nothing) until the block ends."""
    before = current_clock()
    _LOCAL.clock = clock
    try:
        yield clock
    finally:
        _LOCAL.clock = before


def stage(name: str):
    """Context manager charging the time inside to stage ``name`` of this thread's clock (a no-op without one)."""
    clock = current_clock()
    return nullcontext() if clock is None else clock.stage(name)


def steady_split(timings: dict) -> tuple[int, dict[str, float]] | None:
    """``(samples, seconds per sample by stage)`` of a job's ``timings`` after its first batch, with ``other``
    (the evaluation's time in no stage) and ``total``; None when nothing ran after the first batch."""
    samples = int(timings.get("samples") or 0) - int(timings.get("warmup_samples") or 0)
    if samples <= 0 or timings.get("total_s") is None:
        return None
    steady = float(timings["total_s"]) - float(timings.get("warmup_s") or 0.0)
    split = {name: float(timings.get(f"{name}_s") or 0.0) / samples for name in STAGES}
    split["other"] = max(0.0, steady / samples - sum(split.values()))
    split["total"] = steady / samples
    return samples, split


def _short(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def describe_timings(timings: dict) -> str:
    """One line: samples, wall time, the warm-up, and per sample after it each stage's time (``timings`` as a job
    records it)."""
    head = (f"{int(timings.get('samples') or 0)} samples in {float(timings.get('total_s') or 0.0):.1f} s, warm-up "
            f"{float(timings.get('warmup_s') or 0.0):.1f} s ({int(timings.get('warmup_samples') or 0)} samples)")
    steady = steady_split(timings)
    if steady is None:
        return head + "; nothing after it"
    samples, split = steady
    parts = ", ".join(f"{name.replace('_', ' ')} {_short(split[name])}" for name in (*STAGES, "other"))
    return f"{head}; then {_short(split['total'])} per sample ({samples} samples): {parts}"
