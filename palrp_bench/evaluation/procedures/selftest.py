"""The harness self-test's rows: deterministic pseudo-curves shaped like the NLP perturbation rows (no model), so the
whole report path runs (:mod:`palrp_bench.data.selftest`)."""
from __future__ import annotations

from ...metrics.auc import NLP_FRACTIONS
from ..explained import SelftestBatch
from . import register_procedure

__all__ = ["run_selftest"]


@register_procedure("selftest", applies_to=("selftest",),
                    description="deterministic numbers derived from each sample id; no model involved")
def run_selftest(batch: SelftestBatch, ctx) -> None:
    """Rows ``ac`` / ``mse`` x ``generation`` / ``pruning`` x the 11 fractions of each sample's pseudo-curves."""
    for j in batch.ok:
        values = batch.values[j]
        for variant in ("generation", "pruning"):
            for metric in ("ac", "mse"):
                batch.rows[j] += [(metric, variant, step, float(v))
                                  for step, v in zip(NLP_FRACTIONS.labels, values[f"{variant}_{metric}"])]
