"""The positional share of Appendix F: how much of a ViT's relevance the positional encoding carries, per sample
(table metric ``positional_share_percent``, :mod:`palrp_bench.metrics.share`)."""
from __future__ import annotations

from ...rundir import NO_VARIANT, SCALAR
from ..explained import PixelBatch
from . import register_procedure

__all__ = ["run_positional_share"]


@register_procedure("positional_share", applies_to=("image_classification",),
                    description="positional relevance as a percentage of semantic + positional relevance")
def run_positional_share(batch: PixelBatch, ctx) -> None:
    """Signed totals of the predicted-class pass: ``relevance_semantic`` / ``relevance_positional`` (patches only,
    what the maps use) and ``..._with_cls`` (CLS terms added)."""
    totals = batch.totals
    for i in batch.ok:
        batch.rows[i] += [("relevance_semantic", NO_VARIANT, SCALAR, float(totals["semantic_total"][i])),
                          ("relevance_positional", NO_VARIANT, SCALAR, float(totals["positional_total"][i])),
                          ("relevance_semantic_with_cls", NO_VARIANT, SCALAR,
                           float(totals["semantic_total_incl_prefix"][i])),
                          ("relevance_positional_with_cls", NO_VARIANT, SCALAR,
                           float(totals["positional_total_incl_prefix"][i]))]
