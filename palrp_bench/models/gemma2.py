"""The Gemma 2 family as a decoder spec (Hugging Face ``model_type`` ``gemma2``).

What differs from LLaMA (``modeling_gemma2.py``):

* RMSNorm with gain ``1 + w``, computed entirely in float32 and cast back after the gain;
* four norms per layer: ``input_layernorm`` -> attention -> ``post_attention_layernorm`` -> residual,
  ``pre_feedforward_layernorm`` -> MLP -> ``post_feedforward_layernorm`` -> residual;
* embeddings scaled by ``sqrt(hidden_size)`` inside the embedding module (the semantic sink is the scaled
  embedding; Gradient x Input is the same for scaled and unscaled rows);
* attention scale ``query_pre_attn_scalar ** -0.5`` (the module's ``scaling``);
* soft-capping ``c * tanh(s / c)`` of the attention scores (``attn_logit_softcapping``) and of the causal LM's
  logits (``final_logit_softcapping``), under the identity rule; capped attention runs on the eager path;
* GeGLU MLP (``gelu_pytorch_tanh`` gate: the identity rule as for SiLU);
* sliding-window attention on every other layer (``config.layer_types``).
"""
from __future__ import annotations

from .decoder import DecoderSpec, check_causal, check_layer_types, register_decoder

__all__ = ["GEMMA2", "GEMMA_NORMS"]

#: the norm options Gemma 2 and Gemma 3 share
GEMMA_NORMS = dict(norm_offset=1.0, norm_weight_before_cast=True, attention_out_norm="post_attention_layernorm",
                   mlp_norm="pre_feedforward_layernorm", mlp_out_norm="post_feedforward_layernorm")

GEMMA2 = register_decoder(DecoderSpec(family="gemma2", model_types=("gemma2",), sliding_window="layer_types",
                                      attention_softcap="attn_logit_softcapping",
                                      final_softcap="final_logit_softcapping",
                                      checks=(check_layer_types, check_causal), **GEMMA_NORMS))
