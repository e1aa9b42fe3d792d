"""How a device computes float32: the device kind and the TF32 setting (docs/evaluation.md, "Numerics on GPUs").

Two facts outside our code decide float32 results on a GPU, and both are recorded with every run:

* **The device kind** (:func:`device_kind`): ``cpu`` or ``cuda/<GPU name>``. Which of several equal values
  ``torch.topk`` returns is the device's choice: CUDA and the CPU remove different tied pixels in the official
  Table 4 procedure (docs/protocol.md section 3), so the pixel-perturbation rows record the kind that ordered ties.
* **TF32** (:data:`TF32_CHOICES`, switch ``tf32``): on Ampere and later GPUs PyTorch may compute float32
  convolutions and matmuls with TensorFloat-32 (10-bit mantissa inputs). PyTorch's defaults, with which the
  official code ran, use TF32 for cuDNN convolutions (the ViT patch embedding) and full float32 for matmuls:
  ``tf32=conv``, the default of ``protocol=official``. ``tf32=off`` computes both in IEEE float32: the default of
  ``protocol=corrected``. CPUs never use TF32, so the switch changes nothing there.

:func:`tf32_mode` applies a choice for the duration of a job and restores the previous flags; :func:`tf32_state`
reads the flags in effect (what the job status and the manifest record).
"""
from __future__ import annotations

from contextlib import contextmanager
from types import MappingProxyType
from typing import Iterator

from .protocol import resolve_switch

__all__ = ["TF32_CHOICES", "PROTOCOL_TF32", "resolve_tf32", "tf32_mode", "tf32_state", "device_kind"]

#: the TF32 choices: ``conv`` = cuDNN convolutions in TF32, matmuls in float32 (PyTorch's defaults, as the official
#: code ran); ``off`` = both in IEEE float32
TF32_CHOICES: tuple[str, ...] = ("conv", "off")
#: the choice each protocol defaults to
PROTOCOL_TF32 = MappingProxyType({"official": "conv", "corrected": "off"})
#: per choice, the float32 precision of (cuDNN convolutions, CUDA matmuls) in torch's names
_PRECISIONS = MappingProxyType({"conv": ("tf32", "ieee"), "off": ("ieee", "ieee")})


def resolve_tf32(choice: str | None, protocol="official") -> str:
    """``choice`` when given (``conv`` | ``off``), else the default of ``protocol``; a bad value is a one-line
    :class:`~palrp_bench.errors.BadInputError` (:func:`palrp_bench.protocol.resolve_switch`)."""
    return resolve_switch("tf32", choice, TF32_CHOICES, PROTOCOL_TF32, protocol)


def _legacy_flags(torch) -> tuple[bool, bool] | None:
    """``(cudnn allow_tf32, matmul allow_tf32)`` through torch's legacy flags, or None where torch refuses to answer
    them (torch >= 2.9 after the process set the newer per-backend ``fp32_precision`` flags)."""
    try:
        return bool(torch.backends.cudnn.allow_tf32), bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:
        return None


def _precisions(torch) -> tuple[str, str, str]:
    """The newer flags: cuDNN convolutions, cuDNN RNNs, CUDA matmuls (``tf32`` / ``ieee`` / ``none`` = inherit)."""
    return (torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.rnn.fp32_precision,
            torch.backends.cuda.matmul.fp32_precision)


def tf32_state() -> dict:
    """The flags in effect: ``{"cudnn_conv": "tf32" | "ieee", "cuda_matmul": "tf32" | "ieee"}`` (read from the
    newer ``fp32_precision`` flags, as torch names them, where the process set those)."""
    import torch

    legacy = _legacy_flags(torch)
    if legacy is None:
        conv, _, matmul = _precisions(torch)
        return {"cudnn_conv": conv, "cuda_matmul": matmul}
    return {"cudnn_conv": "tf32" if legacy[0] else "ieee", "cuda_matmul": "tf32" if legacy[1] else "ieee"}


@contextmanager
def tf32_mode(choice: str) -> Iterator[dict]:
    """Compute with the TF32 ``choice`` (``conv`` | ``off``) inside the block; yields :func:`tf32_state` as set and
    restores the previous flags on exit. Process-wide flags: one job at a time per process, as the runner works.

    The flags are set through the API the process already uses: torch >= 2.9 has per-backend ``fp32_precision``
    flags besides the legacy ``allow_tf32`` ones and refuses to read the legacy ones once the newer ones were set,
    so a process that never touched the newer ones (libraries may read the legacy ones) keeps using the legacy ones.
    """
    import torch

    conv, matmul = _PRECISIONS[resolve_tf32(choice)]
    legacy = _legacy_flags(torch)
    saved = legacy if legacy is not None else _precisions(torch)
    if legacy is not None:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = conv == "tf32", matmul == "tf32"
    else:  # cuDNN's RNN flag follows the convolution one, as the legacy flag sets both
        torch.backends.cudnn.conv.fp32_precision = torch.backends.cudnn.rnn.fp32_precision = conv
        torch.backends.cuda.matmul.fp32_precision = matmul
    try:
        yield tf32_state()
    finally:
        if legacy is not None:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
        else:
            (torch.backends.cudnn.conv.fp32_precision, torch.backends.cudnn.rnn.fp32_precision,
             torch.backends.cuda.matmul.fp32_precision) = saved


def device_kind(device, *, cpu_detail: bool = False) -> str:
    """The kind of a torch device (a string or :class:`torch.device`): ``cpu``, ``cuda/<GPU name>`` (e.g.
    ``cuda/NVIDIA H100 80GB HBM3``), or the device type for other backends (``mps``, ``meta``). With
    ``cpu_detail`` a CPU is ``cpu/<CPU model>/<threads>t``, the kind cost constants are measured for (a CPU's speed
    depends on its model and the threads torch uses; docs/planning.md "Calibration")."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda/{torch.cuda.get_device_name(index)}"
    if device.type == "cpu" and cpu_detail:
        return f"cpu/{_cpu_model()}/{torch.get_num_threads()}t"
    return device.type


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else what :mod:`platform` says)."""
    import platform
    from pathlib import Path

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
