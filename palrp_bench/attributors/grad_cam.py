"""Grad-CAM adapted to transformers (Chefer et al. 2021b, their Grad-CAM baseline; AttnLRP paper Sec. 4.1.1: "we
weight the last attention map with the gradient").

In the last layer, take the explained output's query row of every head's attention weights ``A^h[r, :]`` (the
explained token of a decoder, the CLS token of a ViT) and the gradient of the explained logit with respect to them,
``G^h[r, :]`` (of ``f_j - f_foil`` for a contrastive call). The head weight is the mean gradient over the row's feature keys, ``w_h = mean_k G^h[r, k]`` (the
channel weights of Grad-CAM, heads playing the channels); the relevance of key ``k`` is ``mean_h(w_h A^h[r, k])``.
The feature keys are the real tokens a decoder's row can attend to, or the patch tokens of a ViT (CLS excluded).

``relu``: Chefer et al.'s code clamps the map at 0; the AttnLRP paper reports that its Grad-CAM heatmaps sometimes
looked inverted, i.e. signed, so the default keeps the sign (``relu: false``). ViT relevance is per patch, painted
over its pixels. Cost: one forward and one backward.

Encoder-decoders (T5): the last encoder self-attention layer (:func:`~.base.feature_attention_sites`), whose rows
and keys are encoder tokens, with the gradient of the decoder's explained logit. No encoder row is the explained
output's, so the map is the mean of the per-row maps over the real encoder rows ``r``
(:func:`~.base.encoder_rows`): ``mean_r mean_h(w_hr A^h[r, k])``, ``w_hr = mean_k G^h[r, k]`` (docs/baselines.md,
"T5"); with one row it is the formula above.
"""
from __future__ import annotations

import torch

from . import register_attributor
from .attention_maps import layer_attention
from .base import AttributorCall, AttributorResult, attention_row, encoder_rows, patch_grid, prefix_tokens

__all__ = ["grad_cam"]


@register_attributor("grad_cam", passes=lambda p, n: (1, 1))
def grad_cam(call: AttributorCall) -> AttributorResult:
    last = layer_attention(call, with_grad=True)[-1]
    b, _, t, _ = last.weights.shape
    start = prefix_tokens(call.twin)
    valid = last.valid if last.valid is not None else torch.ones(b, 1, t, t, dtype=torch.bool,
                                                                 device=last.weights.device)
    mean_rows = encoder_rows(call)
    if mean_rows is None:  # the explained output's row: [B, H, 1, T]
        idx = torch.arange(call.batch, device=last.weights.device)
        rows = attention_row(call).to(last.weights.device)
        a, g, keys = (m[idx, :, rows][:, :, None] for m in (last.weights, last.grad, valid))
    else:                  # every encoder row: [B, H, T, T]
        a, g, keys = last.weights, last.grad, valid
    a, g, keys = a.double()[..., start:], g.double()[..., start:], keys[..., start:]
    weight = torch.where(keys, g, torch.zeros_like(g)).sum(-1, keepdim=True) / keys.sum(-1, keepdim=True)
    cam = (weight * a).mean(1)  # [B, rows, T]
    cam = cam[:, 0] if mean_rows is None else torch.einsum("bi,bij->bj", mean_rows.to(cam), cam)
    if call.params["relu"]:
        cam = cam.clamp(min=0)
    ones = torch.ones(call.batch, dtype=torch.long)
    if call.modality == "tokens":
        return AttributorResult(cam, ones, ones.clone())
    return AttributorResult(cam.reshape(-1, *patch_grid(call.twin, call.prepared)), ones, ones.clone(), per_patch=True)
