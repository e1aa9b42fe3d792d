"""The Gemma 3 family: the text-only ``Gemma3ForCausalLM`` (``model_type`` ``gemma3_text``, e.g. Gemma 3 1B) as a decoder
spec, and the multimodal ``Gemma3ForConditionalGeneration`` (``gemma3``, e.g. Gemma 3 4B) as a vision-language spec
(docs/engine.md "Vision-language models").

The language model: Gemma 2's norms, scaled embeddings, attention scale and GeGLU (see
:mod:`palrp_bench.models.gemma2`), plus

* ``(1 + w)`` RMSNorms on queries and keys per head before the rotation (``q_norm``, ``k_norm``);
* two RoPE tables: local layers (``sliding_attention``) and global layers (``full_attention``) each have their own
  base and scaling (``rotary_emb(x, positions, layer_type)``); each layer's sinks copy its own table;
* no attention soft-capping (``modeling_gemma3.py`` never passes ``attn_logit_softcapping`` to the attention);
  the text-only causal LM caps its logits when ``final_logit_softcapping`` is set, the multimodal head never does.

The multimodal model (its language model at ``model.language_model``, text config ``config.text_config``) adds

* a SigLIP tower (``model.vision_tower``, :class:`~palrp_bench.models.vision_towers.ViTEncoderTower`): learned absolute
  positions (kind ``learned_absolute``), no CLS token, every layer and ``post_layernorm``;
* the projector (``model.multi_modal_projector``): the patches average-pooled in ``k x k`` blocks (a linear map, the
  epsilon rule) to ``mm_tokens_per_image`` tokens, a ``(1 + w)`` RMSNorm, and a matrix product with
  ``mm_input_projection_weight`` (role ``projector``);
* image tokens that attend to every token of their image (the library does so when ``token_type_ids`` are given, as
  the processor returns them; the sliding window still bounds the keys from below), causal attention elsewhere.

Text-only inputs of the multimodal model are explained by its language model alone.
"""
from __future__ import annotations

import torch.nn.functional as F

from ..lrp import rules
from ..lrp.composites import Composite
from ..lrp.gamma import gamma_linear
from .decoder import DecoderSpec, check_causal, check_layer_types, register_decoder
from .gemma2 import GEMMA_NORMS
from .vision_towers import TowerOutput, ViTEncoderTower
from .vlm import VlmSpec, register_vlm

__all__ = ["GEMMA3", "GEMMA3_VLM", "project"]

GEMMA3 = register_decoder(DecoderSpec(family="gemma3", model_types=("gemma3_text",), sliding_window="layer_types",
                                      rope_tables="per_layer_type", qk_norm=("q_norm", "k_norm"),
                                      final_softcap="final_logit_softcapping",
                                      checks=(check_layer_types, check_causal), **GEMMA_NORMS))


def project(model, tower: TowerOutput, composite: Composite):
    """Gemma 3's projector: ``[n, Np, D_vision]`` patches -> ``[n, mm_tokens_per_image, D_text]`` (module
    docstring)."""
    projector = model.model.multi_modal_projector
    x = tower.features
    n, np_, d = x.shape
    side, k = int(projector.patches_per_image), int(projector.kernel_size)
    pooled = F.avg_pool2d(x.transpose(1, 2).reshape(n, d, side, side), k, k).flatten(2).transpose(1, 2)
    norm = projector.mm_soft_emb_norm
    normed = rules.rms_norm(pooled, norm.weight, norm.eps, composite.norm, offset=1.0, weight_before_cast=True)
    weight = projector.mm_input_projection_weight
    gamma = composite.gamma_for("projector")
    out = normed @ weight if gamma is None else gamma_linear(normed, weight.t(), None, gamma)
    return out.type_as(x)


def _layout(model, tower: ViTEncoderTower, inputs: dict):
    per_side = int(round(model.config.mm_tokens_per_image ** 0.5))
    return tower.layout(inputs["pixel_values"], lambda side: (per_side, per_side, side // per_side))


GEMMA3_VLM = register_vlm(VlmSpec(
    family="gemma3", model_types=("gemma3",),
    tower=lambda model: ViTEncoderTower(model.model.vision_tower, -1, post_norm=True, drop_prefix=False),
    layout=_layout, project=project, inputs=("token_type_ids",), image_blocks=True,
    image_shape=lambda config: ((config.vision_config.image_size // config.vision_config.patch_size) ** 2,
                                int(config.mm_tokens_per_image))))
