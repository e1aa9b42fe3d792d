"""The report's tables: the paper's tables shaped like the paper's (published and reproduced side by side),
Markdown and LaTeX (pandas Styler escaping), the published numbers attached to metrics.csv / metrics.json, Holm
in the paired tables, the summary's ``value [low, high]``, and ``palrp-bench-report``."""
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from palrp_bench.metrics.table import SMALL_SAMPLE_NOTE, metric_samples, table_metrics
from palrp_bench.report.build import build_report
from palrp_bench.report.cli import main as report_main
from palrp_bench.metrics.metrics_json import metrics_document
from palrp_bench.metrics.published import attach_published, load_published
from palrp_bench.report.summary import summary_text
from palrp_bench.report.tables import (PAPER, OURS, REPRODUCED_ONLY, Table, comparison_frame, latex, markdown,
                                       paired_frame, paired_tables, paper_tables)

STEPS = np.round(np.linspace(0, 1, 11), 10)


def _curve_rows(model, task, method, paper_task, level, n=6, metric="ac", variant="generation", causal=True,
                spread=1 / 1000):
    rows = []
    for i in range(n):
        for x in STEPS:  # a flat curve at `level + i * spread`: its area is exactly that value
            rows.append({"run": "r", "model": model, "quantization": "none", "dtype": "bfloat16", "task": task,
                         "paper_task": paper_task, "protocol": "official", "causal": causal, "rules": "attnlrp",
                         "aggregation": "official", "method": method, "sample_id": f"{task}-{i}",
                         "metric": metric, "variant": variant, "step": x, "value": level + i * spread})
    return rows


def _published(tmp_path):
    folder = tmp_path / "paper"
    folder.mkdir(exist_ok=True)
    pd.DataFrame([["table1", "llama2_7b", "imdb", "attnlrp", "generation", "auac", 0.779, "true"],
                  ["table1", "llama2_7b", "imdb", "pa_lrp", "generation", "auac", 0.796, "true"],
                  ["table1", "llama2_7b", "imdb", "pa_lrp", "generation", "au_mse", 6.521, "false"],
                  ["table1", "tinyllama", "imdb", "pa_lrp", "generation", "auac", 0.806, "true"],
                  ["table3", "llama3_8b", "mcqa", "pa_lrp", "generation", "auac", 0.377, "true"]],
                 columns=["table", "model", "task", "method", "variant", "metric", "value", "higher_is_better"]
                 ).to_csv(folder / "t.csv", index=False)
    return folder


def _tidy():
    return pd.DataFrame(_curve_rows("llama2_7b", "imdb", "pa_lrp", "imdb", 0.8)
                        + _curve_rows("llama2_7b", "imdb", "attnlrp", "imdb", 0.75)
                        + _curve_rows("llama3_8b", "mcqa", "pa_lrp", "mcqa", 0.38)
                        + _curve_rows("llama3_8b", "mcqa_noncausal", "pa_lrp", "mcqa", 0.4, causal=False)
                        + _curve_rows("tiny_llama_cls", "synthetic_sentiment", "pa_lrp", "synthetic_sentiment", 0.9))


