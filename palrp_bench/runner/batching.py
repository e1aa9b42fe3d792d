"""How a job's samples are cut into batches: by similar length, with a fixed or an automatic batch size.

* Samples whose adapter knows their length (``adapter.sample_length(sample)``, e.g. the real token count of a text
  sample) are batched longest first, so a batch holds samples of similar length (little padding) and the
  largest batch is tried on the largest inputs first. Results are stored with their dataset position, so the
  order of computation changes nothing in the run directory.
* ``runner.batch_size=<int>``: that many samples per batch.
* ``runner.batch_size=auto``: the largest batch that fits the device, found the way users of ``accelerate``'s
  ``find_executable_batch_size`` expect: start from :data:`CUDA_AUTO_START` on a GPU (or from the size that
  worked before for this model, task and device, remembered in the process and in the user cache
  ``batch_size/``), halve it whenever the device runs out of memory (``torch.cuda.OutOfMemoryError``, or a
  ``RuntimeError`` saying "out of memory") and retry the same samples. On the CPU, ``auto`` is the fixed
  :data:`CPU_AUTO_BATCH_SIZE` (host memory is large and batching gains little there), still halved on an
  out-of-memory error.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from ..atomic_io import write_json_atomic
from ..errors import BadInputError, is_out_of_memory
from ..fingerprints import digest
from .user_cache import model_fingerprint, user_cache_dir

log = logging.getLogger("palrp_bench.runner")

AUTO = "auto"
#: ``runner.batch_size=auto`` on the CPU
CPU_AUTO_BATCH_SIZE = 8
#: first batch size ``runner.batch_size=auto`` tries on a GPU (when none is remembered)
CUDA_AUTO_START = 64

#: (model, task, device) key -> batch size that worked in this process
_REMEMBERED: dict[str, int] = {}


def int_or_auto(value, name: str, minimum: int, what: str, fix: str) -> int | str:
    """``value`` as an int of at least ``minimum``, or ``"auto"``; anything else is a one-line
    :class:`BadInputError` saying it must be ``what`` (e.g. "a positive integer"), with ``fix``."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadInputError(f"{name} must be {what} or 'auto', got {value!r}", fix)
    return int(value)


def check_batch_size(value, name: str = "runner.batch_size") -> int | str:
    """A positive int, or ``"auto"``; anything else is a one-line :class:`BadInputError`."""
    return int_or_auto(value, name, 1, "a positive integer",
                       f"set {name}=8 (or another positive integer) or {name}=auto")


def length_sorted(samples: list, adapter) -> list:
    """``samples`` longest first when the adapter knows lengths (stable: equal lengths keep dataset order)."""
    length = getattr(adapter, "sample_length", None)
    if length is None:
        return list(samples)
    return sorted(samples, key=length, reverse=True)


def _device_name(device: str) -> str:
    if str(device).startswith("cuda"):
        import torch

        props = torch.cuda.get_device_properties(torch.device(device))
        return f"{props.name}|{props.total_memory}"
    return str(device)


class BatchSizer:
    """The batch size of one job: fixed, or automatic (module docstring). ``size`` is the current size;
    :meth:`shrink` handles an error of a batch; :meth:`worked` records a size that fitted."""

    def __init__(self, requested: int | str, device: str, cell=None):
        self.auto = requested == AUTO
        self.device = str(device)
        self.key: str | None = None
        self.cache_file: Path | None = None
        #: whether :attr:`size` is a size that worked before for this model, task and device
        self.remembered = False
        if not self.auto:
            self.size = int(requested)
            return
        self.key = digest({"model": model_fingerprint(cell.model), "task": cell.task.name,
                           "device": _device_name(self.device)}) if cell is not None else None
        self.size = CUDA_AUTO_START if self.device.startswith("cuda") else CPU_AUTO_BATCH_SIZE
        if self.key is not None:
            self.cache_file = user_cache_dir() / "batch_size" / f"{self.key}.json"
            remembered = _REMEMBERED.get(self.key) or self._read_cached()
            if remembered:
                self.size, self.remembered = remembered, True
        self._recorded = False

    def _read_cached(self) -> int | None:
        try:
            return int(json.loads(self.cache_file.read_text())["batch_size"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def shrink(self, err: BaseException) -> bool:
        """True when ``err`` is an out-of-memory error of an automatic size that could be halved (then the
        caller retries the same samples with :attr:`size`); False when the error is not for us to handle."""
        if not self.auto or not is_out_of_memory(err):
            return False
        if self.size <= 1:
            raise BadInputError(f"out of memory on {self.device} even with one sample per batch",
                                "use a device with more memory, NF4 quantization (model=..._4bit) or a smaller "
                                "runner.forward_batch_size") from None
        self.size = max(1, self.size // 2)
        log.warning("out of memory on %s: runner.batch_size=auto retries with %d samples per batch", self.device,
                    self.size)
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        self._recorded = False
        return True

    def worked(self) -> None:
        """Remember the current automatic size for this model, task and device (once per size)."""
        if not self.auto or self._recorded or self.key is None:
            return
        self._recorded = True
        _REMEMBERED[self.key] = self.size
        try:
            write_json_atomic(self.cache_file, {"batch_size": self.size, "device": _device_name(self.device)})
        except OSError as err:  # the user cache is optional
            log.warning("cannot remember the batch size in %s: %s", self.cache_file, err)
