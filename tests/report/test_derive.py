"""Tidy rows -> table metrics: hand-computed values, and the official code's own aggregates on its per-sample
curves / counts (tests/data/official; PROTOCOL.md sections 2-4, Appendix F)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from palrp_bench.report.derive import derive

OFFICIAL = Path(__file__).resolve().parents[1] / "data" / "official"
CELL = dict(run="r", model="m", quantization="none", dtype="float32", task="t", paper_task="t", protocol="official",
            aggregation="official", method="pa_lrp", rules="attnlrp")


def _rows(records):
    return pd.DataFrame([{**CELL, "sample_id": s, "metric": m, "variant": v, "step": x, "value": y}
                         for s, m, v, x, y in records])


def _by_name(metrics):
    return {(m.metric, m.variant): m for m in metrics}


def test_curve_areas_by_hand():
    df = _rows([("a", "ac", "generation", x, y) for x, y in zip((0, 0.5, 1), (1, 0.5, 0))]
               + [("b", "ac", "generation", x, y) for x, y in zip((0, 0.5, 1), (0, 1, 1))]
               + [("a", "agreement", "positive", x, y) for x, y in zip((0.1, 0.5, 0.9), (1, 1, 0))])
    got = _by_name(derive(df))
    auac = got[("auac", "generation")]
    np.testing.assert_allclose(auac.per_sample(), [0.5, 0.75])  # trapezoids worked out by hand
    assert auac.value() == pytest.approx(0.625) and auac.n == 2
    # x100 and only x in [0.1, 0.9]: 100 * (0.4 * (1 + 1) / 2 + 0.4 * (1 + 0) / 2)
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
    got = _by_name(derive(df))
    assert got[("pixel_accuracy", seg)].value() == pytest.approx(50.0)  # 100 * (3 + 1) / (4 + 4)
    assert got[("miou", seg)].value() == pytest.approx(42.5)  # 50 * (1/4 + 3/5), pooled per class
    assert got[("map", seg)].value() == pytest.approx(60.0)
    share = got[("positional_share_percent", "all")]
    assert share.value() == pytest.approx(50.0)  # 100 * 2 / (2 + 2): pooled, not a mean of per-image shares
    assert share.per_sample()[0] == pytest.approx(25.0) and np.isnan(share.per_sample()[1])  # S + P = 0
    assert got[("positional_share_percent", "with_cls")].value() == pytest.approx(25.0)


def test_nan_curve_points_drop_the_sample():
    df = _rows([("a", "ac", "generation", 0.0, 1.0), ("a", "ac", "generation", 1.0, 1.0),
                ("b", "ac", "generation", 0.0, np.nan), ("b", "ac", "generation", 1.0, 0.0)])
    (m,) = derive(df)
    assert m.value() == pytest.approx(1.0) and m.n == 1


@pytest.mark.parametrize("name", ["curves_imdb_pad24.json", "curves_wiki_causal.json"])
def test_nlp_areas_equal_the_official_aggregate(name):
    data = json.loads((OFFICIAL / "nlp" / name).read_text())
    fracs = np.round(np.asarray(data["fracs"]), 10)
    records = []
    for variant, official in (("generation", "generate"), ("pruning", "pruning")):
        for metric, key in (("ac", "AC"), ("mse", "MSE")):
            for i, curve in enumerate(data["per_sample"][official][key]):
                records += [(f"s{i}", metric, variant, x, y) for x, y in zip(fracs, curve)]
    got = _by_name(derive(_rows(records)))
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
        got = _by_name(derive(_rows(records)))
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
    got = _by_name(derive(_rows(records)))
    assert got[("pixel_accuracy", v)].value() == pytest.approx(100 * block["pixAcc"])
    assert got[("miou", v)].value() == pytest.approx(100 * block["mIoU"])
    assert got[("map", v)].value() == pytest.approx(100 * block["mAP"])
