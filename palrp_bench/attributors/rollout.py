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

Encoder-decoders (T5): Chefer et al. (2021a)'s rules for an encoder-decoder (their Eqs. 6-10), the "additional
considerations" the AttnLRP paper cites for G×AttnRoll and leaves out "for brevity" (A.1.4), with the same
per-layer ``A_k`` as above (:func:`layer_map`). Three relevance maps, ``R^ss`` ``[Te, Te]`` (encoder tokens),
``R^tt`` ``[Td, Td]`` (decoder tokens) and ``R^ts`` ``[Td, Te]`` (decoder tokens on encoder tokens), start as
``I``, ``I`` and ``0``; in call order

* an encoder self-attention layer: ``R^ss += A R^ss`` (Eq. 6: Eq. 23 written as an update);
* a decoder self-attention layer: ``R^tt += A R^tt`` and ``R^ts += A R^ts`` (Eqs. 6-7);
* a cross-attention layer (``A`` ``[Td, Te]``): ``R^ts += (Rbar^tt)^T A Rbar^ss`` (Eq. 10), where
  ``Rbar = (R - I) / rowsum(R - I) + I`` (Eqs. 8-9: the self-attention's own contribution, row-normalised, plus the
  residual identity); a row of ``R - I`` that sums to 0 (a token no attention has mixed yet, e.g. where the
  positive part of ``dA * A`` vanishes) stays 0 (Chefer et al.'s code would divide 0 by 0 and then zero the whole
  layer's update).

The relevance is the explained decoder position's row of ``R^ts`` over the encoder tokens. The role of each call
comes from the twin's site labels (:func:`~.base.feature_attention_sites`: encoder self-attention;
:func:`~.base.feature_key_sites` less those: cross-attention; the rest: decoder self-attention). The discard
threshold applies to every ``A`` (its quantile over the pairs of real queries and keys). Padded tokens take no part:
their keys are hidden from every real query, and their query rows are set to 0 in every map (a padded decoder row
still attends to the real tokens, and Eq. 10's transpose would carry it into the rows of earlier real tokens), so
a padded batch scores as each sample alone (docs/baselines.md, "T5").
Cost: one forward (rollout), one forward and one backward (gradient rollout).
"""
from __future__ import annotations

import torch

from . import register_attributor
from .attention_maps import LayerAttention, layer_attention
from .base import (AttributorCall, AttributorResult, attention_row, decoder_tokens, feature_attention_sites,
                   feature_key_sites, per_patch, valid_tokens)

__all__ = ["rollout", "encoder_decoder_rollout", "residual_normalised", "layer_map", "discard_outliers",
           "attn_rollout", "grad_attn_rollout"]


def discard_outliers(a: torch.Tensor, valid: torch.Tensor | None, threshold: float) -> torch.Tensor:
    """``a`` ``[B, Tq, Tk]`` with every entry above its sample's ``threshold``-quantile (over the valid entries
    ``valid`` ``[B, 1, Tq, Tk]``) set to 0; ``threshold >= 1`` returns ``a`` unchanged."""
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


def residual_normalised(r: torch.Tensor) -> torch.Tensor:
    """``Rbar = (R - I) / rowsum(R - I) + I`` of ``r`` ``[B, T, T]`` (Chefer et al. 2021a, Eqs. 8-9); a row of
    ``R - I`` summing to 0 stays 0."""
    eye = torch.eye(r.shape[-1], dtype=r.dtype, device=r.device)
    hat = r - eye
    total = hat.sum(-1, keepdim=True)
    return torch.where(total != 0, hat / torch.where(total != 0, total, torch.ones_like(total)), 0.0) + eye


def encoder_decoder_rollout(twin, layers: list[LayerAttention], maps: list[torch.Tensor], threshold: float,
                            encoder_tokens: torch.Tensor, decoder_tokens: torch.Tensor) -> torch.Tensor:
    """``R^ts`` ``[B, Td, Te]`` of Chefer et al. (2021a)'s encoder-decoder rules (module docstring) from every
    attention call of one forward (``layers``, call order) and their head-reduced maps ``maps``, float64; the
    rows of padded queries (``encoder_tokens`` ``[B, Te]`` / ``decoder_tokens`` ``[B, Td]`` False) are dropped."""
    encoder, keyed = feature_attention_sites(twin), feature_key_sites(twin)
    b, te = encoder_tokens.shape
    td = decoder_tokens.shape[1]
    device = maps[0].device

    def eye(t):
        return torch.eye(t, dtype=torch.float64, device=device).expand(b, t, t).clone()

    r_ss, r_tt, r_ts = eye(te), eye(td), torch.zeros(b, td, te, dtype=torch.float64, device=device)
    rbar_ss = None  # residual_normalised(r_ss), computed once after the encoder's last update
    for la, a in zip(layers, maps):
        queries = (encoder_tokens if la.site in encoder else decoder_tokens).to(device)[:, :, None]
        valid = queries[:, None].expand(-1, 1, -1, a.shape[-1])
        valid = valid if la.valid is None else la.valid & valid
        a = discard_outliers(torch.where(queries, a.double(), 0.0), valid, threshold)
        if la.site in encoder:
            r_ss, rbar_ss = r_ss + torch.bmm(a, r_ss), None
        elif la.site in keyed:
            if rbar_ss is None:
                rbar_ss = residual_normalised(r_ss)
            r_ts = r_ts + residual_normalised(r_tt).transpose(1, 2) @ a @ rbar_ss
        else:
            r_tt, r_ts = r_tt + torch.bmm(a, r_tt), r_ts + torch.bmm(a, r_ts)
    return r_ts


def layer_map(la: LayerAttention, gradient: bool) -> torch.Tensor:
    """The head-reduced map ``A_k`` ``[B, Tq, Tk]`` of one attention call, float64: ``E_h(A)`` or, with
    ``gradient``, ``E_h((dA * A)^+)`` (module docstring)."""
    if gradient:
        return (la.grad.double() * la.weights.double()).clamp(min=0).mean(1)
    return la.weights.double().mean(1)


def _relevance(call: AttributorCall, gradient: bool) -> torch.Tensor:
    """``[B, T]`` relevance of the explained output: its row of the rollout (module docstring)."""
    threshold = float(call.params["discard_threshold"])
    rows = attention_row(call)
    if call.twin.encoder_decoder:
        layers = layer_attention(call, with_grad=gradient, every_site=True)
        r = encoder_decoder_rollout(call.twin, layers, [layer_map(la, gradient) for la in layers], threshold,
                                    valid_tokens(call.twin, call.prepared), decoder_tokens(call.twin, call.prepared))
    else:
        layers = layer_attention(call, with_grad=gradient)
        r = rollout([layer_map(la, gradient) for la in layers], [la.valid for la in layers], threshold)
    rows = rows.to(r.device)
    return r[torch.arange(r.shape[0], device=r.device), rows]


def _result(call: AttributorCall, relevance: torch.Tensor, backward: int) -> AttributorResult:
    ones = torch.ones(call.batch, dtype=torch.long)
    if call.modality == "tokens":
        return AttributorResult(relevance, ones, ones * backward)
    return AttributorResult(per_patch(call.twin, call.prepared, relevance), ones, ones * backward, per_patch=True)


@register_attributor("attn_rollout", passes=lambda p, n: (1, 0))
def attn_rollout(call: AttributorCall) -> AttributorResult:
    return _result(call, _relevance(call, gradient=False), backward=0)


@register_attributor("grad_attn_rollout", passes=lambda p, n: (1, 1))
def grad_attn_rollout(call: AttributorCall) -> AttributorResult:
    return _result(call, _relevance(call, gradient=True), backward=1)
