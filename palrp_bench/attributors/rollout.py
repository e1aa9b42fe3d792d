"""Attention rollout (Abnar and Zuidema 2020) and gradient-weighted attention rollout (Chefer et al. 2021a).

Both are the AttnLRP paper's appendix A.1.4, Eq. 23: with ``R_{-1} = I``, for every layer ``k`` from the first to the
last ``R_k = (I + A_k) R_{k-1}``; the explained output's row of the final ``R`` (the explained token of a decoder,
the CLS token of a ViT) is the relevance of every input token. The two methods differ only in ``A_k``:

* ``attn_rollout``: the head mean of the attention weights, ``A_k = E_h(A_k^h)``; it reads no output, so the
  target and the foil of a contrastive call change nothing but the row read (the explained position);
* ``grad_attn_rollout``: the head mean of the positive part of gradient times weights,
  ``A_k = E_h((dA_k^h * A_k^h)^+)``, the gradient of the explained logit (Chefer et al. 2021a, their rule 5), of
  ``f_j - f_foil`` for a contrastive call (the positive part makes it no difference of two explanations).

Outlier removal (Gildenblat 2023, as the AttnLRP paper defines it): with discard threshold ``dt`` in [0, 1], every
entry of ``A_k`` above the ``dt``-quantile ``Q(dt)`` of that layer's entries is set to 0; the quantile runs over the
(query, key) pairs that exist (causal and padding masks excluded), per sample. ``dt = 1`` discards nothing (the
paper's value for the language models; 0.99 for rollout and 0.91 for gradient rollout on the ViT, its Table 5).
No row normalisation (the paper's Eq. 23 and Chefer et al.'s code add ``I`` without normalising).

ViT relevance is per patch token (the CLS row without its prefix columns), painted over the patch's pixels.
Encoder-decoders (T5): the product runs over the encoder's self-attention layers (the only maps whose queries and
keys are both encoder tokens, :func:`~.base.feature_attention_sites`) and no encoder row is the explained
output's, so the relevance is the mean of the real encoder rows of ``R`` (:func:`~.base.encoder_rows`);
``grad_attn_rollout`` takes the gradient of the decoder's explained logit (docs/baselines.md, "T5").
Cost: one forward (rollout), one forward and one backward (gradient rollout).
"""
from __future__ import annotations

import torch

from . import register_attributor
from .attention_maps import LayerAttention, layer_attention
from .base import AttributorCall, AttributorResult, attention_row, encoder_rows, per_patch

__all__ = ["rollout", "discard_outliers", "attn_rollout", "grad_attn_rollout"]


def discard_outliers(a: torch.Tensor, valid: torch.Tensor | None, threshold: float) -> torch.Tensor:
    """``a`` ``[B, T, T]`` with every entry above its sample's ``threshold``-quantile (over the valid entries)
    set to 0; ``threshold >= 1`` returns ``a`` unchanged."""
    if threshold >= 1.0:
        return a
    out = a.clone()
    for b in range(a.shape[0]):
        entries = a[b] if valid is None else a[b][valid[b, 0]]
        q = torch.quantile(entries.flatten(), float(threshold))
        out[b] = torch.where(a[b] > q, torch.zeros_like(a[b]), a[b])
    return out


def rollout(layers: list[torch.Tensor], valids: list[torch.Tensor | None], threshold: float) -> torch.Tensor:
    """``R = prod_k (I + A_k)`` (last layer leftmost) of head-reduced maps ``A_k`` ``[B, T, T]``, float64."""
    b, t, _ = layers[0].shape
    eye = torch.eye(t, dtype=torch.float64, device=layers[0].device).expand(b, t, t)
    r = eye.clone()
    for a, valid in zip(layers, valids):
        a = discard_outliers(a.double(), valid, threshold)
        r = torch.bmm(eye + a, r)
    return r


def _result(call: AttributorCall, r: torch.Tensor, backward: int) -> AttributorResult:
    weights = encoder_rows(call)
    if weights is None:
        rows = attention_row(call).to(r.device)
        relevance = r[torch.arange(r.shape[0], device=r.device), rows]  # [B, T]
    else:
        relevance = torch.einsum("bi,bij->bj", weights.to(r), r)
    ones = torch.ones(call.batch, dtype=torch.long)
    if call.modality == "tokens":
        return AttributorResult(relevance, ones, ones * backward)
    return AttributorResult(per_patch(call.twin, call.prepared, relevance), ones, ones * backward, per_patch=True)


def _maps(layers: list[LayerAttention], gradient: bool) -> list[torch.Tensor]:
    if gradient:
        return [(la.grad.double() * la.weights.double()).clamp(min=0).mean(1) for la in layers]
    return [la.weights.double().mean(1) for la in layers]


@register_attributor("attn_rollout")
def attn_rollout(call: AttributorCall) -> AttributorResult:
    layers = layer_attention(call, with_grad=False)
    r = rollout(_maps(layers, False), [la.valid for la in layers], float(call.params["discard_threshold"]))
    return _result(call, r, backward=0)


@register_attributor("grad_attn_rollout")
def grad_attn_rollout(call: AttributorCall) -> AttributorResult:
    layers = layer_attention(call, with_grad=True)
    r = rollout(_maps(layers, True), [la.valid for la in layers], float(call.params["discard_threshold"]))
    return _result(call, r, backward=1)
