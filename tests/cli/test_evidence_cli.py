"""The evidence benchmark through ``palrp-bench`` (docs/evidence.md): the embedded sweep offline with PG, MRR, RMA
and PTA and their intervals, ``evidence_table1``'s plan listing what is missing, and bad input in one line."""
import json
from importlib.util import find_spec

import numpy as np
import pandas as pd
import pytest

from runner.harness import NO_GPU, read_results, run_cli

TASKS = ("synthetic_sva", "synthetic_ra", "synthetic_qa")
METHODS = ("attnlrp", "pa_lrp", "gradient_l2", "alti_logit")


@pytest.mark.slow  # 12 cells of the tiny evidence model, 6 samples each: ~45 s, mostly the harness per cell
def test_the_embedded_sweep_prints_the_four_metrics_with_intervals(tmp_path):
    run = tmp_path / "run"
    done = run_cli("-m", "model=tiny_llama_evidence", f"task={','.join(TASKS)}", f"method={','.join(METHODS)}",
                   "runner.max_samples=6", "runner.quiet=true", f"run_dir={run}", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout[done.stdout.rindex("tiny_llama_evidence / synthetic_qa"):]
    header = next(line for line in last.splitlines() if line.startswith("| method"))
    for column in ("pg:default ↑", "mrr:default ↑", "rma:default ↑", "pta:default ↑", "pg:default_corrected_ties ↑",
                   "mrr:with_question ↑", "tied_token_share:default"):
        assert column in header, column
    rows = [line for line in last.splitlines() if line.startswith("| alti_logit")]
    assert rows and rows[0].count("[") >= 20  # a value with its interval in every metric column
    df = read_results(run)
    assert set(map(tuple, df[["task", "method"]].drop_duplicates().to_numpy())) == {(t, m) for t in TASKS
                                                                                    for m in METHODS}
    assert df.value.between(0, 1).all() and (df.groupby(["task", "method"]).sample_id.nunique() == 6).all()
    metrics = pd.read_csv(run / "metrics.csv")
    table = metrics[metrics.metric.isin(["pg", "mrr", "rma", "pta"]) & (metrics.variant == "default")]
    assert len(table) == 4 * len(TASKS) * len(METHODS) and np.isfinite(table.value).all()
    manifest = json.loads((run / "manifest.json").read_text())
    shards = [s for c in manifest["cells"] for s in c["shards"]]
    assert len(shards) == 12 and all(s["dropped"] == {} for s in shards)  # counted even when nothing is dropped


def test_table1_plan_lists_the_missing_data_and_models(tmp_path):
    done = run_cli("mode=plan", "experiment=evidence_table1", f"run_dir={tmp_path / 'r'}", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2, done.stderr[-2000:]
    text = " ".join((done.stdout + done.stderr).split())
    for item in ("sva data (sva): not on the Hugging Face hub", "task=sva task.path=<lgd_dataset.tsv",
                 "hub dataset nyu-mll/blimp (ra)", "task=ra task.path=<blimp>", "hub dataset rajpurkar/squad_v2 (qa)",
                 "hub model google-bert/bert-large-uncased", "hub model meta-llama/Llama-3.1-8B (llama3_1_8b)",
                 "a CUDA GPU (for gpt2_large, gpt2_xl, llama3_1_8b, llama3_2_1b, llama3_2_3b)",
                 "bert_base_uncased qa alti", "gpt2_xl ra alti_logit"):
        assert item in text, item
    assert "gpt2_xl qa alti_logit" not in text
    if find_spec("spacy") is None:  # BLiMP marks no antecedent: the parser is needed, and said how to get
        assert "spaCy (ra): the hub's nyu-mll/blimp marks no evidence" in text
        assert "python -m spacy download en_core_web_sm" in text


@pytest.mark.parametrize("args,needle", [
    (("model=bert_base_uncased", "task=sva", "method=alti_logit"),
     "method 'alti_logit' cannot explain model bert_base_uncased (masked_lm)"),
    (("model=tiny_llama_evidence", "task=synthetic_ra", "method=attnlrp", "+task.options.prompt=x"),
     "unknown option(s) ['prompt'] for dataset synthetic_ra"),
])
def test_bad_input_is_one_line(tmp_path, args, needle):
    done = run_cli(*args, f"run_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("palrp-bench: error:")]
    assert len(lines) == 1 and needle in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
