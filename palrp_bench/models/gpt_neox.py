"""The GPT-NeoX family as a decoder spec (Pythia, GPT-NeoX-20B; Hugging Face ``model_type`` ``gpt_neox``).

What differs from LLaMA (``modeling_gpt_neox.py``):

* LayerNorm with weight and bias (identity rule: the standard deviation is a constant, the centring stays linear;
  biases are booked as ``b * grad_b`` in the accounting identity);
* fused ``query_key_value`` projection laid out per head (``[q_h | k_h | v_h]``), output projection ``dense``;
* partial rotary: ``rope_parameters['partial_rotary_factor']`` (formerly ``rotary_pct``; 0.25 by default) of
  each head is rotated; only those dimensions go through the RoPE products and feed the cos/sin sinks;
* parallel residual (``use_parallel_residual``, on for Pythia): ``x + attn(ln1(x)) + mlp(ln2(x))``;
* ungated GELU MLP (``dense_h_to_4h`` -> GELU -> ``dense_4h_to_h``; the identity rule on the GELU).
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder

__all__ = ["GPT_NEOX"]

GPT_NEOX = register_decoder(DecoderSpec(
    family="gpt_neox", model_types=("gpt_neox",), norm="layer", mlp="plain", backbone="gpt_neox",
    embed_tokens="embed_in", final_norm="final_layer_norm", attention="attention", head_dim_attr="head_size",
    fused_qkv="query_key_value", qkv_layout="per_head", o_proj="dense", up_proj="dense_h_to_4h",
    down_proj="dense_4h_to_h", activation="act", parallel_residual="use_parallel_residual"))
