"""The Qwen3-MoE family as a decoder spec (Qwen3-30B-A3B, Qwen3-235B-A22B; Hugging Face ``model_type``
``qwen3_moe``).

Qwen3's attention (per-head RMSNorm on queries and keys before the rotation, no biases; a sliding window on every
layer when ``use_sliding_window`` sets ``config.sliding_window``) with a sparse block in every layer not listed in
``mlp_only_layers`` (``modeling_qwen3_moe.py``): a softmax router in float32, the top ``num_experts_per_tok``
probabilities renormalised with ``norm_topk_prob`` and cast to the model dtype, gated SiLU experts; no shared expert
(:mod:`palrp_bench.models.moe`). lxt's Qwen3-MoE map (upstream, after 2.1) is the reference of the AttnLRP rules
here (docs/engine.md, "Mixture of experts").
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder
from .moe import MoeSpec

__all__ = ["QWEN3_MOE"]

QWEN3_MOE = register_decoder(DecoderSpec(family="qwen3_moe", model_types=("qwen3_moe",), sliding_window="all_layers",
                                         qk_norm=("q_norm", "k_norm"), moe=MoeSpec(normalize="norm_topk_prob")))
