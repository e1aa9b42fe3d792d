"""Which devices the workers run on (one worker process per visible device, CPU fallback).

``runner.devices`` entries: ``auto`` (every visible CUDA device, else the CPU), ``cpu``, ``cuda`` (every
visible CUDA device), ``cuda:<k>`` or a bare index ``<k>``. Several entries mean several worker processes,
each pinned to its device; ``[cpu, cpu]`` runs two CPU workers (how the multi-device path is exercised on a
machine without GPUs). Asking for a GPU that is not there stops with a one-line :class:`BadInputError`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadInputError

_CUDA_INDEX = re.compile(r"^(?:cuda:)?(\d+)$")


@dataclass(frozen=True)
class DevicePlan:
    """The resolved devices (torch device strings, one worker each) and whether the CPU was chosen only
    because ``auto`` found no GPU (preflight then refuses models that need one)."""

    devices: tuple[str, ...]
    cpu_by_fallback: bool

    @property
    def n_workers(self) -> int:
        return len(self.devices)

    @property
    def all_cpu(self) -> bool:
        return all(d == "cpu" for d in self.devices)


def cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_devices(spec: list[str] | tuple[str, ...], n_cuda: int | None = None) -> DevicePlan:
    """Turn ``runner.devices`` into torch device strings; ``n_cuda`` overrides detection (tests)."""
    n_cuda = cuda_device_count() if n_cuda is None else n_cuda
    entries = [str(s).strip().lower() for s in spec]
    if not entries:
        raise BadInputError("runner.devices is empty", "use runner.devices=[auto], [cpu] or [0,1]")
    devices: list[str] = []
    fallback = False
    for entry in entries:
        if entry == "auto":
            if n_cuda:
                devices += [f"cuda:{k}" for k in range(n_cuda)]
            else:
                devices.append("cpu")
                fallback = True
        elif entry == "cpu":
            devices.append("cpu")
        elif entry == "cuda":
            if not n_cuda:
                raise BadInputError("a GPU was requested (runner.devices contains cuda) but no CUDA device is visible",
                                    "use runner.devices=[cpu] (or [auto]), or run on a machine with a GPU")
            devices += [f"cuda:{k}" for k in range(n_cuda)]
        else:
            match = _CUDA_INDEX.match(entry)
            if not match:
                raise BadInputError(f"unknown device {entry!r} in runner.devices",
                                    "use auto, cpu, cuda, cuda:<k> or a GPU index, e.g. runner.devices=[0,1]")
            k = int(match.group(1))
            if k >= n_cuda:
                what = "no CUDA device is visible" if not n_cuda else f"only {n_cuda} CUDA device(s) are visible"
                raise BadInputError(f"GPU {k} was requested (runner.devices) but {what}",
                                    "use runner.devices=[cpu] or [auto], or a GPU index that exists")
            devices.append(f"cuda:{k}")
    return DevicePlan(tuple(devices), fallback and all(d == "cpu" for d in devices))
