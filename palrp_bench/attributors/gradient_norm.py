"""Gradient norms (Simonyan et al. 2014; Li et al. 2016): the "Gradient" baselines of "A Close Look at
Decomposition-based Attributions for Transformer Language Models" (its section 3.3; section 5.1 reports
``Gradient_l2`` under the name "Gradient").

The score of token ``i`` is a norm of the gradient of the explained output with respect to the token's input
embedding ``e_i`` (``[D]``):

* ``gradient_l1``: ``sum_d |g_i[d]|``;
* ``gradient_l2``: ``sum_d g_i[d]^2``, the *squared* L2 norm, as the paper defines it.

``g_i = d f / d e_i`` with ``f`` the explained logit, or ``f_j - f_foil`` for a contrastive call
(:func:`~.base.explained_of`). The embedding is the one the other gradient methods take (:func:`~.base.input_of`:
the word-embedding output that ``grad_x_input`` multiplies). Where a learned position embedding (and BERT's token
type embedding) is added to it, ``z = e + p (+ t)`` passes the same gradient to every addend, so the gradient with
respect to the token embedding *is* the gradient with respect to the full embedding: the scores do not depend on
the run's ``embeddings`` switch (docs/baselines.md, "Gradient norms"). On a ViT the norm runs over each pixel's
colour channels. Scores are non-negative and zero at padding. Cost: one forward and one backward.
"""
from __future__ import annotations

import torch

from . import register_attributor
from .base import AttributorCall, AttributorResult, explained_of, input_of, logits_from

__all__ = ["input_gradient", "gradient_l1", "gradient_l2"]


def input_gradient(call: AttributorCall) -> torch.Tensor:
    """``d f / d x`` of the explained value of every sample (one backward of the batch sum: each sample's
    gradient is its own) with respect to the model input ``x`` (``[B, T, D]`` / ``[B, 3, H, W]``), in at least
    float32."""
    x = input_of(call.twin, call.prepared).clone().requires_grad_(True)
    with torch.enable_grad():
        explained = explained_of(call, logits_from(call.twin, call.prepared, x, **call.options))
        (grad,) = torch.autograd.grad(explained.sum(), x)
    return grad.detach().to(torch.promote_types(grad.dtype, torch.float32))


def _norm(call: AttributorCall, power: int) -> AttributorResult:
    g = input_gradient(call).abs() ** power
    scores = g.sum(-1) if call.modality == "tokens" else g.sum(1)
    ones = torch.ones(call.batch, dtype=torch.long)
    return AttributorResult(scores, ones, ones.clone())


@register_attributor("gradient_l1", passes=lambda p, n: (1, 1))
def gradient_l1(call: AttributorCall) -> AttributorResult:
    return _norm(call, 1)


@register_attributor("gradient_l2", passes=lambda p, n: (1, 1))
def gradient_l2(call: AttributorCall) -> AttributorResult:
    return _norm(call, 2)
