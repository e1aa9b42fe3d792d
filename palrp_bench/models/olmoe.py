"""The OLMoE family as a decoder spec (OLMoE-1B-7B; Hugging Face ``model_type`` ``olmoe``).

LLaMA's wiring with an RMSNorm over the whole ``q_proj`` and ``k_proj`` outputs (all heads at once, before the
split into heads and the rotation: ``qk_norm_scope="projection"``) and a sparse block in every layer
(``modeling_olmoe.py``): a softmax router in float32, the top ``num_experts_per_tok`` probabilities renormalised only
with ``norm_topk_prob`` (off in the released models) and cast to the model dtype, gated SiLU experts
(:mod:`palrp_bench.models.moe`). No sliding window. Refused: ``clip_qkv`` (a clamp of q, k and v the twin does not
reproduce; the released models have none).
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder
from .moe import MoeSpec

__all__ = ["OLMOE"]


def _clip_qkv(config) -> str | None:
    if getattr(config, "clip_qkv", None) is not None:
        return "clip_qkv is not supported (set config.clip_qkv = None only if the checkpoint was trained without it)"
    return None


OLMOE = register_decoder(DecoderSpec(family="olmoe", model_types=("olmoe",), qk_norm=("q_norm", "k_norm"),
                                     qk_norm_scope="projection", checks=(_clip_qkv,),
                                     moe=MoeSpec(normalize="norm_topk_prob")))
