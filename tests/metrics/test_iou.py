"""The AttnLRP paper's SQuAD v2 plausibility metric ``iou`` (palrp_bench/metrics/evidence.py, ``positive_iou`` and
``top_answer_iou``; docs/baselines.md "The Flan-T5 SQuAD v2 column"): hand cases, the strict threshold at 0, the
top-|A| reading and its scale-freedom, the valid mask, non-finite rows, and the per-sample rows through
metrics/table.py with the note that the published IoU is not comparable."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.evidence import (IOU_METRIC, IOU_NOTE, IOU_VARIANTS, per_token_accuracy, positive_iou,
                                          top_answer_iou)
from palrp_bench.metrics.registry import higher_is_better, metric_specs
from palrp_bench.metrics.table import table_metrics

T, F_ = True, False


def _b(rows):
    return torch.tensor(rows, dtype=torch.bool)


def test_hand_cases():
    scores = torch.tensor([[1.0, 2.0, -1.0, 0.5],    # P = {0, 1, 3}, E = {1, 2}: 1 / 4
                           [0.0, 3.0, -2.0, -1.0],   # P = {1} = E: 1
                           [-1.0, -2.0, -3.0, -4.0],  # P empty, E = {0}: 0
                           [0.1, 0.2, 0.3, 0.4]])    # P = all, E = {3}: 1 / 4
    evidence = _b([[F_, T, T, F_], [F_, T, F_, F_], [T, F_, F_, F_], [F_, F_, F_, T]])
    valid = torch.ones(4, 4, dtype=torch.bool)
    assert positive_iou(scores, evidence, valid).tolist() == [0.25, 1.0, 0.0, 0.25]


def test_zero_is_not_positive_and_invalid_tokens_do_not_count():
    scores = torch.tensor([[0.0, 1.0, 5.0, 5.0]])
    evidence = _b([[T, T, F_, F_]])
    # token 0 scores exactly 0: not an attribution (IoU 1/2); tokens 2, 3 are positive but left out of the mask
    assert positive_iou(scores, evidence, _b([[T, T, F_, F_]])).tolist() == [0.5]
    # with them counted the union grows to 3 tokens
    assert positive_iou(scores, evidence, torch.ones(1, 4, dtype=torch.bool)).tolist() == [0.25]


def test_no_positive_and_no_evidence_is_zero_and_nonfinite_is_nan():
    valid = torch.ones(2, 3, dtype=torch.bool)
    out = positive_iou(torch.tensor([[-1.0, -1.0, 0.0], [1.0, float("nan"), 1.0]]), _b([[F_, F_, F_], [T, F_, F_]]),
                       valid)
    assert out[0].item() == 0.0 and math.isnan(out[1].item())


def test_same_positive_set_as_per_token_accuracy():
    """IoU and PTA read the same P = {s > 0}: with P = E both are 1; the scale of the scores never matters."""
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(8, 20, generator=gen, dtype=torch.float64)
    evidence = scores > 0
    valid = torch.ones_like(evidence)
    assert positive_iou(scores, evidence, valid).tolist() == [1.0] * 8
    assert per_token_accuracy(scores, evidence, valid).tolist() == [1.0] * 8
    assert torch.equal(positive_iou(scores * 1e-30, ~evidence | evidence, valid),
                       positive_iou(scores, torch.ones_like(evidence), valid))


def test_refuses_evidence_outside_the_mask():
    with pytest.raises(BadInputError, match="evidence marks tokens that valid leaves out"):
        positive_iou(torch.ones(1, 2), _b([[T, T]]), _b([[T, F_]]))


def test_top_answer_reads_the_as_many_highest_scores_as_the_answer_has():
    scores = torch.tensor([[1.0, 2.0, -1.0, 0.5],    # E = {1, 2}: top 2 = {1, 0}: 1 / 3
                           [0.0, 3.0, -2.0, -1.0],   # E = {1}: top 1 = {1}: 1
                           [-1.0, -2.0, -3.0, -4.0],  # E = {0}: top 1 = {0} (no positive score needed): 1
                           [0.4, 0.4, 0.3, 0.4],     # E = {1}: tie at the top, lower position first: {0}: 0
                           [5.0, 1.0, 1.0, 0.0]])    # E = {}: 0
    evidence = _b([[F_, T, T, F_], [F_, T, F_, F_], [T, F_, F_, F_], [F_, T, F_, F_], [F_, F_, F_, F_]])
    valid = torch.ones(5, 4, dtype=torch.bool)
    assert top_answer_iou(scores, evidence, valid).tolist() == pytest.approx([1 / 3, 1.0, 1.0, 0.0, 0.0])
    # an invalid token never enters the top set
    assert top_answer_iou(torch.tensor([[9.0, 1.0, 2.0]]), _b([[F_, T, F_]]), _b([[F_, T, T]])).tolist() == [0.0]
    assert top_answer_iou(torch.tensor([[9.0, 2.0, 1.0]]), _b([[F_, T, F_]]), _b([[F_, T, T]])).tolist() == [1.0]


def test_top_answer_is_scale_free_and_positive_is_not():
    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(6, 15, generator=gen, dtype=torch.float64)
    evidence = torch.zeros(6, 15, dtype=torch.bool)
    evidence[:, 3:6] = True
    valid = torch.ones_like(evidence)
    base = top_answer_iou(scores, evidence, valid)
    assert torch.equal(top_answer_iou(3.0 * scores + 7.0, evidence, valid), base)
    assert not torch.equal(positive_iou(scores + 7.0, evidence, valid), positive_iou(scores, evidence, valid))


def test_table_metric_is_the_sample_mean_in_unit_scale_with_the_comparability_note():
    assert IOU_METRIC in metric_specs() and higher_is_better(IOU_METRIC, "positive") is True
    assert metric_specs()[IOU_METRIC].variants == IOU_VARIANTS == ("positive", "top_answer")
    values = [0.25, 1.0, 0.5]
    rows = pd.DataFrame({"sample_id": ["a", "b", "c"], "metric": IOU_METRIC, "variant": "positive",
                         "step": np.nan, "value": values})
    for col, value in (("model", "m"), ("task", "t"), ("method", "x"), ("protocol", "official"),
                       ("paper_task", "t"), ("quantization", "none"), ("dtype", "float32"), ("rules", ""),
                       ("aggregation", ""), ("stabilizers", ""), ("tie_device", ""), ("causal", True),
                       ("tie_break", ""), ("embeddings", ""), ("run", "r")):
        rows[col] = value
    table = table_metrics(rows, 0.95, 200)
    row = table[table["metric"] == IOU_METRIC].iloc[0]
    assert row["value"] == pytest.approx(np.mean(values), abs=1e-12)
    assert row["n"] == 3 and row["variant"] == "positive" and IOU_NOTE in row["note"]
