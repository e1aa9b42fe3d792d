"""The positional share of Appendix F: how much of a ViT's relevance the positional encoding carries, per sample
(table metric ``positional_share_percent``, :mod:`palrp_bench.metrics.share`); on the evidence kind the same sums
over a text's tokens (the needle grid's positional share, docs/evidence.md)."""
from __future__ import annotations

from ...rundir import NO_VARIANT, SCALAR
from ..explained import EvidenceBatch, PixelBatch
from . import register_procedure

__all__ = ["run_positional_share"]


@register_procedure("positional_share", applies_to=("image_classification", "evidence"), needs=("totals",),
                    description="positional relevance as a percentage of semantic + positional relevance")
def run_positional_share(batch: PixelBatch | EvidenceBatch, ctx) -> None:
    """Signed totals of the explanation: ``relevance_semantic`` / ``relevance_positional`` (images: the patches only,
    what the maps use, of the predicted-class pass; texts: every token, every positional sink) and, for images,
    ``..._with_cls`` (the CLS terms added)."""
    totals = batch.totals
    with_cls = "semantic_total_incl_prefix" in totals
    for i in batch.ok:
        batch.rows[i] += [("relevance_semantic", NO_VARIANT, SCALAR, float(totals["semantic_total"][i])),
                          ("relevance_positional", NO_VARIANT, SCALAR, float(totals["positional_total"][i]))]
        if with_cls:
            batch.rows[i] += [("relevance_semantic_with_cls", NO_VARIANT, SCALAR,
                               float(totals["semantic_total_incl_prefix"][i])),
                              ("relevance_positional_with_cls", NO_VARIANT, SCALAR,
                               float(totals["positional_total_incl_prefix"][i]))]
