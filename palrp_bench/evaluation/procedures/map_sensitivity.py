"""The per-sample map sensitivity (``runner.map_sensitivity=true``, metric ``map_sensitivity``; docs/evaluation.md,
"Maps that rounding decides"): each sample's map explained once more by a float64 copy of the model, on the same
device, for the same input and explained output (the batch's ``explain_again``), and the distance of the run's map
to it (:func:`palrp_bench.metrics.sensitivity.map_sensitivity`).

Cost: one more explanation per sample, in float64 (on GPUs float64 runs at a fraction of the float32 / bf16 rate),
and the float64 copy of the model, made once per loaded model and kept beside it: 8 bytes per parameter on the
model's device (0.2 MB for the embedded tiny models, 54 GB for LLaMA-2-7B, 64 GB for LLaMA-3.1-8B, beside their 13.5
/ 16 GB in bf16), plus the float64 explanation's activations (twice float32's, four times bf16's). An NF4 model has
no float64 copy (its weights are 4-bit codes) and is refused with one line.
"""
from __future__ import annotations

import copy
from typing import Callable

import torch

from ...errors import BadInputError, is_out_of_memory
from ...metrics.sensitivity import map_sensitivity
from ...rundir import MAP_SENSITIVITY_METRIC, NO_VARIANT, SCALAR
from ...stages import stage
from ..explained import ExplainedBatch
from . import register_procedure

__all__ = ["float64_model", "sensitivity_rows", "run_map_sensitivity"]

#: where :func:`float64_model` keeps the copy (``ModelBundle.extras``)
_COPY = "float64_model"


def _float64_copy(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` deep-copied with every floating-point parameter and buffer in float64 on its device, each created
    directly in float64 (a plain ``deepcopy(model).double()`` would hold a second copy in the model's dtype first);
    shared (tied) tensors stay shared."""
    memo: dict[int, object] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in memo:
            continue
        data = tensor.detach().to(torch.float64) if tensor.is_floating_point() else tensor.detach().clone()
        memo[id(tensor)] = (torch.nn.Parameter(data, requires_grad=tensor.requires_grad)
                            if isinstance(tensor, torch.nn.Parameter) else data)
    return copy.deepcopy(model, memo).eval()


def float64_model(bundle) -> torch.nn.Module:
    """The float64 copy of ``bundle.model`` on its device (made on first use, then kept in ``bundle.extras``)."""
    found = bundle.extras.get(_COPY)
    if found is not None:
        return found
    name = getattr(bundle.config, "name", type(bundle.model).__name__)
    quantization = getattr(getattr(bundle.config, "quantization", None), "value", None)
    if quantization not in (None, "none") or getattr(bundle.model, "is_loaded_in_4bit", False):
        raise BadInputError(f"runner.map_sensitivity needs a float64 copy of {name}, and a {quantization or 'NF4'} "
                            "model has none (its weights are quantized codes)",
                            "set runner.map_sensitivity=false for this model, or run its unquantized config")
    try:
        bundle.extras[_COPY] = _float64_copy(bundle.model)
    except Exception as err:  # noqa: BLE001 - only running out of memory is a user problem here
        if not is_out_of_memory(err):
            raise
        size = sum(p.numel() for p in bundle.model.parameters()) * 8
        raise BadInputError(f"the float64 copy of {name} ({size / 1e9:.1f} GB) that runner.map_sensitivity needs "
                            f"does not fit on {bundle.device}",
                            "run the map sensitivity on a device with that much free memory (or on the CPU), or "
                            "set runner.map_sensitivity=false") from None
    return bundle.extras[_COPY]


def sensitivity_rows(maps, explain64: Callable[[torch.nn.Module], torch.Tensor], bundle) -> list[list[tuple]]:
    """One ``map_sensitivity`` row per sample: ``maps`` ``[B, ...]`` the run's maps, ``explain64(model)`` the same
    samples' maps from the float64 copy of ``bundle.model`` (:func:`float64_model`)."""
    with stage("explain"):
        maps64 = explain64(float64_model(bundle))
    return [[(MAP_SENSITIVITY_METRIC, NO_VARIANT, SCALAR, float(v))] for v in map_sensitivity(maps, maps64)]


@register_procedure(MAP_SENSITIVITY_METRIC,
                    applies_to=("text_classification", "next_token", "image_classification", "image_segmentation"),
                    explanations=1, float64_copy=True, description="distance of the map to the float64 map of the same model (share of "
                                                "samples above 1e-3)")
def run_map_sensitivity(batch: ExplainedBatch, ctx) -> None:
    """Row ``map_sensitivity`` of every sample with finite relevance: its scores against the same samples'
    scores explained again (``batch.explain_again``) by the float64 copy of the model."""
    ok = batch.ok
    rows = sensitivity_rows(batch.scores[ok], lambda model: batch.explain_again(model, ok), batch.bundle)
    for k, j in enumerate(ok):
        batch.rows[j] += rows[k]
