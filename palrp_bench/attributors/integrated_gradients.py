"""Integrated Gradients (Sundararajan et al. 2017) through Captum, on the input embeddings / pixels.

AttnLRP paper appendix A.1.2, Eq. 21: ``IG(x) = (x - x') * int_0^1 grad f_j(x' + a (x - x')) da``, approximated
with ``m`` gradients along the straight path from the baseline ``x'`` to ``x`` (the paper writes the right Riemann
sum, Captum's ``method="riemann_right"``). ``captum.attr.IntegratedGradients`` does the work; the forward it
integrates is the twin's plain forward from the input (:func:`~.base.logits_from`), so for a language model the
integration runs over the embedding output (the AttnLRP paper's choice), for a ViT over the normalised pixels.

A contrastive call (``foil``) integrates the gradient of ``f_j - f_foil`` instead: Captum takes one output index
per row, so the function it differentiates returns the explained value itself (:func:`~.base.explained_of`).

Hyperparameters (``Method.params``): ``n_steps`` (m; the paper gives none: Captum's default 50), ``method`` (Captum's
quadrature: its default ``gausslegendre``, far closer to completeness than the Riemann sums at equal cost,
docs/baselines.md) and ``baseline`` (a constant: 0 = the zero embedding / the zero input, the baseline of the AttnLRP
paper's perturbation experiments). With a zero embedding baseline, a decoder's first RMSNorm makes the integrand
jump within ``a ~ sqrt(eps) / rms(x)`` of the baseline; no quadrature with tens of nodes resolves that, so on
real LLaMA checkpoints the scores do not sum to ``f(x) - f(x')`` (the method's behaviour, not a defect here). Per-token scores sum the embedding dimensions, per-pixel scores the
colour channels. Cost per sample: ``n_steps`` forwards and backwards (``batch_size`` rows per pass).
"""
from __future__ import annotations

import torch

from . import register_attributor
from .base import AttributorCall, AttributorResult, explained_of, input_of, logits_from, select_rows

__all__ = ["integrated_gradients"]


def reduce_features(attribution: torch.Tensor, modality: str) -> torch.Tensor:
    """Per-token (sum over the embedding dimensions) or per-pixel (sum over the colour channels) scores."""
    return attribution.sum(-1) if modality == "tokens" else attribution.sum(1)


def forward_of(call: AttributorCall):
    """The function Captum differentiates: ``(inputs, rows) -> [R]`` explained values (the target logit, or the
    difference to the foil logit; :func:`~.base.explained_of`), with ``rows`` the sample index of each input row
    (Captum repeats it along with the inputs it expands), so Captum is called without a ``target``."""
    def forward(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return explained_of(call, logits_from(call.twin, select_rows(call.prepared, rows), x, **call.options), rows)
    return forward


@register_attributor("integrated_gradients", passes=lambda p, n: (int(p["n_steps"]),) * 2)
def integrated_gradients(call: AttributorCall) -> AttributorResult:
    from captum.attr import IntegratedGradients

    p = call.params
    x = input_of(call.twin, call.prepared)
    rows = torch.arange(call.batch, device=x.device)
    ig = IntegratedGradients(forward_of(call), multiply_by_inputs=True)
    with torch.enable_grad():
        attribution = ig.attribute(x, baselines=float(p["baseline"]), additional_forward_args=(rows,), n_steps=int(p["n_steps"]), method=str(p["method"]),
                                   internal_batch_size=call.batch_size)
    passes = torch.full((call.batch,), int(p["n_steps"]), dtype=torch.long)
    return AttributorResult(reduce_features(attribution, call.modality), passes, passes.clone())
