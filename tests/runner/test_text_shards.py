"""Shard and batch invariance through the runner on real tiny text models and tasks (the embedded LLaMA
classifier on the IMDB-like task with right padding and "until correct" selection; the embedded causal LM on the
MCQA-like task with "correct only" selection): 1 shard vs 3 shards with other batch sizes give the same samples
and the same per-sample values (issue "Numbers that hold on any machine", item 6).

The runs use ``runner.devices=[auto]`` (the GPU where there is one, as users run). One bound for every device: these
models have no convolution, and matmuls stay IEEE float32 on a GPU under either tf32 choice, so only the order in
which the kernels of a batch shape sum differs (docs/evaluation.md, "Batch and shard invariance per device")."""
import json

import pandas as pd
import pytest

from palrp_bench.app import run
from runner.harness import compose_cfg, per_sample_values, read_results


def _run(run_dir, *overrides):
    run(compose_cfg(run_dir, "runner.quiet=true", *overrides), out=open("/dev/null", "w"))
    return read_results(run_dir)


@pytest.mark.parametrize("model, task", [("tiny_llama_cls", "synthetic_sentiment"),
                                         ("tiny_llama_causal", "synthetic_mcqa")])
def test_one_shard_and_three_shards_give_the_same_per_sample_values(tmp_path, model, task):
    cell = (f"model={model}", f"task={task}", "method=pa_lrp", "task.select_count=5")
    one = _run(tmp_path / "one", *cell, "runner.n_shards=1", "runner.batch_size=5", "runner.forward_batch_size=64")
    three = _run(tmp_path / "three", *cell, "runner.n_shards=3", "runner.batch_size=2",
                 "runner.forward_batch_size=5")
    assert sorted(one.sample_id.unique()) == sorted(three.sample_id.unique())
    assert one.sample_id.nunique() >= 5 and {"ac", "mse"} <= set(one.metric)
    assert set(one.stabilizers) == set(three.stabilizers) == {"official"}  # protocol=official's default, recorded
    a, b = per_sample_values(one), per_sample_values(three)
    assert a.index.equals(b.index)
    # AC in [0, 1] and MSE of logits: equal to float32 rounding of differently batched forwards
    devices = json.loads((tmp_path / "one" / "manifest.json").read_text())["devices"]
    pd.testing.assert_series_equal(a, b, check_exact=False, rtol=1e-4, atol=1e-5, obj=f"per-sample values on {devices}")


def test_cell_records_the_request_and_samples_what_was_used(tmp_path):
    """The embedded Qwen2 (a family the official code never ran) under protocol=official: the cell's setting is
    the request (``official``, the protocol's default), every sample and the job's status record what the
    explanations used (``none``); resuming with ``stabilizers=official`` spelled out (the same cell setting, which
    on this family places the official set) is refused before anything is computed."""
    from palrp_bench.errors import BadInputError

    cell = ("model=tiny_qwen2_causal", "task=synthetic_mcqa", "method=attnlrp", "task.select_count=2",
            "runner.n_shards=1")
    df = _run(tmp_path, *cell)
    assert set(df.stabilizers) == {"none"}
    cell_dir = tmp_path / "cells" / "tiny_qwen2_causal" / "synthetic_mcqa" / "attnlrp"
    record = json.loads((cell_dir / "cell.json").read_text())
    assert record["stabilizers"] == record["settings"]["stabilizers"] == "official"
    (status,) = [json.loads(p.read_text()) for p in cell_dir.glob("shard-*.status.json")]
    assert status["stabilizers"] == "none"
    stored = sorted(p.read_bytes() for p in cell_dir.glob("shard-*.jsonl"))
    with pytest.raises(BadInputError, match="explained with stabilizers=none, this run's explanations would use "
                                            "official -- use a new run_dir, or stabilizers=none to resume"):
        _run(tmp_path, *cell, "stabilizers=official")
    assert sorted(p.read_bytes() for p in cell_dir.glob("shard-*.jsonl")) == stored
    again = _run(tmp_path, *cell)  # the default again: nothing left to compute, same rows
    pd.testing.assert_frame_equal(again, df)
