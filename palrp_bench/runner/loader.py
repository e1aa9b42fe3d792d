"""A job's samples loaded ahead of the device: decoding, resizing and tokenising in worker processes
(docs/rehearsal.md "Samples loaded ahead of the device").

Every dataset kind goes through one loader (:class:`SampleLoader`): the job names the positions of the samples it
computes in the selected pool, and the loader hands them back loaded (:func:`palrp_bench.data.base.load_positions`:
an image read from disk, decoded and resized; a text tokenised, many per tokenizer call) in the same order, ready
to batch. With ``runner.loader_workers`` > 0 the loading happens in that many worker processes, ``ahead`` samples
ahead of what the job has taken, so the next batches are loaded while the current one is explained and
perturbed; with 0 it happens in the job's own process when a batch is taken (how every job ran before).

* **Same samples, same order, same values.** Workers run the same loading code on the same data (forked from the
  job's process, they see its pool as it is) and return the loaded samples pickled, their tensors as NumPy arrays
  (:class:`_Pickler`), in the order asked for (``tests/runner/test_loader.py`` compares whole run directories with
  0 and 2 workers).
* **Text is ordered by length.** Where the task adapter batches by length (``adapter.sample_length``), every sample
  of the job is loaded first (in the workers, in chunks), then sorted as :func:`~.batching.length_sorted` does;
  image samples stream in dataset order.
* **Batches are cut at use**: :meth:`SampleLoader.take` returns the next ``n`` samples (``n`` is the job's current
  batch size, which ``batch_size=auto`` may halve), :meth:`SampleLoader.give_back` returns the samples of a batch
  that ran out of memory to the front.
* **Workers** are forked (the start method of ``torch.utils.data.DataLoader`` on Linux; where fork does not exist,
  or is unsafe as on macOS, the loading stays in the job's process), single-threaded, deaf to Ctrl-C and SIGTERM
  (the job stops them), and never touch the GPU. A worker's error (an unreadable image) is re-raised in the job.

``runner.loader_workers=auto`` (:func:`resolve_loader_workers`): on a GPU ``min(8, cores - 1)``, the job's own
process keeping a core; on the CPU ``min(2, cores // 2)``, since the job's explanations use every core.
"""
from __future__ import annotations

import functools
import io
import itertools
import multiprocessing as mp
import os
import pickle
import signal
import sys
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Sequence

from ..data.base import load_positions, needs_loading
from ..errors import PalrpError
from .batching import AUTO, int_or_auto

#: most worker processes ``runner.loader_workers=auto`` starts
MAX_AUTO_WORKERS = 8
#: most samples one worker task loads
MAX_CHUNK = 32

#: what forked workers read: loader number -> ``(source, positions)`` of the loader that started them
_SHARED: dict[int, tuple] = {}
_NUMBERS = itertools.count()


def check_loader_workers(value, name: str = "runner.loader_workers") -> int | str:
    """A non-negative int, or ``"auto"``; anything else is a one-line :class:`BadInputError`."""
    return int_or_auto(value, name, 0, "a non-negative integer",
                       f"set {name}=auto (chosen from the cores), 0 (load in the job's process) or e.g. 2")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def fork_available() -> bool:
    """Whether worker processes can be forked safely here (POSIX with fork, not macOS)."""
    return "fork" in mp.get_all_start_methods() and sys.platform != "darwin"


