"""The AttnLRP paper's SQuAD v2 plausibility metric ``iou`` (palrp_bench/metrics/evidence.py, ``positive_iou``;
docs/baselines.md "The Flan-T5 SQuAD v2 column"): hand cases, the strict threshold at 0, the valid mask, non-finite rows, and the
per-sample rows through metrics/table.py."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.evidence import IOU_METRIC, per_token_accuracy, positive_iou
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


def test_table_metric_is_the_sample_mean_in_unit_scale():
    assert IOU_METRIC in metric_specs() and higher_is_better(IOU_METRIC, "default") is True
    values = [0.25, 1.0, 0.5]
    rows = pd.DataFrame({"sample_id": ["a", "b", "c"], "metric": IOU_METRIC, "variant": "default",
                         "step": np.nan, "value": values})
    for col, value in (("model", "m"), ("task", "t"), ("method", "x"), ("protocol", "official"),
                       ("paper_task", "t"), ("quantization", "none"), ("dtype", "float32"), ("rules", ""),
                       ("aggregation", ""), ("stabilizers", ""), ("tie_device", ""), ("causal", True),
                       ("tie_break", ""), ("embeddings", ""), ("run", "r")):
        rows[col] = value
    table = table_metrics(rows, 0.95, 200)
    row = table[table["metric"] == IOU_METRIC].iloc[0]
    assert row["value"] == pytest.approx(np.mean(values), abs=1e-12)
    assert row["n"] == 3
