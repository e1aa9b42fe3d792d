"""The DeepSeek-V3 family as a decoder spec (DeepSeek-V3, Kimi K2, Moonlight; Hugging Face ``model_type``
``deepseek_v3``).

What differs from LLaMA (``modeling_deepseek_v3.py``):

* multi-head latent attention (:mod:`palrp_bench.models.latent_attention`): queries through a low-rank projection
  with an RMSNorm (or ``q_proj`` when ``q_lora_rank`` is None), keys and values expanded from a normalised latent;
  the rotary dimensions are decoupled from the content ones, with one rotated key per token shared by all heads:
  positional kind ``rope_decoupled`` (:class:`~palrp_bench.lrp.positional.DecoupledRoPE`), interleaved pairs when
  ``rope_interleave``; the attention scale includes YaRN's ``mscale`` (the module's own ``scaling``);
* sparse blocks from layer ``first_k_dense_replace`` on (:mod:`palrp_bench.models.moe`): sigmoid scores of float32
  router logits, the choice among the ``topk_group`` best of ``n_group`` expert groups with the
  ``e_score_correction_bias`` added for the choice only, the chosen sigmoid scores renormalised with
  ``norm_topk_prob`` and multiplied by ``routed_scaling_factor`` (float32 gates), gated experts, and shared experts
  (a dense MLP every token passes, ungated).

The multi-token-prediction layers of the checkpoints are not part of the model transformers builds.
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder
from .moe import MoeSpec

__all__ = ["DEEPSEEK_V3"]

DEEPSEEK_V3 = register_decoder(DecoderSpec(
    family="deepseek_v3", model_types=("deepseek_v3",), positional="rope_decoupled", attention_kind="latent",
    rope_interleave="rope_interleave",
    moe=MoeSpec(scoring="sigmoid", logits_in_router_dtype=True, selection="group_limited",
                selection_bias="e_score_correction_bias", normalize="norm_topk_prob", normalize_eps=1e-20,
                scaling="routed_scaling_factor", gates_in_model_dtype=False, shared_expert="shared_experts")))
