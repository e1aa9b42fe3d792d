"""The Qwen2 family as a decoder spec (Qwen2, Qwen2.5; Hugging Face ``model_type`` ``qwen2``).

LLaMA's wiring with biases on the q, k and v projections (used by the model's own linears, so the twin needs no
option for them; the accounting identity books them as ``b * grad_b``) and a sliding window on the layers whose
``config.layer_types`` entry is ``sliding_attention`` (``use_sliding_window`` with ``max_window_layers``).
"""
from __future__ import annotations

from .decoder import DecoderSpec, check_layer_types, register_decoder

__all__ = ["QWEN2"]

QWEN2 = register_decoder(DecoderSpec(family="qwen2", model_types=("qwen2",), sliding_window="layer_types",
                                     checks=(check_layer_types,)))
