"""Every baseline and AttnLRP-paper composite runs through ``palrp-bench`` on the embedded tasks, under the AttnLRP
perturbation protocol (delta_a) and the PA-LRP protocols, and the AttnLRP Table-1 experiment on a machine without
its models stops at once with one line listing what is missing."""
import numpy as np
import pandas as pd
import pytest

from palrp_bench.catalog import load
from runner.harness import NO_GPU, read_results, run_cli

NEW_METHODS = {"integrated_gradients", "smoothgrad", "attn_rollout", "grad_attn_rollout", "grad_cam", "atman",
               "attnlrp_gamma_b4", "cp_lrp_gamma_b4"}


@pytest.mark.slow  # 62 cells of tiny models: ~25 s of CPU, mostly the harness per cell (merge, metrics.csv)
def test_every_baseline_runs_on_the_embedded_tasks(tmp_path):
    run = tmp_path / "run"
    done = run_cli("experiment=baselines_smoke", "runner.max_samples=1", "runner.quiet=true", f"run_dir={run}",
                   cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    df = read_results(run)
    expected = {(m, t, me) for block in load("experiment", "baselines_smoke").cells
                for m in block.models for t in block.tasks for me in block.methods}
    assert NEW_METHODS <= {me for _, _, me in expected}
    assert set(map(tuple, df[["model", "task", "method"]].drop_duplicates().to_numpy())) == expected
    metrics = pd.read_csv(run / "metrics.csv")
    delta = metrics[metrics.metric == "delta_a"]
    cells = {(m, t, me) for m, t, me in expected if t.endswith("_attnlrp")}
    assert set(map(tuple, delta[["model", "task", "method"]].to_numpy())) == cells
    assert np.isfinite(delta.value).all()
    variants = dict(zip(delta.task, delta.variant))
    assert variants["synthetic_shapes_attnlrp"] == "flipping" and variants["synthetic_sentiment_attnlrp"] == "insertion"
    assert not (df.metric == "nonfinite_relevance").any()


def test_attnlrp_table1_without_models_lists_what_is_missing(tmp_path):
    done = run_cli("experiment=attnlrp_table1", f"run_dir={tmp_path / 'r'}", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("palrp-bench: error: cannot run experiment attnlrp_table1"), lines
    listing = " ".join(line.strip() for line in lines[1:])  # every problem, each with its fix
    for item in ("a CUDA GPU (for flan_t5_xl, llama2_7b, llama2_7b_lm)", "hub model meta-llama/Llama-2-7b-hf",
                 "torchvision weights", "vit_b_16-c867db91.pth", "data/imagenet (imagenet_attnlrp)",
                 "hub model google/flan-t5-xl", "SQuAD v2 file data/squad_v2/dev-v2.0.json (squad_attnlrp)"):
        assert item in listing, item
    assert not (tmp_path / "r" / "cells").exists()


def test_a_vit_only_composite_on_a_language_model_is_refused_in_one_line(tmp_path):
    done = run_cli("model=tiny_llama_cls", "task=synthetic_sentiment", "method=cp_lrp_gamma_b4", cwd=tmp_path)
    assert done.returncode == 2
    assert "method 'cp_lrp_gamma_b4' is defined for pixels models, not tokens" in done.stderr