def test_published_numbers_ship_with_the_package_and_attach_to_metrics_csv(tmp_path):
    shipped = load_published()
    assert {"table1", "table2", "table3", "table4", "table5", "appendix_f"} <= set(shipped.table)
    row = shipped[(shipped.table == "table4") & (shipped.model == "deit_tiny") & (shipped.method == "pa_lrp")
                  & (shipped.variant == "positive") & (shipped.metric == "auc_predicted")].iloc[0]
    assert row.value == 3.579 and row.higher_is_better is False
    metrics = table_metrics(pd.DataFrame(_curve_rows("llama2_7b", "imdb", "pa_lrp", "imdb", 0.8)
                                         + _curve_rows("tiny_llama_cls", "synthetic_sentiment", "pa_lrp",
                                                       "synthetic_sentiment", 0.9)), 0.95, 200)
    with_paper = attach_published(metrics, shipped).set_index("model")
    # the llama2_7b PA-LRP row is printed in Table 1 and in Table 2, with the same number
    assert with_paper.loc["llama2_7b", "paper_table"] == "table1,table2"
    assert with_paper.loc["llama2_7b", "published"] == 0.796
    assert with_paper.loc["llama2_7b", "difference"] == pytest.approx(0.8025 - 0.796)
    assert with_paper.loc["tiny_llama_cls", "paper_table"] == "" and math.isnan(with_paper.loc["tiny_llama_cls",
                                                                                               "published"])
    summary = summary_text(with_paper.reset_index())  # 6 samples: the interval is flagged in a footnote
    assert re.search(r"0\.80[23] \[0\.80\d, 0\.80\d\] \(1\) \(paper 0\.796\)", summary)
    assert f"(1) {SMALL_SAMPLE_NOTE}" in summary


def test_paper_tables_are_shaped_like_the_paper(tmp_path):
    metrics = table_metrics(_tidy(), 0.95, 200)
    tables = paper_tables(metrics, load_published(_published(tmp_path)), 0.95)
    assert [t.name for t in tables] == ["table1", "table3", "table3"]  # Table 3 reproduced causal and non-causal
    t1 = tables[0].frame
    # methods as rows grouped by model (the paper lists several), (variant, metric) columns split paper | ours
    assert t1.index.names == ["model", "method"]
    assert list(t1.index) == [("llama2_7b", "attnlrp"), ("llama2_7b", "pa_lrp"), ("tinyllama", "pa_lrp")]
    assert list(t1.columns) == [("auac ↑", PAPER), ("auac ↑", OURS), ("au_mse ↓", PAPER), ("au_mse ↓", OURS)]
    assert t1.loc[("llama2_7b", "pa_lrp"), ("auac ↑", PAPER)] == "0.796"
    assert re.fullmatch(r"0\.80[23] \[0\.80\d, 0\.80\d\] \(1\)", t1.loc[("llama2_7b", "pa_lrp"), ("auac ↑", OURS)])
    assert tables[0].notes == [f"(1) {SMALL_SAMPLE_NOTE}"]  # 6 samples per cell
    assert t1.loc[("tinyllama", "pa_lrp"), ("auac ↑", OURS)] == "-"  # not reproduced yet: visible as missing
    assert t1.loc[("llama2_7b", "attnlrp"), ("au_mse ↓", PAPER)] == "-"  # no such published number
    noncausal = [t for t in tables if "causal=False" in t.title]
    assert len(noncausal) == 1 and "task mcqa_noncausal reproduces mcqa" in noncausal[0].title
    assert noncausal[0].frame.index.names == ["method"]
    md = markdown(tables[0])
    assert "| model     | method  | auac ↑ paper | auac ↑ ours" in md


def test_latex_goes_through_pandas_styler_escaping():
    frame = pd.DataFrame([["0.5 [0.4, 0.6]"]], index=pd.Index(["m{x}$^~#&%_"], name="model"),
                         columns=pd.MultiIndex.from_tuples([("auac ↑", OURS)]))
    tex = latex(Table("t", "run a_b {1} $x^2$ ~ 95%", frame, ["(1) all samples equal"]))
    assert r"m\{x\}\$\textasciicircum \textasciitilde \#\&\%\_" in tex
    assert r"auac $\uparrow$" in tex and r"\toprule" in tex and r"\begin{table}" in tex
    assert r"\caption{run a\_b \{1\} \$x\textasciicircum 2\$ \textasciitilde \space 95\%" in tex


