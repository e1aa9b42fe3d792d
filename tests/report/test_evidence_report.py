"""The decomposition-attribution paper's Table 1 (palrp_bench/paper/evidence_table1.csv): its shape and the figures
the paper's text quotes, names that need no registration to load, and ``palrp-bench-report`` showing the published
number beside a run's in an ``evidence_table1`` table (docs/evaluation.md "Evidence metrics")."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from palrp_bench.catalog import available
from palrp_bench.metrics.table import table_metrics
from palrp_bench.report.cli import main as report_main
from palrp_bench.metrics.published import attach_published, load_published
from palrp_bench.report.tables import OURS, PAPER, paper_tables
from palrp_bench.rundir import RESULT_COLUMNS

MODELS = ["bert_base_uncased", "bert_large_uncased", "gpt2", "gpt2_medium", "gpt2_large", "gpt2_xl", "llama3_2_1b",
          "llama3_2_3b", "llama3_1_8b"]
METHODS = ["alti", "alti_logit", "attnlrp", "cp_lrp", "gradient_l2", "attn_rollout"]
#: names of the published table that have no shipped config (the loader and the report need none registered; the
#: evidence benchmark ships every one)
NOT_SHIPPED = {"model": set(), "method": set(), "task": set()}


@pytest.fixture(scope="module")
def table():
    shipped = load_published()
    return shipped[shipped.table == "evidence_table1"]


def test_the_published_table_has_every_cell_of_table_1(table):
    assert len(table) == 528 and set(table.variant) == {"default"} and set(table.higher_is_better) == {True}
    assert list(dict.fromkeys(table.model)) == MODELS and list(dict.fromkeys(table.task)) == ["ra", "sva", "qa"]
    assert list(dict.fromkeys(table.metric)) == ["pg", "mrr", "rma", "pta"]
    assert table.value.between(0, 100).all() and (table.value == table.value.round()).all()
    cells = table.groupby(["model", "task", "method"]).size()
    assert (cells == 4).all() and len(cells) == 9 * 3 * 5 - 3
    # ALTI on BERT, ALTI-Logit elsewhere; printed "-" (no rows): ALTI-Logit qa on gpt2-xl and the two larger LLaMAs
    alti = table[table.method.str.startswith("alti")]
    assert set(alti[alti.model.str.startswith("bert")].method) == {"alti"}
    assert set(alti[~alti.model.str.startswith("bert")].method) == {"alti_logit"}
    missing = {(m, t) for m in MODELS for t in ("ra", "sva", "qa")} - set(zip(alti.model, alti.task))
    assert missing == {("gpt2_xl", "qa"), ("llama3_2_3b", "qa"), ("llama3_1_8b", "qa")}
    assert set(table.method) == set(METHODS)


def test_figures_the_paper_quotes(table):
    value = table.set_index(["model", "task", "method", "metric"])["value"]
    bert = "bert_base_uncased"
    assert value[(bert, "qa", "attnlrp", "pg")] == value[(bert, "qa", "cp_lrp", "pg")] == 94
    assert value[("gpt2_xl", "ra", "alti_logit", "pg")] == 88
    # AttnRollout's scores are positive everywhere, so its PTA is the evidence share, the same for every model of
    # a family (one tokenizer): BERT / GPT-2 / LLaMA
    share = table[(table.method == "attn_rollout") & (table.metric == "pta")].set_index(["model", "task"])["value"]
    for task, by_family in {"ra": (23, 36, 35), "sva": (5, 15, 15), "qa": (1, 1, 1)}.items():
        for family, expected in zip(("bert", "gpt2", "llama"), by_family):
            assert {share[(m, task)] for m in MODELS if m.startswith(family)} == {expected}, (family, task)


def test_names_are_config_names(table):
    for group, column in (("model", "model"), ("method", "method"), ("task", "task")):
        unknown = set(table[column]) - set(available(group))
        assert unknown <= NOT_SHIPPED[group], (group, unknown - NOT_SHIPPED[group])
    assert {"gpt2", "attnlrp", "cp_lrp", "attn_rollout"} <= set(available("model")) | set(available("method"))


def _made_up_run(csv):
    """One sample pair of made-up per-sample rows per evidence metric for gpt2 / ra / attnlrp, plus a method the
    project does not know."""
    values = {"pg": (1.0, 0.0), "mrr": (0.5, 1.0), "rma": (0.3, 0.1), "pta": (0.4, 0.3)}
    cell = dict(run="r", model="gpt2", quantization="none", dtype="float64", task="ra", paper_task="ra",
                protocol="official", causal=True, tie_break="", tie_device="", stabilizers="none", rules="attnlrp",
                aggregation="official", step=None)
    rows = [{**cell, "method": method, "sample_id": f"ra-{i}", "metric": metric, "variant": "default", "value": v}
            for method in ("attnlrp", "not_a_method") for metric, pair in values.items()
            for i, v in enumerate(pair)]
    pd.DataFrame(rows, columns=RESULT_COLUMNS).to_csv(csv, index=False)
    return pd.read_csv(csv, dtype={"variant": str, "sample_id": str})


def test_the_report_puts_the_published_number_beside_ours(tmp_path, table):
    results = _made_up_run(tmp_path / "results.csv")
    metrics = attach_published(table_metrics(results, 0.95, 200), load_published())
    mine = metrics[metrics.method == "attnlrp"].set_index("metric")
    assert set(mine.paper_table) == {"evidence_table1"}
    assert mine.loc["pg", "value"] == 50.0 and mine.loc["pg", "published"] == 15
    assert mine.loc["mrr", "difference"] == pytest.approx(75.0 - 49)
    (evidence,) = [t for t in paper_tables(metrics, load_published(), 0.95) if t.name == "evidence_table1"]
    frame = evidence.frame
    assert frame.index.names == ["model", "method"] and len(frame) == 9 * 5  # alti on BERT, alti_logit elsewhere
    assert list(frame.columns[:4]) == [("ra", "pg ↑", PAPER), ("ra", "pg ↑", OURS), ("ra", "mrr ↑", PAPER),
                                       ("ra", "mrr ↑", OURS)]
    row = frame.loc[("gpt2", "attnlrp")]
    assert row[("ra", "pg ↑", PAPER)] == "15.000" and row[("ra", "pg ↑", OURS)].startswith("50.000 [")
    assert row[("ra", "rma ↑", PAPER)] == "22.000" and row[("ra", "rma ↑", OURS)].startswith("20.000 [")
    assert row[("sva", "pg ↑", OURS)] == "-" and frame.loc[("gpt2_xl", "alti_logit"), ("qa", "pg ↑", PAPER)] == "-"

    assert report_main([str(tmp_path / "results.csv"), "--no-plots", "--n-boot", "100",
                        "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert "### evidence_table1" in md
    line = next(x for x in md.splitlines() if re.match(r"\| gpt2 +\| attnlrp ", x))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2] == "15.000" and cells[3].startswith("50.000 [") and cells[4] == "49.000"
    assert cells[5].startswith("75.000 [")
    # the method the project does not know is reported too, among the cells the paper has no number for
    assert "not_a_method" in md.split("## Reproduced only")[1]
