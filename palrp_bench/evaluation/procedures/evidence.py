"""Evidence scoring (the decomposition-attribution paper's section 4.2, Table 1; docs/evidence.md): PG, MRR, RMA and
PTA of one explanation per sample under each of its evaluation masks (:mod:`palrp_bench.metrics.evidence`), for the
text evidence tasks and the grounded visual questions (``vqa_evidence``: the image tokens, and every token)."""
from __future__ import annotations

from typing import Sequence

import torch

from ...metrics.evidence import evidence_rows
from ..explained import EvidenceBatch
from . import register_procedure

__all__ = ["run_evidence"]


def _flags(masks: Sequence[dict], name: str, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(valid, evidence)`` bool ``[B, width]`` of the samples' evaluation mask ``name``."""
    valid = torch.zeros((len(masks), width), dtype=torch.bool)
    evidence = torch.zeros((len(masks), width), dtype=torch.bool)
    for i, m in enumerate(masks):
        v, e = m[name]
        valid[i, :len(v)] = torch.tensor(v, dtype=torch.bool)
        evidence[i, :len(e)] = torch.tensor(e, dtype=torch.bool)
    return valid, evidence


@register_procedure("evidence", applies_to=("evidence", "vqa_evidence"),
                    description="pointing game, mean reciprocal rank, relevance mass and per-token accuracy against "
                                "annotated evidence")
def run_evidence(batch: EvidenceBatch, ctx) -> None:
    """Every evidence row of each sample under each evaluation mask it has (:func:`palrp_bench.metrics.evidence.
    evidence_rows`), the masks in the order the samples name them."""
    width = batch.scores.shape[1]
    for name in dict.fromkeys(name for m in batch.masks for name in m):
        members = [j for j in batch.ok if name in batch.masks[j]]
        if not members:
            continue
        valid, evidence = _flags([batch.masks[j] for j in members], name, width)
        for j, sample_rows in zip(members, evidence_rows(batch.scores[members], evidence, valid, name)):
            batch.rows[j] += sample_rows
