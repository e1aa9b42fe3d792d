"""Tidy rows -> table metrics (metrics.csv): hand-computed values, the official code's own aggregates on its
per-sample curves / counts (tests/data/official; docs/protocol.md sections 2-4, Appendix F), the non-finite rules of
both protocols, and the bootstrap intervals."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from palrp_bench.metrics.nlp import auac
from palrp_bench.metrics.table import (MIN_SAMPLES_FOR_INTERVAL, SMALL_SAMPLE_NOTE, confidence_interval,
                                       metric_samples, table_metrics)

OFFICIAL = Path(__file__).resolve().parents[1] / "data" / "official"
CELL = dict(run="r", model="m", quantization="none", dtype="float32", task="t", paper_task="t", protocol="official",
            aggregation="official", method="pa_lrp", rules="attnlrp")
STEPS = np.round(np.linspace(0.0, 1.0, 11), 10)


def _rows(records, **cell):
    return pd.DataFrame([{**CELL, **cell, "sample_id": s, "metric": m, "variant": v, "step": x, "value": y}
                         for s, m, v, x, y in records])


def _curves(curves, metric="ac", variant="generation", **cell):
    return _rows([(f"s{i}", metric, variant, x, y) for i, c in enumerate(curves) for x, y in zip(STEPS, c)], **cell)


def _by_name(metrics):
    return {(m.metric, m.variant): m for m in metrics}


def test_curve_areas_by_hand():
    down = 1 - STEPS                                    # area 1/2
    up = np.minimum(1.0, 2 * STEPS)                     # 0 -> 1 over [0, 0.5], then 1: area 3/4
    vision = np.r_[np.ones(5), np.linspace(1, 0, 5)[1:]]  # 1 on [0.1, 0.5], then linear to 0 at 0.9
    df = pd.concat([_curves([down, up]),
                    _rows([("a", "agreement", "positive", x, y)
                           for x, y in zip(np.round(np.linspace(0.1, 0.9, 9), 10), vision)])])
    got = _by_name(metric_samples(df))
    area = got[("auac", "generation")]
    np.testing.assert_allclose(area.per_sample(), [0.5, 0.75])  # trapezoids worked out by hand
    assert area.value() == pytest.approx(0.625) and area.n == 2
    # x100 and only x in [0.1, 0.9]: 100 * (0.4 * 1 + 0.4 * (1 + 0) / 2)
    assert got[("auc_predicted", "positive")].value() == pytest.approx(60.0)


def test_pooled_metrics_by_hand():
    seg = "mean_threshold"
    df = _rows([("a", "pix_correct", seg, np.nan, 3), ("a", "pix_labeled", seg, np.nan, 4),
                ("a", "inter_bg", seg, np.nan, 1), ("a", "union_bg", seg, np.nan, 2),
                ("a", "inter_fg", seg, np.nan, 2), ("a", "union_fg", seg, np.nan, 3), ("a", "ap", seg, np.nan, 0.5),
                ("b", "pix_correct", seg, np.nan, 1), ("b", "pix_labeled", seg, np.nan, 4),
                ("b", "inter_bg", seg, np.nan, 0), ("b", "union_bg", seg, np.nan, 2),
                ("b", "inter_fg", seg, np.nan, 1), ("b", "union_fg", seg, np.nan, 2), ("b", "ap", seg, np.nan, 0.7),
                ("a", "relevance_positional", "all", np.nan, 1), ("a", "relevance_semantic", "all", np.nan, 3),
                ("b", "relevance_positional", "all", np.nan, 1), ("b", "relevance_semantic", "all", np.nan, -1),
                ("a", "relevance_positional_with_cls", "all", np.nan, 2),
                ("a", "relevance_semantic_with_cls", "all", np.nan, 2),
                ("b", "relevance_positional_with_cls", "all", np.nan, 0),
                ("b", "relevance_semantic_with_cls", "all", np.nan, 4)])
    got = _by_name(metric_samples(df))
    assert got[("pixel_accuracy", seg)].value() == pytest.approx(50.0)  # 100 * (3 + 1) / (4 + 4)
    assert got[("miou", seg)].value() == pytest.approx(42.5)  # 50 * (1/4 + 3/5), pooled per class
    assert got[("map", seg)].value() == pytest.approx(60.0)
    share = got[("positional_share_percent", "all")]
    assert share.value() == pytest.approx(50.0)  # 100 * 2 / (2 + 2): pooled, not a mean of per-image shares
    assert share.per_sample()[0] == pytest.approx(25.0) and np.isnan(share.per_sample()[1])  # S + P = 0
    assert got[("positional_share_percent", "with_cls")].value() == pytest.approx(25.0)


def test_nonfinite_curve_values_official_averages_per_step_corrected_drops_the_sample():
    ones, zeros = np.ones(11), np.zeros(11)
    zeros[5] = np.nan
    relevance_nan = _rows([("s9", "nonfinite_relevance", "all", np.nan, 1.0)])
    official = table_metrics(pd.concat([_curves([ones, zeros]), relevance_nan]), n_resamples=200)
    corrected = table_metrics(pd.concat([_curves([ones, zeros], protocol="corrected"),
                                         relevance_nan.assign(protocol="corrected")]), n_resamples=200)
    (o,), (c,) = official.to_dict("records"), corrected.to_dict("records")
    # official: step 0.5 averages sample s0 only (the official nanmean), every other step (1 + 0) / 2
    mean = np.full(11, 0.5)
    mean[5] = 1.0
    assert o["value"] == pytest.approx(np.trapezoid(mean, STEPS)) == pytest.approx(0.55)
    assert o["value"] == pytest.approx(auac(np.array([ones, zeros])))
    assert (o["n"], o["n_nonfinite"]) == (2, 2)  # s1 (a NaN step) and s9 (NaN relevance) are counted
    # corrected: s1 is left out entirely
    assert c["value"] == pytest.approx(1.0)
    assert (c["n"], c["n_nonfinite"]) == (1, 2)


def test_constant_samples_get_a_zero_width_interval_with_a_note():
    (row,) = table_metrics(_curves([np.full(11, 0.8)] * 5), n_resamples=200).to_dict("records")
    assert row["value"] == row["ci_low"] == row["ci_high"] == pytest.approx(0.8)
    assert "zero-width" in row["note"]
    (one,) = table_metrics(_curves([np.full(11, 0.8)]), n_resamples=200).to_dict("records")
    assert np.isnan(one["ci_low"]) and "fewer than 2" in one["note"]


def test_interval_is_scipys_bca_bootstrap_of_the_metric_function():
    from scipy import stats

    rng = np.random.default_rng(3)
    curves = rng.uniform(size=(30, 11))
    (s,) = metric_samples(_curves(curves))
    low, high, note = confidence_interval(s, 0.9, n_resamples=500, seed=7)
    # the same interval from a direct scipy call on per-sample areas (the trapezoid is linear in the curve,
    # so the area of the mean curve is the mean of the per-sample areas)
    areas = np.trapezoid(s.components, STEPS, axis=1)  # same samples in the same (sample-id) order
    assert sorted(areas) == pytest.approx(sorted(np.trapezoid(curves, STEPS, axis=1)))
    ref = stats.bootstrap((areas,), np.mean, paired=True, method="BCa", confidence_level=0.9, n_resamples=500,
                          batch=100, random_state=np.random.default_rng(7)).confidence_interval
    assert note == "" and low < s.value() < high
    assert low == pytest.approx(ref.low, rel=1e-9) and high == pytest.approx(ref.high, rel=1e-9)


def test_an_interval_of_few_samples_is_flagged():
    """Below MIN_SAMPLES_FOR_INTERVAL the interval is kept but its note says it undercovers (the summary and the
    report print the note as a footnote); at the minimum it is not flagged."""
    rng = np.random.default_rng(5)
    for n, flagged in ((3, True), (MIN_SAMPLES_FOR_INTERVAL - 1, True), (MIN_SAMPLES_FOR_INTERVAL, False)):
        (row,) = table_metrics(_curves(rng.uniform(size=(n, 11))), n_resamples=200).to_dict("records")
        assert row["ci_low"] < row["value"] < row["ci_high"]
        assert row["note"] == (SMALL_SAMPLE_NOTE if flagged else ""), n
    assert "fewer than 15 samples" in SMALL_SAMPLE_NOTE and MIN_SAMPLES_FOR_INTERVAL == 15  # docs/evaluation.md


@pytest.mark.parametrize("name", ["curves_imdb_pad24.json", "curves_wiki_causal.json"])
def test_nlp_areas_equal_the_official_aggregate(name):
    data = json.loads((OFFICIAL / "nlp" / name).read_text())
    fracs = np.round(np.asarray(data["fracs"]), 10)
    records = []
    for variant, official in (("generation", "generate"), ("pruning", "pruning")):
        for metric, key in (("ac", "AC"), ("mse", "MSE")):
            for i, curve in enumerate(data["per_sample"][official][key]):
                records += [(f"s{i}", metric, variant, x, y) for x, y in zip(fracs, curve)]
    got = _by_name(metric_samples(_rows(records)))
    agg = data["aggregate"]
    assert got[("auac", "generation")].value() == pytest.approx(agg["generate_AU_AC"], rel=1e-6)
    assert got[("au_mse", "generation")].value() == pytest.approx(agg["generate_AU_MSE"], rel=1e-6)
    assert got[("auac", "pruning")].value() == pytest.approx(agg["pruning_AU_AC"], rel=1e-6)
    assert got[("au_mse", "pruning")].value() == pytest.approx(agg["pruning_AU_MSE"], rel=1e-6)


def test_vision_areas_equal_the_official_summary_x100():
    data = json.loads((OFFICIAL / "vision" / "pert_random_maps.json").read_text())
    steps = np.round(np.linspace(0.1, 0.9, 9), 10)
    for method, block in data["methods"].items():
        records = []
        for key, (metric, variant) in {"pos_top": ("agreement", "positive"), "neg_top": ("agreement", "negative"),
                                       "pos_target": ("accuracy", "positive"),
                                       "neg_target": ("accuracy", "negative")}.items():
            for i, curve in enumerate(block["per_sample"][key]):
                records += [(f"s{i}", metric, variant, x, y) for x, y in zip(steps, curve)]
        got = _by_name(metric_samples(_rows(records)))
        summary = block["summary"]
        assert got[("auc_predicted", "positive")].value() == pytest.approx(100 * summary["pos_auc_top"])
        assert got[("auc_predicted", "negative")].value() == pytest.approx(100 * summary["neg_auc_top"])
        assert got[("auc_target", "positive")].value() == pytest.approx(100 * summary["pos_auc_target"])
        assert got[("auc_target", "negative")].value() == pytest.approx(100 * summary["neg_auc_target"])


def test_segmentation_pooling_equals_the_official_metrics():
    data = json.loads((OFFICIAL / "vision" / "seg_random_maps.json").read_text())
    block = data["methods"]["attnlrp"]
    v = "mean_threshold"
    records = []
    for i, img in enumerate(block["per_image"]):
        records += [(f"s{i}", "pix_correct", v, np.nan, img["pix_correct"]),
                    (f"s{i}", "pix_labeled", v, np.nan, img["pix_labeled"]),
                    (f"s{i}", "inter_bg", v, np.nan, img["inter"][0]), (f"s{i}", "union_bg", v, np.nan, img["union"][0]),
                    (f"s{i}", "inter_fg", v, np.nan, img["inter"][1]), (f"s{i}", "union_fg", v, np.nan, img["union"][1]),
                    (f"s{i}", "ap", v, np.nan, img["ap"])]
    got = _by_name(metric_samples(_rows(records)))
    assert got[("pixel_accuracy", v)].value() == pytest.approx(100 * block["pixAcc"])
    assert got[("miou", v)].value() == pytest.approx(100 * block["mIoU"])
    assert got[("map", v)].value() == pytest.approx(100 * block["mAP"])


def test_an_interval_that_excludes_its_estimate_is_reported_as_no_interval():
    """A ratio whose denominator crosses zero across samples (``100 * sum P / sum (S + P)`` without the share's
    sign rule): BCa can exclude the estimate."""
    from palrp_bench.metrics.registry import MetricSpec
    from palrp_bench.metrics.table import MetricSamples

    rng = np.random.default_rng(1)  # measured: BCa gives [4327, 30369] around an estimate of 1252
    comps = np.stack([rng.normal(0.0, 1.0, 16), rng.normal(0.05, 1.0, 16)], axis=1)
    ratio = MetricSpec("ratio", None, "", "", "6",
                       compute=lambda c: 100 * c[..., 1].sum(-1) / (c[..., 0].sum(-1) + c[..., 1].sum(-1)))
    samples = MetricSamples(CELL, ratio, "all", np.array([f"s{i}" for i in range(16)]), comps)
    low, high, note = confidence_interval(samples, n_resamples=500)
    assert np.isfinite(samples.value()) and np.isnan(low) and np.isnan(high)
    assert "unstable statistic" in note


def test_an_undefined_share_is_nan_with_its_reason_and_prints_as_undefined():
    from palrp_bench.metrics.share import UNDEFINED_SHARE
    from palrp_bench.report.summary import summary_text

    # per image S and P nearly cancel with opposite signs (plain Gradient x Input on the tiny ViT)
    records = [(f"s{i}", name, "all", np.nan, value) for i, (s, p) in enumerate([(-0.2, 0.21), (-0.3, 0.29)])
               for name, value in (("relevance_semantic", s), ("relevance_positional", p))]
    frame = table_metrics(_rows(records, method="grad_x_input"), n_resamples=200)
    row = frame[(frame.metric == "positional_share_percent") & (frame.variant == "all")].iloc[0]
    assert np.isnan(row["value"]) and np.isnan(row["ci_low"]) and row["note"] == UNDEFINED_SHARE
    assert row["n"] == 2  # the samples are there; the quantity has no value on them
    text = summary_text(frame.assign(tie_break="", paper_table="", published=np.nan))
    assert "| undefined (1)" in text and f"(1) {UNDEFINED_SHARE}" in text
    assert "-" not in text.split("positional_share_percent:all")[1].split("\n")[2].split("|")[4]
