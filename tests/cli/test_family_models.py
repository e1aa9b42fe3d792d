"""The command line runs every RoPE decoder family through the task kinds its head supports (issue "PA-LRP for
the models people use now"): the shipped real-checkpoint configs (``model=qwen2_5_7b`` ...) with ``model.source``
pointed at a tiny random model of that family saved to a temporary folder, the embedded word-level tokenizer, and
the embedded synthetic tasks (causal LM: ``synthetic_mcqa``, a next-token task; classifier:
``synthetic_sentiment``). Runs in process through the same config composition as ``palrp-bench``; one subprocess
run checks the command itself."""
import io
import re

import pytest

from palrp_bench import catalog
from palrp_bench.errors import MissingDataError
from palrp_bench.data.synthetic_text import ASSET_DIR, VOCAB
from palrp_bench.app import run
from models.tiny_families import make_model
from runner.harness import compose_cfg, fake_cuda_devices, read_results, run_cli

#: the shipped config of a real checkpoint per family
CONFIGS = {"llama": "llama3_8b", "mistral": "mistral_7b", "qwen2": "qwen2_5_7b", "qwen3": "qwen3_8b", "gemma2": "gemma2_2b",
           "gemma3": "gemma3_4b", "phi3": "phi3_mini", "gpt_neox": "pythia_1_4b", "mixtral": "mixtral_8x7b",
           "qwen2_moe": "qwen2_moe_a2_7b", "qwen3_moe": "qwen3_30b_a3b", "olmoe": "olmoe_1b_7b",
           "deepseek_v3": "moonlight_16b_a3b"}
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


#: the mixture-of-experts configs and whether the model fits an H100 (80 GB)
MOE_CONFIGS = {"mixtral_8x7b": False, "qwen3_30b_a3b": True, "olmoe_1b_7b": True, "qwen2_moe_a2_7b": True,
               "moonlight_16b_a3b": True}


def test_mode_plan_prices_the_moe_configs(tmp_path, monkeypatch):
    """``mode=plan`` on a machine without the weights or a GPU prices every MoE config from its known architecture:
    time from the active parameters (a token's k experts), memory from all of them. Mixtral in NF4 keeps its
    experts in bfloat16 (transformers quantizes only nn.Linear), so it does not fit an H100; the others do."""
    fake_cuda_devices(monkeypatch, 0)
    minutes = {}
    for name, fits in MOE_CONFIGS.items():
        printed = io.StringIO()
        with pytest.raises(MissingDataError, match="plan incomplete"):   # no weights, no data, no GPU here
            run(compose_cfg(tmp_path / name, "mode=plan", f"model={name}", "task=mcqa", "method=pa_lrp",
                            "runner.plan_device=h100"), out=printed)
        out = printed.getvalue()
        row = re.search(rf"^{name}\s+mcqa\s+pa_lrp\s+\S+\s+0\s+\d+\s+([\d.]+) (min|h)\s+([\d.]+) GB$", out, re.M)
        assert row, (name, out)
        minutes[name] = float(row[1]) * (60 if row[2] == "h" else 1)
        assert (float(row[3]) < 85.0) == fits, (name, row[0])
    # time follows the active parameters (the arithmetic: tests/planning/test_cost.py), on top of the fixed
    # per-sample overheads that dominate the small ones
    assert minutes["mixtral_8x7b"] > max(minutes[name] for name in MOE_CONFIGS if name != "mixtral_8x7b")


@pytest.mark.slow
def test_the_command_line_runs_a_family_sweep(tmp_path):
    folder = save_tiny("gemma2", "causal", tmp_path / "gemma2")
    run_dir = tmp_path / "run"
    done = run_cli("-m", *overrides("gemma2", "causal", folder, run_dir), f"method={METHODS}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    df = read_results(run_dir)
    assert set(df.method) == {"pa_lrp", "attnlrp"}
    assert re.search(r"\| pa_lrp\s+\| 2\s+\| 0\s+\|", done.stdout)
