"""How a device computes: its kind (docs/protocol.md, "Numerics on GPUs").

Facts outside our code that decide results on a GPU are recorded with every run:

* **The device kind** (:func:`device_kind`): ``cpu`` or ``cuda/<GPU name>``. Which of several equal values
  ``torch.topk`` returns is the device's choice: CUDA and the CPU remove different tied pixels in the official
  Table 4 procedure (docs/protocol.md section 3), so the pixel-perturbation rows record the kind that ordered ties.
"""
from __future__ import annotations

__all__ = ["device_kind"]


def device_kind(device) -> str:
    """The kind of a torch device (a string or :class:`torch.device`): ``cpu``, ``cuda/<GPU name>`` (e.g.
    ``cuda/NVIDIA H100 80GB HBM3``), or the device type for other backends (``mps``, ``meta``)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda/{torch.cuda.get_device_name(index)}"
    return device.type
