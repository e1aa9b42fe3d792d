"""The LLaMA family as a decoder spec: LLaMA-2, LLaMA-3/3.1 (incl. llama3 rope scaling), TinyLlama; GQA/MQA, tied
embeddings, attention/MLP biases, bitsandbytes 4-bit NF4 (paper Tables 1-3).

RMSNorm, gated SiLU MLP, RoPE through the model's own rotary module; the wiring is the generic
:class:`~palrp_bench.models.decoder.DecoderTwin`. Refused: ``pretraining_tp > 1`` (Hugging Face computes the same
logits with sliced matmuls; set ``config.pretraining_tp = 1``).
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder

__all__ = ["LLAMA"]


def _pretraining_tp(config) -> str | None:
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        return "pretraining_tp > 1 is not supported (set config.pretraining_tp = 1: same logits)"
    return None


LLAMA = register_decoder(DecoderSpec(family="llama", model_types=("llama",), checks=(_pretraining_tp,)))