def test_comparison_frame_keeps_unreproduced_published_numbers(tmp_path):
    cmp = comparison_frame(table_metrics(_tidy(), 0.95, 200), load_published(_published(tmp_path)))
    row = cmp[(cmp.paper_table == "table1") & (cmp.method == "pa_lrp") & (cmp.model == "llama2_7b")
              & (cmp.metric == "auac")].iloc[0]
    assert row.value == pytest.approx(0.8025) and row.published == 0.796 and row.n == 6
    assert row.difference == pytest.approx(0.0065) and bool(row.higher_is_better)
    assert row.ci_low < row.value < row.ci_high
    missing = cmp[(cmp.model == "tinyllama")].iloc[0]
    assert math.isnan(missing.value) and missing.published == 0.806
    assert set(cmp[cmp.model == "llama3_8b"].run_task) == {"mcqa", "mcqa_noncausal"}
    assert list(cmp[cmp.paper_table == REPRODUCED_ONLY].model) == ["tiny_llama_cls"]


def test_an_unreproduced_published_iou_carries_its_caveat_in_comparison_csv():
    """The AttnLRP paper's SQuAD IoU (its definition unknown) keeps the metric's note in comparison.csv even where no
    number of ours stands beside it; a published number without a note keeps none."""
    from palrp_bench.metrics.evidence import IOU_NOTE

    published = load_published(None)
    cmp = comparison_frame(pd.DataFrame(), published)
    iou = cmp[cmp.metric == "iou"]
    assert len(iou) >= 1 and iou.value.isna().all() and (iou.note == IOU_NOTE).all()
    assert cmp[cmp.metric == "auac"].note.isna().all()


def test_paired_tables_say_better_only_when_significant_after_holm():
    strong = pd.DataFrame(_curve_rows("m", "t", "pa_lrp", "t", 0.8, n=12, spread=0.01)
                          + _curve_rows("m", "t", "attnlrp", "t", 0.7, n=12, spread=0.0105)
                          + _curve_rows("m", "t", "pe_only", "t", 0.7, n=12, spread=0.01))
    strong.loc[(strong.method == "pe_only") & (strong.sample_id == "t-0"), "value"] += 0.01  # tiny, not significant
    paired = paired_frame(metric_samples(strong), 0.95, 200)
    by_pair = paired.set_index(["method_a", "method_b"])
    assert by_pair.loc[("pa_lrp", "attnlrp"), "a_better"] is True
    assert by_pair.loc[("pa_lrp", "attnlrp"), "p_value"] == pytest.approx(2 / 2 ** 12)  # exact: 4096 patterns
    assert by_pair.loc[("pa_lrp", "attnlrp"), "p_holm"] == pytest.approx(2 * 2 / 2 ** 12)  # 2 comparisons
    assert by_pair.loc[("pe_only", "attnlrp"), "a_better"] is None
    (table,) = paired_tables(paired, 0.95)
    text = markdown(table)
    assert "A better? (Holm, α=0.05)" in text and "not significant" in text and "| yes" in text
    assert "Holm-adjusted over the 2 comparisons" in table.title and "0.0000" not in text


def test_summary_prints_both_ends_of_the_interval_and_notes_constant_samples():
    rows = pd.DataFrame(_curve_rows("m", "t", "pa_lrp", "t", 0.5, n=8, spread=0.05)
                        + _curve_rows("m", "t", "attnlrp", "t", 0.8, n=8, spread=0.0))
    metrics = table_metrics(rows, 0.95, 200)
    text = summary_text(metrics)
    assert re.search(r"\| pa_lrp\s+\| 8\s+\| 0\s+\| 0\.675 \[0\.6\d\d, 0\.7\d\d\]", text)
    assert "0.800 [0.800, 0.800] (1)" in text and "(1) all samples equal: zero-width interval" in text
    assert "±" not in text and "nan" not in text.lower()


