"""The AttnLRP paper's plausibility of an encoder-decoder's QA explanation (its section 4.1; docs/baselines.md "The
Flan-T5 SQuAD v2 column"): the IoU of the context tokens with positive relevance and the answer-span tokens."""
from __future__ import annotations

from ...metrics.evidence import IOU_METRIC, positive_iou
from ...rundir import SCALAR
from ..explained import Seq2SeqBatch
from . import register_procedure

__all__ = ["IOU_VARIANT", "run_iou"]

#: the evaluation mask of the ``iou`` rows: the context tokens (as the evidence metrics' qa ``default``)
IOU_VARIANT = "default"


@register_procedure("iou", applies_to=("seq2seq_qa",),
                    description="IoU of the tokens with positive relevance and the answer span (correctly answered "
                                "questions)")
def run_iou(batch: Seq2SeqBatch, ctx) -> None:
    """On correctly answered samples only, row ``iou`` (variant ``default``): :func:`palrp_bench.metrics.evidence.
    positive_iou` of the scores with the answer span, valid = the context tokens."""
    iou = positive_iou(batch.scores, batch.answer, batch.context).tolist()
    for j in batch.ok:
        if batch.correct[j]:
            batch.rows[j].append((IOU_METRIC, IOU_VARIANT, SCALAR, float(iou[j])))