def resolve_loader_workers(value, device: str) -> int:
    """Worker processes of a job's loader on ``device`` for the setting ``value`` (module docstring); 0 where fork
    is not available."""
    value = check_loader_workers(value)
    if value == AUTO:
        cores = _cores()
        value = min(MAX_AUTO_WORKERS, cores - 1) if str(device).startswith("cuda") else min(2, cores // 2)
    return max(0, int(value)) if fork_available() else 0


def _init_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the job stops the workers
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the command line's handler inherited through fork
    import torch

    torch.set_num_threads(1)


class _Pickler(pickle.Pickler):
    """Pickles CPU tensors as NumPy arrays: unpickled with one copy and :func:`torch.from_numpy` (same values, dtype
    and shape), where a tensor's own pickling goes through ``torch.save`` (about a millisecond per image in the job's
    process)."""

    def reducer_override(self, obj):
        import torch

        if (type(obj) is torch.Tensor and obj.device.type == "cpu" and obj.layout == torch.strided
                and not obj.requires_grad and obj.dtype in _numpy_dtypes()):
            return torch.from_numpy, (obj.numpy(),)
        return NotImplemented


@functools.cache
def _numpy_dtypes() -> frozenset:
    """The tensor dtypes NumPy holds exactly."""
    import torch

    return frozenset({torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
                      torch.uint8, torch.bool})


def _load_chunk(number: int, start: int, stop: int) -> bytes:
    """Worker task: the samples ``positions[start:stop]`` of loader ``number``, loaded and pickled."""
    source, positions = _SHARED[number]
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(load_positions(source, positions[start:stop]))
    return buffer.getvalue()


class SampleLoader:
    """The samples at ``positions`` of ``source`` (the job's selected pool), loaded, in that order; with ``order``
    (a function of the list of every loaded sample, e.g. :func:`~.batching.length_sorted`) all of them loaded
    first and taken in the order it returns. ``workers``: worker processes (0: load in this process when a batch
    is taken); ``ahead``: samples loaded ahead of the ones taken. Use as a context manager (module docstring)."""

    def __init__(self, source: Sequence, positions: Sequence[int], *, workers: int = 0, ahead: int = 16,
                 order: Callable[[list], list] | None = None):
        self.source, self.positions = source, list(positions)
        self.workers = workers if workers > 0 and needs_loading(source, self.positions) else 0
        self.ahead = max(1, len(self.positions) if order is not None else int(ahead))
        self._back: deque = deque()  # samples given back, and samples loaded but not taken yet
        self._next = 0  # positions before this one are loaded or being loaded
        self._pending: deque = deque()  # (Future, count) of the worker tasks in flight, in order
        self._pool: ProcessPoolExecutor | None = None
        self._number = next(_NUMBERS)
        try:
            if self.workers:
                self.chunk = max(1, min(MAX_CHUNK, self.ahead // (2 * self.workers)))
                self._start_workers()
            if order is not None:
                self._back.extend(order(self._load_all()))
                self._stop_workers()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------------ workers
    def _start_workers(self) -> None:
        # forked at the first task, all at once: each worker sees the pool and positions as they are now
        _SHARED[self._number] = (self.source, self.positions)
        self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("fork"), initializer=_init_worker)
        self._fill()

    def _fill(self) -> None:
        """Keep ``ahead`` samples in flight (at least one task per worker)."""
        in_flight = sum(n for _, n in self._pending)
        while self._next < len(self.positions) and (in_flight < self.ahead or len(self._pending) < self.workers):
            stop = min(self._next + self.chunk, len(self.positions))
            self._pending.append((self._pool.submit(_load_chunk, self._number, self._next, stop), stop - self._next))
            in_flight += stop - self._next
            self._next = stop

    def _receive(self) -> list:
        future, _ = self._pending.popleft()
        try:
            samples = pickle.loads(future.result())  # a worker's error is raised here
        except BrokenProcessPool:
            raise PalrpError("a sample loader worker died (killed, or out of host memory)",
                             "run again (stored samples are kept) with fewer runner.loader_workers, or 0 to load in "
                             "the job's process") from None
        self._fill()
        return samples

    def _stop_workers(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)  # the tasks running finish (a chunk: milliseconds)
            self._pool = None
            self._pending.clear()
        _SHARED.pop(self._number, None)

    # ------------------------------------------------------------------------------------------------ loading
    def _load_all(self) -> list:
        if self._pool is None:
            every = load_positions(self.source, self.positions)
            self._next = len(self.positions)
            return every
        every = []
        while self._pending:
            every += self._receive()
        return every

    def _load_more(self, n: int) -> None:
        """At least ``n`` more samples in :attr:`_back` (fewer at the end)."""
        if self._pool is None:
            stop = min(self._next + n, len(self.positions))
            self._back.extend(load_positions(self.source, self.positions[self._next:stop]))
            self._next = stop
            return
        while n > 0 and self._pending:
            samples = self._receive()
            self._back.extend(samples)
            n -= len(samples)

    def take(self, n: int) -> list:
        """The next ``n`` loaded samples (fewer at the end; an empty list when all were taken)."""
        if len(self._back) < n:
            self._load_more(n - len(self._back))
        return [self._back.popleft() for _ in range(min(n, len(self._back)))]

    def give_back(self, samples: list) -> None:
        """Put ``samples`` (taken last) back in front, to be taken again."""
        self._back.extendleft(reversed(samples))

    def close(self) -> None:
        self._stop_workers()
        self._back.clear()

    def __enter__(self) -> "SampleLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
