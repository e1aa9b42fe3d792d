"""The command line runs every RoPE decoder family through the task kinds its head supports (issue "PA-LRP for
the models people use now"): the shipped real-checkpoint configs (``model=qwen2_5_7b`` ...) with ``model.source``
pointed at a tiny random model of that family saved to a temporary folder, the embedded word-level tokenizer, and
the embedded synthetic tasks (causal LM: ``synthetic_mcqa``, a next-token task; classifier:
``synthetic_sentiment``). Runs in process through the same config composition as ``palrp-bench``; one subprocess
run checks the command itself."""
import re

import pytest

from palrp_bench import catalog
from palrp_bench.data.synthetic_text import ASSET_DIR, VOCAB
from palrp_bench.app import run
from models.tiny_families import make_model
from runner.harness import compose_cfg, read_results, run_cli

#: the shipped config of a real checkpoint per family
CONFIGS = {"llama": "llama3_8b", "mistral": "mistral_7b", "qwen2": "qwen2_5_7b", "qwen3": "qwen3_8b", "gemma2": "gemma2_2b",
           "gemma3": "gemma3_4b", "phi3": "phi3_mini", "gpt_neox": "pythia_1_4b"}
TASKS = {"causal": "synthetic_mcqa", "classifier": "synthetic_sentiment"}
METHODS = "pa_lrp,attnlrp"


def save_tiny(family, kind, folder):
    # the embedded tokenizer's ids (108 words; pad = eos = 2, BOS = 1) fit a vocabulary of 128
    make_model(family, kind, vocab_size=128, max_position_embeddings=128).save_pretrained(folder)
    assert len(VOCAB) <= 128
    return folder


def overrides(family, kind, folder, run_dir):
    return (f"run_dir={run_dir}", f"model={CONFIGS[family]}", f"model.source={folder}", f"model.kind={kind}",
            f"model.tokenizer={ASSET_DIR / 'tokenizer'}", "model.dtype=float32", "model.needs_gpu=false",
            f"task={TASKS[kind]}", "task.selection=all", "task.select_count=null", "task.options.n=2",
            "runner.devices=[cpu]", "runner.quiet=true")


def test_every_family_has_a_real_checkpoint_config():
    for name in CONFIGS.values():
        cfg = catalog.load("model", name)
        assert cfg.loader == "hf" and cfg.kind.value == "causal" and "/" in cfg.source


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_family_runs_through_its_task_kind(tmp_path, family, kind):
    folder = save_tiny(family, kind, tmp_path / "model")
    cfg = compose_cfg(tmp_path / "run", *overrides(family, kind, folder, tmp_path / "run")[1:], "method=pa_lrp")
    with open(tmp_path / "stdout.txt", "w") as out:
        outcome = run(cfg, out=out)
    df = read_results(tmp_path / "run")
    assert set(df.model) == {CONFIGS[family]} and set(df.task) == {TASKS[kind]}
    assert df.sample_id.nunique() == 2 and outcome.merge.n_nonfinite == 0
    assert {"ac", "mse"} <= set(df.metric) and df.value.notna().all()


@pytest.mark.slow
def test_the_command_line_runs_a_family_sweep(tmp_path):
    folder = save_tiny("gemma2", "causal", tmp_path / "gemma2")
    run_dir = tmp_path / "run"
    done = run_cli("-m", *overrides("gemma2", "causal", folder, run_dir), f"method={METHODS}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    df = read_results(run_dir)
    assert set(df.method) == {"pa_lrp", "attnlrp"}
    assert re.search(r"\| pa_lrp\s+\| 2\s+\| 0\s+\|", done.stdout)
