"""Queries, keys and values of multi-head latent attention (DeepSeek-V3; docs/engine.md, "Mixture of experts").

``modeling_deepseek_v3.py``: the queries come from ``q_proj`` (or the low-rank ``q_a_proj`` -> RMSNorm
``q_a_layernorm`` -> ``q_b_proj``), split per head into a content part ``q_nope`` and a rotary part ``q_rope``;
``kv_a_proj_with_mqa`` compresses the input into a latent ``c`` and one rotary key ``k_rope`` per token;
``kv_b_proj(kv_a_layernorm(c))`` expands the latent into the heads' content keys ``k_nope`` and values. The key of
a head is ``[k_nope | k_rope]`` with the one rotated ``k_rope`` shared by all heads; values may be narrower or
wider than keys (``v_head_dim``).

Rules: the projections are linear maps (epsilon rule, ``linear`` stabiliser on each output), the two norms take
the decoder's norm rule, the rotations are :class:`~palrp_bench.lrp.positional.DecoupledRoPE` (sinks when asked
for), the split and the copy of ``k_rope`` to every head are linear (the shared key collects the gradient of every
head). Attention itself is the decoder's (:func:`palrp_bench.lrp.rules.attention`).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..lrp import rules
from ..lrp.composites import Composite
from ..lrp.positional import DecoupledRoPE
from ..lrp.stabilizers import Stabilizers

__all__ = ["latent_qkv"]


def latent_qkv(attn, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, config, composite: Composite,
               stab: Stabilizers, norm: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
               interleaved: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q [B, H, T, n + r], k [B, H, T, n + r], v [B, H, T, v_head_dim])`` of the attention input ``h``
    ``[B, T, D]`` (module docstring; ``n = qk_nope_head_dim``, ``r = qk_rope_head_dim``); ``norm(module, x)`` is the
    decoder's norm under the composite; ``interleaved``: the rotary dimensions are interleaved pairs
    (``config.rope_interleave``)."""
    b, t, _ = h.shape
    nope, rope = int(config.qk_nope_head_dim), int(config.qk_rope_head_dim)
    value, latent = int(config.v_head_dim), int(config.kv_lora_rank)

    def linear(module, x):
        return rules.stabilize(module(x), stab.linear)

    if getattr(attn, "q_proj", None) is not None:
        q = linear(attn.q_proj, h)
    else:
        q = linear(attn.q_b_proj, norm(attn.q_a_layernorm, linear(attn.q_a_proj, h)))
    q_nope, q_rope = q.view(b, t, -1, nope + rope).transpose(1, 2).split([nope, rope], dim=-1)
    compressed, k_rope = linear(attn.kv_a_proj_with_mqa, h).split([latent, rope], dim=-1)
    kv = linear(attn.kv_b_proj, norm(attn.kv_a_layernorm, compressed))
    k_nope, v = kv.view(b, t, -1, nope + value).transpose(1, 2).split([nope, value], dim=-1)
    q_rope = DecoupledRoPE.apply(q_rope, cos, sin, composite.product, stab.add, interleaved)
    k_rope = DecoupledRoPE.apply(k_rope.view(b, 1, t, rope), cos, sin, composite.product, stab.add, interleaved)
    q = torch.cat((q_nope, q_rope), dim=-1)
    k = torch.cat((k_nope, k_rope.expand(-1, k_nope.shape[1], -1, -1)), dim=-1)
    return q, k, v
