"""LLaVA as a vision-language spec (``LlavaForConditionalGeneration``, e.g. LLaVA-1.5; docs/engine.md
"Vision-language models").

* Vision tower (``model.vision_tower``, :class:`~palrp_bench.models.vision_towers.ViTEncoderTower`): CLIP's ViT (or
  SigLIP's) with its CLS token and learned absolute position table (kind ``learned_absolute``: one leaf per image,
  always read), ``pre_layrnorm``, the encoder layers up to ``vision_feature_layer`` (default ``-2``: the output of the
  second-to-last layer; ``post_layernorm`` is never applied), the CLS row dropped (``vision_feature_select_strategy
  == "default"``): one language-model token per patch, row-major.
* Projector (``model.multi_modal_projector``): ``linear_2(act(linear_1(x)))`` (role ``projector``; GELU under the
  identity rule).
* Language model (``model.language_model``): the decoder spec registered for ``text_config.model_type`` (LLaMA for
  LLaVA-1.5; Mistral, Qwen2, ... for other LLaVA checkpoints), causal attention over text and image tokens, one
  position per token.

Refused in one line: several feature layers concatenated (``vision_feature_layer`` a list), the ``full`` feature
selection (the CLS row as a token), LLaVA-NeXT's tiled images (another model class).
"""
from __future__ import annotations

from ..lrp import rules
from ..lrp.composites import Composite
from .vision_towers import TowerOutput, ViTEncoderTower, linear_by_role
from .vlm import VlmSpec, register_vlm

__all__ = ["LLAVA"]


def _tower(model) -> ViTEncoderTower:
    config = model.config
    return ViTEncoderTower(model.model.vision_tower, int(config.vision_feature_layer), post_norm=False,
                           drop_prefix=True)


def _check(model) -> str | None:
    config = model.config
    if not isinstance(config.vision_feature_layer, int):
        return (f"vision_feature_layer {config.vision_feature_layer} (several layers concatenated) is not supported; "
                "use one layer")
    if config.vision_feature_select_strategy != "default":
        return (f"vision_feature_select_strategy {config.vision_feature_select_strategy!r} is not supported (the CLS "
                "row as a token); use 'default'")
    return None


def project(model, tower: TowerOutput, composite: Composite):
    """LLaVA's MLP projector on every patch's features: ``[n, Np, D_vision]`` -> ``[n, Np, D_text]``."""
    projector = model.model.multi_modal_projector
    h = rules.activation(linear_by_role(projector.linear_1, tower.features, composite, "projector"), projector.act,
                         composite.ungated_activation)
    return linear_by_role(projector.linear_2, h, composite, "projector")


LLAVA = register_vlm(VlmSpec(
    family="llava", model_types=("llava",), tower=_tower,
    layout=lambda model, tower, inputs: tower.layout(inputs["pixel_values"], lambda side: (side, side, 1)),
    project=project, checks=(_check,),
    image_shape=lambda config: ((config.vision_config.image_size // config.vision_config.patch_size) ** 2,) * 2))
