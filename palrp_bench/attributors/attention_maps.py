"""Per-layer attention weights of one plain eager forward, and their gradient (rollout and Grad-CAM).

The twin runs its ordinary forward (``grad_x_input`` composite, eager attention) inside
:func:`palrp_bench.lrp.rules.attention_hooks` with an :class:`~palrp_bench.lrp.rules.AttentionRecorder`, which
keeps the softmax weights ``A`` ``[B, H, T, T]`` of every layer in order; with ``with_grad`` one backward from the
explained values (summed over the batch: every sample's gradient is its own) gives ``dA = d f_j / d A``, or
``d (f_j - f_foil) / d A`` for a contrastive call (:func:`~.base.explained_of`). Without ``with_grad`` the forward
builds no autograd graph, so attention rollout holds only the recorded scores and weights.

By default only the layers whose queries and keys are both the feature tokens are returned
(:func:`~.base.feature_attention_sites`): every layer of a decoder, an encoder or a ViT; the encoder's
self-attention layers of T5, whose decoder self- and cross-attention maps are over other token sets
(docs/baselines.md, "T5"). Their gradient still flows through the decoder to the explained logit. With
``every_site=True`` every attention call is returned in call order with its ``site`` label (T5: ``encoder``,
``decoder``, ``cross``), for the encoder-decoder rollout.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..lrp import rules
from .base import AttributorCall, explained_of, feature_attention_sites, input_of, logits_from

__all__ = ["LayerAttention", "layer_attention"]


@dataclass
class LayerAttention:
    """One attention call: weights ``[B, H, Tq, Tk]``, their gradient (or None), the boolean mask of the (query,
    key) pairs that exist (``[B, 1, Tq, Tk]``; None = all: a ViT) and the call's ``site`` label (None where the twin
    gives none)."""

    weights: torch.Tensor
    grad: torch.Tensor | None
    valid: torch.Tensor | None
    site: str | None = None


def layer_attention(call: AttributorCall, with_grad: bool, every_site: bool = False) -> list[LayerAttention]:
    """The attention of every layer over the feature tokens of one forward of the batch, first layer first, or of
    every attention call with ``every_site`` (module docstring)."""
    recorder = rules.AttentionRecorder()
    x = input_of(call.twin, call.prepared).clone().requires_grad_(True)
    options = {**call.options, "attention": "eager"}
    sites = None if every_site else feature_attention_sites(call.twin)
    with torch.set_grad_enabled(with_grad), rules.attention_hooks(recorder=recorder):
        logits = logits_from(call.twin, call.prepared, x, **options)
        records = [(*r, site) for r, site in zip(recorder.records, recorder.sites) if sites is None or site in sites]
        weights = [r[1] for r in records]
        grads = [None] * len(weights)
        if with_grad:
            explained = explained_of(call, logits).sum()
            grads = torch.autograd.grad(explained, weights, allow_unused=True)
            grads = [torch.zeros_like(w) if g is None else g for w, g in zip(weights, grads)]
    out = []
    for w, g, (_, _, valid, site) in zip(weights, grads, records):
        b, _, tq, tk = w.shape
        valid = None if valid is None else torch.broadcast_to(valid, (b, 1, tq, tk))
        out.append(LayerAttention(w.detach(), None if g is None else g.detach(), valid, site))
    return out
