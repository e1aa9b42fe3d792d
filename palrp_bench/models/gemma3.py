"""The Gemma 3 family as decoder specs: text-only ``Gemma3ForCausalLM`` (``model_type`` ``gemma3_text``, e.g.
Gemma 3 1B) and the multimodal ``Gemma3ForConditionalGeneration`` (``gemma3``, e.g. Gemma 3 4B) explained on text.

Gemma 2's norms, scaled embeddings, attention scale and GeGLU (see :mod:`palrp_bench.models.gemma2`), plus:

* ``(1 + w)`` RMSNorms on queries and keys per head before the rotation (``q_norm``, ``k_norm``);
* two RoPE tables: local layers (``sliding_attention``) and global layers (``full_attention``) each have their own
  base and scaling (``rotary_emb(x, positions, layer_type)``); each layer's sinks copy its own table;
* no attention soft-capping (``modeling_gemma3.py`` never passes ``attn_logit_softcapping`` to the attention);
  the text-only causal LM caps its logits when ``final_logit_softcapping`` is set, the multimodal head never does.

The multimodal model's language model lives at ``model.language_model``; its text config is
``config.text_config``. Images are not explained (text-only inputs, as the tasks here are text tasks).
"""
from __future__ import annotations

from dataclasses import replace

from .decoder import DecoderSpec, check_causal, check_layer_types, register_decoder
from .gemma2 import GEMMA_NORMS

__all__ = ["GEMMA3", "GEMMA3_MULTIMODAL"]

GEMMA3 = register_decoder(DecoderSpec(family="gemma3", model_types=("gemma3_text",), sliding_window="layer_types",
                                      rope_tables="per_layer_type", qk_norm=("q_norm", "k_norm"),
                                      final_softcap="final_logit_softcapping",
                                      checks=(check_layer_types, check_causal), **GEMMA_NORMS))

GEMMA3_MULTIMODAL = register_decoder(replace(GEMMA3, family="gemma3_multimodal", model_types=("gemma3",),
                                             backbone="model.language_model"))
