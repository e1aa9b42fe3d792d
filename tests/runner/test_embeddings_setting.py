"""The ``embeddings`` switch through the runner: a config key (default ``full``) that enters a cell's fingerprint only
where it changes the numbers (a text model with learned absolute positions, read from its config.json before it
loads, and a method scoring the semantic part alone) and only as ``full`` (``partial`` is how every earlier run
computed), recorded in the ``embeddings`` column of results.csv and metrics.csv (empty elsewhere); resuming with the
other value is refused; a job whose loaded model disagrees with the cell's record stops before computing."""
import json

import pandas as pd
import pytest
import torch
import transformers
from hydra.errors import ConfigCompositionException

from palrp_bench.app import run
from palrp_bench.data.synthetic_text import build_tiny_tokenizer
from palrp_bench.errors import BadInputError, MissingDataError
from palrp_bench.runner.execute import check_embeddings_used
from palrp_bench.runner.plan import Job, plan_cells
from runner.harness import compose_cfg, read_results

QUIET = ("runner.quiet=true", "runner.devices=[cpu]")


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A tiny random GPT-2 saved like a real checkpoint, with the embedded tokenizer."""
    folder = tmp_path_factory.mktemp("tiny_gpt2")
    config = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=1,
                                     eos_token_id=2, pad_token_id=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    return folder


def gpt2_cell(folder, method="attnlrp"):
    return ("model=gpt2", f"model.source={folder}", f"model.tokenizer={folder}", "task=synthetic_mcqa",
            "task.options.n=3", "task.selection=all", f"method={method}")


def test_the_setting_enters_the_fingerprint_only_where_it_changes_the_numbers(tmp_path, gpt2_folder):
    (full,) = plan_cells(compose_cfg(tmp_path, *gpt2_cell(gpt2_folder)))
    (partial,) = plan_cells(compose_cfg(tmp_path, *gpt2_cell(gpt2_folder), "embeddings=partial"))
    assert (full.embeddings, full.embeddings_setting, partial.embeddings_setting) == ("full", "full", "partial")
    assert full.settings()["embeddings"] == "full"
    assert "embeddings" not in partial.settings()  # the scores of every run before the switch: same fingerprint
    assert full.fingerprint() != partial.fingerprint()
    assert full.describe()["embeddings"] == "full" and partial.describe()["embeddings"] == "partial"
    for method in ("pa_lrp", "gradient_l2", "integrated_gradients"):  # methods the switch does not change
        cells = [plan_cells(compose_cfg(tmp_path, *gpt2_cell(gpt2_folder, method), f"embeddings={e}"))[0]
                 for e in ("full", "partial")]
        assert cells[0].fingerprint() == cells[1].fingerprint() and cells[0].embeddings_setting is None
        assert "embeddings" not in cells[0].settings()
    # a RoPE model: no effect, no change of fingerprint, the column stays empty
    rope = [plan_cells(compose_cfg(tmp_path, "model=tiny_llama_causal", "task=synthetic_mcqa", "method=attnlrp",
                                   f"embeddings={e}"))[0] for e in ("full", "partial")]
    assert rope[0].fingerprint() == rope[1].fingerprint() and "embeddings" not in rope[0].settings()
    assert rope[0].describe()["embeddings"] is None


def test_an_unknown_value_is_refused_and_an_unreadable_architecture_is_one_line(tmp_path):
    with pytest.raises(ConfigCompositionException, match="embeddings=token"):  # the schema's enum: full, partial
        compose_cfg(tmp_path, "model=tiny_llama_causal", "task=synthetic_mcqa", "method=attnlrp", "embeddings=token")
    (cell,) = plan_cells(compose_cfg(tmp_path, "model=gpt2", f"model.source={tmp_path / 'absent'}",
                                     "task=synthetic_mcqa", "method=attnlrp"))
    with pytest.raises(MissingDataError, match="no config.json found") as info:
        cell.settings()
    assert "\n" not in str(info.value)


def test_runs_record_the_column_and_a_resume_with_the_other_value_is_refused(tmp_path, gpt2_folder):
    run_dir = tmp_path / "run"
    run(compose_cfg(run_dir, *gpt2_cell(gpt2_folder), *QUIET), out=open("/dev/null", "w"))
    df = read_results(run_dir)
    assert set(df.embeddings) == {"full"} and df.sample_id.nunique() == 3
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert set(metrics.embeddings) == {"full"}
    status = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/*/*/shard-*.status.json")]
    assert [s["embeddings"] for s in status] == ["full"]
    with pytest.raises(BadInputError, match=r"other settings \(changed: embeddings\)"):
        run(compose_cfg(run_dir, *gpt2_cell(gpt2_folder), *QUIET, "embeddings=partial"), out=open("/dev/null", "w"))
    # partial is a cell of its own run; the scores differ, the column says which
    other = tmp_path / "partial"
    run(compose_cfg(other, *gpt2_cell(gpt2_folder), *QUIET, "embeddings=partial"), out=open("/dev/null", "w"))
    assert set(read_results(other).embeddings) == {"partial"}
    rope = tmp_path / "rope"
    run(compose_cfg(rope, "model=tiny_llama_causal", "task=synthetic_mcqa", "task.options.n=2", "method=attnlrp",
                    *QUIET), out=open("/dev/null", "w"))
    assert read_results(rope).embeddings.isna().all()  # empty: the switch does not apply


def test_a_job_whose_model_disagrees_with_the_cell_record_stops(tmp_path):
    (cell,) = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_causal", "task=synthetic_mcqa", "method=attnlrp"))
    job = Job(cell, 0, 1)
    check_embeddings_used(job, None)
    with pytest.raises(BadInputError, match="the loaded model takes embeddings=full, the cell recorded") as info:
        check_embeddings_used(job, "full")
    assert "\n" not in str(info.value)
