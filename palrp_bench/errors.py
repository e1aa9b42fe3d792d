"""User-facing errors.

Every problem a user can cause (unknown model, missing dataset file, over-long sequence, ...) is raised as a
:class:`PalrpError` whose message is one line naming the problem and the fix. The CLI prints that line and
exits non-zero instead of showing a traceback.
"""
from __future__ import annotations


class PalrpError(Exception):
    """A clear, one-line, user-facing error: ``problem -- fix``."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem} -- {fix}")


class UnsupportedModelError(PalrpError, TypeError):
    """The model object is not an architecture palrp-bench has an LRP twin for."""


class BadInputError(PalrpError, ValueError):
    """An argument or input tensor is malformed (empty text, too long, wrong shape, bad target, ...)."""


class MissingDataError(PalrpError, FileNotFoundError):
    """A dataset or checkpoint file is missing or cannot be read."""


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says the device ran out of memory (CUDA's own error, or the message torch / bitsandbytes
    put in a ``RuntimeError``): what automatic batch sizes (runner/batching.py) and perturbation forward chunks
    (evaluation/procedures/attnlrp_perturbation.py) recover from by halving."""
    try:
        import torch

        if isinstance(err, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


class Interrupted(KeyboardInterrupt):
    """The invocation was stopped by a signal: ``SIGINT`` (Ctrl-C) or ``SIGTERM`` (what schedulers and ``kill``
    send), raised by the handlers the command line installs (:func:`palrp_bench.cli.main`). A subclass of
    :class:`KeyboardInterrupt`, so everything that cleans up after Ctrl-C (the job's status file, the shard store's
    lock, the worker processes) does the same for SIGTERM. Once a run has started, :func:`palrp_bench.app.run`
    adds where it writes (``run_dir``) and how many samples this invocation stored (``samples``), which the command
    line prints as one line with the command that resumes it; the exit code is ``128 + signum`` (130, 143)."""

    def __init__(self, signum: int, run_dir=None, samples: int | None = None):
        super().__init__(signum)
        self.signum, self.run_dir, self.samples = int(signum), run_dir, samples

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
