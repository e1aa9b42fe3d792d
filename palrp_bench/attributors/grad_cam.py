"""Grad-CAM adapted to transformers (Chefer et al. 2021b, their Grad-CAM baseline; AttnLRP paper Sec. 4.1.1: "we
weight the last attention map with the gradient").

In the last layer, take the explained output's query row of every head's attention weights ``A^h[r, :]`` (the
explained token of a decoder, the CLS token of a ViT) and the gradient of the explained logit with respect to them,
``G^h[r, :]`` (of ``f_j - f_foil`` for a contrastive call). The head weight is the mean gradient over the row's
feature keys, ``w_h = mean_k G^h[r, k]`` (the channel weights of Grad-CAM, heads playing the channels); the relevance
of key ``k`` is ``mean_h(w_h A^h[r, k])``. The feature keys are the real tokens the row can attend to, or the patch
tokens of a ViT (CLS excluded).

Encoder-decoders (T5): Chefer et al.'s encoder-decoder Grad-CAM (their DETR baseline) reads the last
cross-attention, whose rows are the decoder tokens and whose keys are the encoder tokens, at the explained decoder
row ``r``, and clamps the map at 0; the gradient is the decoder's explained logit's (docs/baselines.md, "T5").
Their code averages the gradient over every query row of that layer; in the last layer only the explained row
reaches the explained logit (every other row's gradient is 0), so that mean is ``w_h`` above divided by the number
of decoder rows: a positive factor per sample, which the map here leaves out.

``relu``: ``None`` (the default) follows Chefer et al.'s rule for the architecture: clamped at 0 on encoder-decoders,
signed elsewhere (their code clamps every map, but the AttnLRP paper reports that its Grad-CAM heatmaps of decoders
and ViTs sometimes looked inverted, i.e. signed); ``true`` / ``false`` clamp or keep the sign everywhere. ViT
relevance is per patch, painted over its pixels. Cost: one forward and one backward.
"""
from __future__ import annotations

import torch

from . import register_attributor
from .attention_maps import layer_attention
from .base import (AttributorCall, AttributorResult, attention_row, feature_attention_sites, feature_key_sites,
                   patch_grid, prefix_tokens)

__all__ = ["grad_cam"]


@register_attributor("grad_cam", passes=lambda p, n: (1, 1))
def grad_cam(call: AttributorCall) -> AttributorResult:
    encoder_decoder = bool(getattr(call.twin, "encoder_decoder", False))
    if encoder_decoder:  # the cross-attention: keys are encoder tokens, queries are not
        encoder, keyed = feature_attention_sites(call.twin), feature_key_sites(call.twin)
        last = [m for m in layer_attention(call, with_grad=True, every_site=True)
                if m.site in keyed and m.site not in encoder][-1]
    else:
        last = layer_attention(call, with_grad=True)[-1]
    b, _, tq, tk = last.weights.shape
    start = prefix_tokens(call.twin)
    valid = last.valid if last.valid is not None else torch.ones(b, 1, tq, tk, dtype=torch.bool,
                                                                 device=last.weights.device)
    idx = torch.arange(call.batch, device=last.weights.device)
    rows = attention_row(call).to(last.weights.device)
    a, g, keys = (m[idx, :, rows] for m in (last.weights, last.grad, valid))      # [B, H or 1, Tk]
    a, g, keys = a.double()[..., start:], g.double()[..., start:], keys[..., start:]
    weight = torch.where(keys, g, torch.zeros_like(g)).sum(-1, keepdim=True) / keys.sum(-1, keepdim=True)
    cam = (weight * a).mean(1)  # [B, Tk]
    relu = call.params["relu"]
    if relu if relu is not None else encoder_decoder:
        cam = cam.clamp(min=0)
    ones = torch.ones(call.batch, dtype=torch.long)
    if call.modality == "tokens":
        return AttributorResult(cam, ones, ones.clone())
    return AttributorResult(cam.reshape(-1, *patch_grid(call.twin, call.prepared)), ones, ones.clone(), per_patch=True)
