"""The LLaMA family as a decoder spec: LLaMA-2, LLaMA-3/3.1 (incl. llama3 rope scaling), TinyLlama; GQA/MQA, tied
embeddings, attention/MLP biases, bitsandbytes 4-bit NF4 (paper Tables 1-3).

RMSNorm, gated SiLU MLP, RoPE through the model's own rotary module; the wiring is the generic
:class:`~palrp_bench.models.decoder.DecoderTwin`. Refused: ``pretraining_tp > 1`` (Hugging Face computes the same
logits with sliced matmuls; set ``config.pretraining_tp = 1``). The official PA-LRP code ran this family, so
``protocol=official`` defaults to the official stabilisers here (:mod:`palrp_bench.lrp.stabilizers`).
"""
from __future__ import annotations

from .decoder import DecoderSpec, register_decoder

__all__ = ["LLAMA"]


def _pretraining_tp(config) -> str | None:
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        return "pretraining_tp > 1 is not supported (set config.pretraining_tp = 1: same logits)"
    return None


#: the family the official PA-LRP code ran (LLaMA-2 7B, LLaMA-3.1 8B, TinyLlama): ``protocol=official`` defaults to
#: its stabilisers here only
LLAMA = register_decoder(DecoderSpec(family="llama", model_types=("llama",), checks=(_pretraining_tp,),
                                     official_code_ran=True))
