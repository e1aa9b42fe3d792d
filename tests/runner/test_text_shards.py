"""Shard and batch invariance through the runner on real tiny text models and tasks (the embedded LLaMA
classifier on the IMDB-like task with right padding and "until correct" selection; the embedded causal LM on the
MCQA-like task with "correct only" selection): 1 shard vs 3 shards with other batch sizes give the same samples
and the same per-sample values (issue "Numbers that hold on any machine", item 6)."""
import pandas as pd
import pytest

from palrp_bench.runner.app import run
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
    pd.testing.assert_series_equal(a, b, check_exact=False, rtol=1e-4, atol=1e-5)
