"""The AttnLRP paper's plausibility of an encoder-decoder's QA explanation (its section 4.1; docs/baselines.md "The
Flan-T5 SQuAD v2 column"): the IoU of the attributed context tokens and the answer-span tokens, on correctly
answered answerable questions. The paper does not say which tokens count as attributed, so both readings are
stored (:data:`palrp_bench.metrics.evidence.IOU_VARIANTS`, ``IOU_NOTE``)."""
from __future__ import annotations

from ...metrics.evidence import IOU_METRIC, positive_iou, top_answer_iou
from ...rundir import SCALAR
from ..explained import Seq2SeqBatch
from . import register_procedure

__all__ = ["IOU_READINGS", "run_iou"]

#: the ``iou`` rows: variant (``metrics.evidence.IOU_VARIANTS``) -> its function
IOU_READINGS = {"positive": positive_iou, "top_answer": top_answer_iou}


@register_procedure("iou", applies_to=("seq2seq_qa",),
                    description="IoU of the attributed context tokens and the answer span (correctly answered "
                                "answerable questions)")
def run_iou(batch: Seq2SeqBatch, ctx) -> None:
    """On correctly answered answerable samples only, rows ``iou`` with variant ``positive`` (the tokens with
    positive relevance, :func:`~palrp_bench.metrics.evidence.positive_iou`) and ``top_answer`` (as many of the
    highest-scoring tokens as the answer has, :func:`~palrp_bench.metrics.evidence.top_answer_iou`); valid = the
    context tokens."""
    evidence = batch.answer & batch.context
    iou = {variant: reading(batch.scores, evidence, batch.context).tolist()
           for variant, reading in IOU_READINGS.items()}
    for j in batch.ok:
        if batch.correct[j] and batch.answerable[j]:
            batch.rows[j] += [(IOU_METRIC, variant, SCALAR, float(values[j])) for variant, values in iou.items()]
