"""The Qwen2-MoE family as a decoder spec (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B; Hugging Face ``model_type``
``qwen2_moe``).

Qwen2's wiring (q/k/v biases with ``qkv_bias``; a sliding window on the ``sliding_attention`` entries of
``config.layer_types``) with sparse blocks (``modeling_qwen2_moe.py``): a softmax router in float32, the top
``num_experts_per_tok`` probabilities renormalised only with ``norm_topk_prob`` and cast to the model dtype, gated
experts, and a shared expert (a dense gated MLP) gated by the sigmoid of the linear ``shared_expert_gate``: a
one-logit router under the same gate rule (:mod:`palrp_bench.models.moe`). Layers listed in ``mlp_only_layers``, or
off the ``decoder_sparse_step`` grid, keep a dense MLP.
"""
from __future__ import annotations

from .decoder import DecoderSpec, check_layer_types, register_decoder
from .moe import MoeSpec

__all__ = ["QWEN2_MOE"]

QWEN2_MOE = register_decoder(DecoderSpec(
    family="qwen2_moe", model_types=("qwen2_moe",), sliding_window="layer_types", checks=(check_layer_types,),
    moe=MoeSpec(normalize="norm_topk_prob", shared_expert="shared_expert", shared_expert_gate="shared_expert_gate")))
