"""Published vs reproduced tables (Markdown, LaTeX), paired comparisons, plots, and ``palrp-bench-report``."""
import re

import numpy as np
import pandas as pd
import pytest

from palrp_bench.report.build import build_report
from palrp_bench.report.cli import main as report_main
from palrp_bench.metrics.table import metric_samples, table_metrics
from palrp_bench.report.published import load_published
from palrp_bench.report.tables import REPRODUCED_ONLY, comparison_frame, paired_frame, reproduced_frame

STEPS = np.round(np.linspace(0, 1, 11), 10)


def _curve_rows(model, task, method, paper_task, level, n=6, metric="ac", variant="generation"):
    rows = []
    for i in range(n):
        for x in STEPS:  # a flat curve at `level + i/1000`: its area is exactly that value
            rows.append({"run": "r", "model": model, "quantization": "none", "dtype": "bfloat16", "task": task,
                         "paper_task": paper_task, "protocol": "official", "rules": "attnlrp",
                         "aggregation": "official", "method": method, "sample_id": f"{task}-{i}",
                         "metric": metric, "variant": variant, "step": x, "value": level + i / 1000})
    return rows


def _published(tmp_path):
    folder = tmp_path / "paper"
    folder.mkdir()
    pd.DataFrame([["table1", "llama2_7b", "imdb", "pa_lrp", "generation", "auac", 0.796, "true"],
                  ["table1", "llama2_7b", "imdb", "attnlrp", "generation", "auac", 0.779, "true"],
                  ["table1", "tinyllama", "imdb", "pa_lrp", "generation", "auac", 0.806, "true"],
                  ["table3", "llama3_8b", "mcqa", "pa_lrp", "generation", "auac", 0.377, "true"]],
                 columns=["table", "model", "task", "method", "variant", "metric", "value", "higher_is_better"]
                 ).to_csv(folder / "t.csv", index=False)
    return folder


def _tidy():
    return pd.DataFrame(_curve_rows("llama2_7b", "imdb", "pa_lrp", "imdb", 0.8)
                        + _curve_rows("llama2_7b", "imdb", "attnlrp", "imdb", 0.75)
                        + _curve_rows("llama3_8b", "mcqa_noncausal", "pa_lrp", "mcqa", 0.4)
                        + _curve_rows("tiny_llama_cls", "synthetic_sentiment", "pa_lrp", "synthetic_sentiment", 0.9))


def test_comparison_side_by_side(tmp_path):
    rep = reproduced_frame(table_metrics(_tidy(), 0.95, 200))
    cmp = comparison_frame(rep, load_published(_published(tmp_path)))
    row = cmp[(cmp.table == "table1") & (cmp.method == "pa_lrp") & (cmp.model == "llama2_7b")].iloc[0]
    assert row.reproduced == pytest.approx(0.8025) and row.published == 0.796
    assert row.difference == pytest.approx(0.0065) and row.n == 6 and bool(row.higher_is_better)
    assert row.ci_low < row.reproduced < row.ci_high
    missing = cmp[(cmp.table == "table1") & (cmp.model == "tinyllama")].iloc[0]
    assert np.isnan(missing.reproduced)  # a published number not reproduced yet stays visible
    noncausal = cmp[cmp.table == "table3"].iloc[0]
    assert noncausal.run_task == "mcqa_noncausal" and noncausal.published == 0.377
    only = cmp[cmp.table == REPRODUCED_ONLY]
    assert list(only.model) == ["tiny_llama_cls"]


def test_paired_frame_pa_lrp_vs_attnlrp():
    paired = paired_frame(metric_samples(_tidy()), 0.95, 300)
    (row,) = paired.itertuples()
    assert (row.method_a, row.method_b, row.model) == ("pa_lrp", "attnlrp", "llama2_7b")
    assert row.difference == pytest.approx(0.05) and row.a_better is True and row.n == 6


def test_published_numbers_of_the_repository():
    df = load_published()
    assert {"table1", "table2", "table3", "table4", "table5", "appendix_f"} <= set(df.table)
    row = df[(df.table == "table4") & (df.model == "deit_tiny") & (df.method == "pa_lrp")
             & (df.variant == "positive") & (df.metric == "auc_predicted")].iloc[0]
    assert row.value == 3.579 and row.higher_is_better == False  # noqa: E712


def test_build_report_writes_markdown_latex_and_plots(tmp_path):
    csv = tmp_path / "results.csv"
    _tidy().to_csv(csv, index=False)
    cfg = type("Cfg", (), {"confidence": 0.9, "n_boot": 200, "gallery_ids": [],
                           "out_dir": tmp_path / "out", "paper_dir": _published(tmp_path)})()
    result = build_report([csv], cfg)
    md = (tmp_path / "out/report.md").read_text()
    assert "### table1" in md and "| 0.796" in md and "auac (↑)" in md
    assert re.search(r"\| 0\.80[23] \[0\.80\d, 0\.80\d\]", md)  # 0.8025 [CI]: rounding may go either way
    assert "90% CI" in md and "pa_lrp - attnlrp" in md
    tex = (tmp_path / "out/report.tex").read_text()
    assert r"\begin{tabular}" in tex and r"llama2\_7b" in tex and r"$\uparrow$" in tex
    pngs = [f for f in result.files if f.suffix == ".png"]
    assert pngs and all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in pngs)


def test_report_cli_on_a_run_dir(tmp_path, capsys):
    from palrp_bench.runner.app import run
    from runner.harness import compose_cfg

    run(compose_cfg(tmp_path / "runs/one", "experiment=selftest", "task=selftest", "task.options.n=6",
                    "runner.quiet=true"), out=open("/dev/null", "w"))
    assert report_main(["--runs-root", str(tmp_path / "runs"), "--n-boot", "100",
                        "--gallery-ids", "selftest-00001,selftest-00004"]) == 0
    out = capsys.readouterr().out
    assert "reproduced only" in out and "selftest" in out
    gallery = list((tmp_path / "runs/one/report").glob("gallery_*.png"))
    assert len(gallery) == 1
    assert report_main([str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert report_main(["--runs-root", str(tmp_path / "empty")]) == 2
