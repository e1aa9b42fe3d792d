"""The Phi-3 family as a decoder spec (Phi-3 / Phi-3.5 mini and medium; Hugging Face ``model_type`` ``phi3``).

LLaMA's wiring with fused projections (``qkv_proj`` = ``[q | k | v]``; ``gate_up_proj`` = ``[gate | up]``),
partial rotary when ``rope_parameters['partial_rotary_factor'] < 1`` (the rotary module's tables are then narrower
than a head), LongRoPE scaling (short/long factors chosen by the model's own rotary module from the longest
position in the batch, as the library does) and a sliding window on every layer when ``config.sliding_window`` is
set.
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder

__all__ = ["PHI3"]

PHI3 = register_decoder(DecoderSpec(family="phi3", model_types=("phi3",), sliding_window="all_layers",
                                    fused_qkv="qkv_proj", qkv_layout="concat", fused_gate_up="gate_up_proj",
                                    activation="activation_fn"))
