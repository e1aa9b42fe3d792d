"""The Qwen3 family as a decoder spec (dense Qwen3; Hugging Face ``model_type`` ``qwen3``).

Qwen2's wiring without the q/k/v biases (``attention_bias``, default off, is honoured by the model's linears) and
with a per-head RMSNorm on queries and keys before the rotation (``q_norm``, ``k_norm``: identity rule, the
normaliser is a constant like in every other norm).
"""
from __future__ import annotations

from .decoder import DecoderSpec, check_layer_types, register_decoder

__all__ = ["QWEN3"]

QWEN3 = register_decoder(DecoderSpec(family="qwen3", model_types=("qwen3",), sliding_window="layer_types",
                                     qk_norm=("q_norm", "k_norm"), checks=(check_layer_types,)))
