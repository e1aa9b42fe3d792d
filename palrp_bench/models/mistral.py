"""The Mistral family as a decoder spec (Mistral 7B v0.1-v0.3, Mistral-Nemo-style explicit ``head_dim``).

LLaMA's wiring (RMSNorm, gated SiLU MLP, RoPE through the model's own rotary module, GQA) with an explicit
``head_dim`` (read from the attention module) and a sliding window on every layer when ``config.sliding_window`` is
set (Hugging Face ``MistralModel``: ``create_sliding_window_causal_mask``); the window is part of the twin's
attention mask.
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder

__all__ = ["MISTRAL"]

MISTRAL = register_decoder(DecoderSpec(family="mistral", model_types=("mistral",), sliding_window="all_layers"))
