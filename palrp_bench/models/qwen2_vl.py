"""Qwen2-VL and Qwen2.5-VL as vision-language specs (``Qwen2VLForConditionalGeneration``,
``Qwen2_5_VLForConditionalGeneration``; docs/engine.md "Vision-language models").

* Language model (``model.language_model``): Qwen2's wiring (q/k/v biases, GQA, RMSNorm, gated SiLU MLP, sliding
  windows by ``layer_types``) with M-RoPE (positional kind ``mrope``): the rotary frequencies split into temporal,
  height and width sections (``rope_parameters["mrope_section"]``), 3-D positions from the library's
  ``get_rope_index``, which needs ``mm_token_type_ids`` (the processor returns them) whenever images are given.
* Vision tower (``model.visual``, :class:`~palrp_bench.models.vision_towers.QwenVisionTower`): 2-D RoPE (kind
  ``rope_2d``), full attention within each image (Qwen2-VL) or within windows except in ``fullatt_block_indexes``
  (Qwen2.5-VL); ``image_grid_thw`` gives each image's patch grid.
* Projector: the patch merger (``visual.merger``): its norm (LayerNorm; Qwen2.5-VL RMSNorm) on every patch, the
  ``m x m`` patches of a block concatenated, then ``Linear, GELU, Linear`` (role ``projector``): one language-model
  token per block, row-major over the image's merged grid.
"""
from __future__ import annotations

import torch

from ..lrp import rules
from ..lrp.composites import Composite
from .decoder import DecoderSpec, check_layer_types
from .vision_towers import QwenVisionTower, TowerOutput, linear_by_role, tower_norm
from .vlm import VlmSpec, register_vlm

__all__ = ["QWEN2_VL_TEXT", "QWEN2_VL", "QWEN2_5_VL"]

#: the language model of both families: Qwen2's wiring with M-RoPE
QWEN2_VL_TEXT = DecoderSpec(family="qwen2_vl_text", model_types=("qwen2_vl_text", "qwen2_5_vl_text"),
                            positional="mrope", sliding_window="layer_types", checks=(check_layer_types,))


def merge_patches(model, tower: TowerOutput, composite: Composite) -> torch.Tensor:
    """The patch merger: ``[n, Np, D_vision]`` -> ``[n, Np / m^2, D_text]`` (module docstring)."""
    merger = model.model.visual.merger
    x = tower_norm(merger.ln_q, tower.features, composite)
    n, np_, d = x.shape
    x = x.reshape(n, np_ * d // merger.hidden_size, merger.hidden_size)
    first, act, second = merger.mlp
    h = rules.activation(linear_by_role(first, x, composite, "projector"), act, composite.ungated_activation)
    return linear_by_role(second, h, composite, "projector")


def _layout(model, tower: QwenVisionTower, inputs: dict):
    return tower.layout(torch.as_tensor(inputs["image_grid_thw"]).cpu())


#: the side of the image the plan prices a Qwen2-VL sample with: images vary, 448 x 448 pixels is a common working
#: size (the processor's default range is 56 x 56 to about 3584 x 3584)
NOMINAL_IMAGE_SIDE = 448


def image_shape(config) -> tuple[int, int]:
    """``(patches, tokens)`` of a :data:`NOMINAL_IMAGE_SIDE` square image."""
    vision = config.vision_config
    side = NOMINAL_IMAGE_SIDE // int(vision.patch_size)
    return side * side, side * side // int(vision.spatial_merge_size) ** 2


_COMMON = dict(layout=_layout, image_shape=image_shape, project=merge_patches, language=QWEN2_VL_TEXT, language_model="model.language_model",
               inputs=("image_grid_thw", "mm_token_type_ids"), required=("image_grid_thw", "mm_token_type_ids"),
               positions="mrope")

QWEN2_VL = register_vlm(VlmSpec(family="qwen2_vl", model_types=("qwen2_vl",),
                                tower=lambda model: QwenVisionTower(model.model.visual, windowed=False), **_COMMON))
QWEN2_5_VL = register_vlm(VlmSpec(family="qwen2_5_vl", model_types=("qwen2_5_vl",),
                                  tower=lambda model: QwenVisionTower(model.model.visual, windowed=True), **_COMMON))
