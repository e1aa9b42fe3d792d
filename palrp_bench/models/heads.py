"""The ``transformers`` head of each text model kind (``configs/model/*.yaml`` ``kind``): what loads a checkpoint
(:mod:`palrp_bench.models.loading`) and what its architecture is counted on (:mod:`palrp_bench.models.architecture`)."""
from __future__ import annotations

from ..errors import BadInputError

__all__ = ["AUTO_CLASSES", "auto_class"]

#: the ``transformers`` auto class of each text ``model.kind`` (the head)
AUTO_CLASSES = {"causal": "AutoModelForCausalLM", "classifier": "AutoModelForSequenceClassification",
                "masked_lm": "AutoModelForMaskedLM", "seq2seq": "AutoModelForSeq2SeqLM",
                "vlm": "AutoModelForImageTextToText"}


def auto_class(kind: str):
    """The ``transformers`` auto class loading a model of ``kind`` (:data:`AUTO_CLASSES`), else a one-line error."""
    import transformers

    if kind not in AUTO_CLASSES:
        raise BadInputError(f"unknown model kind {kind!r}", f"use one of: {', '.join(AUTO_CLASSES)}")
    return getattr(transformers, AUTO_CLASSES[kind])