def test_build_report_writes_markdown_latex_plots_and_refreshes_metrics_json(tmp_path):
    csv = tmp_path / "results.csv"
    _tidy().to_csv(csv, index=False)
    cfg = type("Cfg", (), {"confidence": 0.9, "n_boot": 200, "gallery_ids": [],
                           "out_dir": tmp_path / "out", "paper_dir": _published(tmp_path)})()
    result = build_report([csv], cfg)
    md = (tmp_path / "out/report.md").read_text()
    assert "### table1" in md and "| 0.796" in md and "auac ↑ ours" in md
    assert "90% BCa CI" in md and "pa_lrp - attnlrp" in md and "## Reproduced only" in md
    tex = (tmp_path / "out/report.tex").read_text()
    assert r"\begin{tabular}" in tex and r"llama2\_7b" in tex and r"$\uparrow$" in tex
    pngs = [f for f in result.files if f.suffix == ".png"]
    assert pngs and all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in pngs)


def test_metrics_json_is_shaped_like_lm_eval_results(tmp_path):
    metrics = attach_published(table_metrics(_tidy(), 0.95, 200), load_published(_published(tmp_path)))
    doc = json.loads(json.dumps(metrics_document(
        metrics[metrics.task == "imdb"],
        {"run": "r", "updated": "2025-01-01T00:00:00", "seeds": [0],
         "environment": {"git": {"commit": "abc", "dirty": False}, "versions": {"torch": "2"}},
         "invocations": [{"config": {"report": {"confidence": 0.95}}}]}), allow_nan=False))
    entry = doc["results"]["llama2_7b/imdb/pa_lrp"]["auac,generation"]
    assert entry["value"] == pytest.approx(0.8025) and entry["published"] == 0.796
    assert entry["paper_table"] == "table1" and entry["n"] == 6 and isinstance(entry["n"], int)
    assert entry["note"] == SMALL_SAMPLE_NOTE and entry["difference"] == pytest.approx(0.0065)
    assert doc["results"]["llama2_7b/imdb/pa_lrp"]["cell"]["causal"] is True
    assert doc["higher_is_better"]["auac,generation"] is True
    assert doc["n-samples"]["llama2_7b/imdb/attnlrp"] == {"effective": 6, "nonfinite": 0}
    assert doc["git_hash"] == "abc" and doc["confidence_level"] == 0.95 and doc["versions"] == {"torch": "2"}


def test_report_cli_on_a_run_dir(tmp_path, capsys):
    from palrp_bench.app import run
    from runner.harness import compose_cfg

    run(compose_cfg(tmp_path / "runs/one", "experiment=selftest", "task=selftest", "task.options.n=6",
                    "runner.quiet=true"), out=open("/dev/null", "w"))
    run_dir = tmp_path / "runs/one"
    written = json.loads((run_dir / "metrics.json").read_text())  # written when the run was merged
    assert set(written["results"]) == {"selftest/selftest/attnlrp", "selftest/selftest/pa_lrp"}
    (run_dir / "metrics.json").unlink()
    assert report_main(["--runs-root", str(tmp_path / "runs"), "--n-boot", "100",
                        "--gallery-ids", "selftest-00001,selftest-00004"]) == 0
    out = capsys.readouterr().out
    assert "Reproduced only" in out and "selftest" in out
    gallery = sorted((run_dir / "report").glob("gallery_*.png"))
    assert f"written to {run_dir / 'report'}/: report.md, report.tex, comparison.csv, paired.csv" in out
    assert f"  1 heatmap galleries: {gallery[0].name}" in out and "..." not in out.split("written to")[1]
    assert json.loads((run_dir / "metrics.json").read_text())["results"] == written["results"]  # refreshed
    gallery = list((run_dir / "report").glob("gallery_*.png"))
    assert len(gallery) == 1
    assert report_main([str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert report_main(["--runs-root", str(tmp_path / "empty")]) == 2


def test_report_help_describes_the_command_in_whole_sentences(capsys):
    with pytest.raises(SystemExit):
        report_main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("tidy CSVs -> the paper's tables (Markdown, LaTeX), paired tests, plots; refreshes the run's metrics.csv / "
            "metrics.json with the published numbers.") in help_text
