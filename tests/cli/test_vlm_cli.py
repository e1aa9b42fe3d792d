"""Vision-language models through the command line (docs/evidence.md "Visual question answering"): the shipped
real-checkpoint configs (``model=qwen2_5_vl_7b`` ...) with ``model.source`` pointed at a tiny random model of their
family saved with its processor, on the embedded grounded questions (``task=synthetic_vqa``) with the pointing game
and relevance mass; ``mode=plan`` prices the real configs from their known architectures."""
import io
import re

import pytest

from palrp_bench import catalog
from palrp_bench.app import run
from palrp_bench.errors import MissingDataError
from models.tiny_vlms import save_checkpoint
from runner.harness import compose_cfg, fake_cuda_devices, read_results

#: the shipped config of a real checkpoint per family, and the GB its weights and activations need at most
CONFIGS = {"qwen2_vl": "qwen2_5_vl_7b", "qwen2_5_vl": "qwen2_5_vl_7b", "llava": "llava_1_5_7b",
           "gemma3": "gemma3_4b_it"}


def test_every_real_config_is_a_vision_language_checkpoint():
    for name in set(CONFIGS.values()):
        cfg = catalog.load("model", name)
        assert cfg.loader == "hf" and cfg.kind.value == "vlm" and "/" in cfg.source


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_family_runs_the_grounded_questions(tmp_path, family):
    folder = save_checkpoint(family, tmp_path / "model")
    cfg = compose_cfg(tmp_path / "run", f"model={CONFIGS[family]}", f"model.source={folder}", "model.dtype=float32",
                      "model.needs_gpu=false", "task=synthetic_vqa", "task.selection=all", "task.select_count=null",
                      "task.options.n=3", "runner.devices=[cpu]", "runner.quiet=true", "method=pa_lrp")
    with open(tmp_path / "stdout.txt", "w") as out:
        outcome = run(cfg, out=out)
    df = read_results(tmp_path / "run")
    assert set(df.model) == {CONFIGS[family]} and set(df.task) == {"synthetic_vqa"}
    assert outcome.merge.n_nonfinite == 0 and df.sample_id.nunique() >= 2
    assert {("pg", "default"), ("rma", "default"), ("pg", "with_text")} <= set(zip(df.metric, df.variant))
    assert df.value.between(0, 1).all()


#: the vision-language configs and whether the model fits an H100 (80 GB) in bfloat16
VLM_CONFIGS = {"qwen2_5_vl_7b": True, "llava_1_5_7b": True, "gemma3_4b_it": True}


def test_mode_plan_prices_the_vision_language_configs(tmp_path, monkeypatch):
    """``mode=plan`` on a machine without the weights or a GPU prices every vision-language config from its known
    architecture: the language model's tokens (the question and the image's tokens) and the tower's work."""
    fake_cuda_devices(monkeypatch, 0)
    for name, fits in VLM_CONFIGS.items():
        printed = io.StringIO()
        with pytest.raises(MissingDataError, match="plan incomplete"):   # no weights, no data, no GPU here
            run(compose_cfg(tmp_path / name, "mode=plan", f"model={name}", "task=refcoco", "method=pa_lrp",
                            "runner.plan_device=h100"), out=printed)
        out = printed.getvalue()
        row = re.search(rf"^{name}\s+refcoco\s+pa_lrp\s+\S+\s+0\s+\d+\s+([\d.]+) (min|h)\s+([\d.]+) GB$", out, re.M)
        assert row, (name, out)
        assert float(row[1]) > 0 and (float(row[3]) < 85.0) == fits, (name, row[0])


def test_the_embedded_model_runs_offline(tmp_path):
    """``model=tiny_vlm task=synthetic_vqa``: the shipped model answers, the correctness filter keeps its right
    answers, and the heatmaps of its explanations point at the asked object far more often than chance."""
    cfg = compose_cfg(tmp_path / "run", "model=tiny_vlm", "task=synthetic_vqa", "task.options.n=24",
                      "runner.devices=[cpu]", "runner.quiet=true", "method=pa_lrp")
    with open(tmp_path / "stdout.txt", "w") as out:
        run(cfg, out=out)
    df = read_results(tmp_path / "run")
    kept = df[(df.metric == "pg") & (df.variant == "default")]
    assert len(kept) >= 20 and kept.value.mean() > 0.5  # the asked object covers 5.7% of the image tokens
    assert df[df.metric == "correct"].value.eq(1).all()
