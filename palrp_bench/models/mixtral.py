"""The Mixtral family as a decoder spec (Mixtral 8x7B, 8x22B; Hugging Face ``model_type`` ``mixtral``).

Mistral's wiring (sliding window on every layer when ``config.sliding_window`` is set) with a sparse
mixture-of-experts block in every layer (``modeling_mixtral.py``): a softmax router over ``num_local_experts``
experts in float32, the ``num_experts_per_tok`` largest probabilities renormalised to sum 1 and kept in float32
(the product with an expert's output is taken in float32, then cast back), gated SiLU experts fused into
``gate_up_proj`` / ``down_proj`` (:mod:`palrp_bench.models.moe`).
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder
from .moe import MoeSpec

__all__ = ["MIXTRAL"]

MIXTRAL = register_decoder(DecoderSpec(family="mixtral", model_types=("mixtral",), sliding_window="all_layers",
                                       moe=MoeSpec(normalize="always", gates_in_model_dtype=False)))
