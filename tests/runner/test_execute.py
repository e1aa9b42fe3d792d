"""Running jobs in process with the self-test adapter: sharding / batch-size invariance, resume, non-finite
samples, selection rules, settings guard (issue "Runner")."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.app import run
from palrp_bench.runner.batching import CPU_AUTO_BATCH_SIZE
from palrp_bench.runner.selection import SELECTION_CHUNK, _apply_rule
from palrp_bench.schema import Selection
from palrp_bench.evaluation.tasks.selftest import selftest_correct, selftest_values
from palrp_bench.rundir import NONFINITE_METRIC
from runner.harness import compose_cfg, per_sample_values, read_results

SELFTEST = ("experiment=selftest", "task=selftest", "runner.quiet=true")


def _run(run_dir, *overrides):
    outcome = run(compose_cfg(run_dir, *SELFTEST, *overrides), out=open("/dev/null", "w"))
    return outcome, read_results(run_dir)


def test_results_identical_for_any_sharding_and_batch_size(tmp_path):
    _, one = _run(tmp_path / "a", "runner.n_shards=1", "runner.batch_size=1")
    _, many = _run(tmp_path / "b", "runner.n_shards=3", "runner.batch_size=7")
    _, odd = _run(tmp_path / "c", "runner.n_shards=5", "runner.batch_size=40")
    a, b, c = per_sample_values(one), per_sample_values(many), per_sample_values(odd)
    assert len(a) == 2 * 40 * 45  # 2 methods x 40 samples x (4 curves x 11 steps + correct)
    pd.testing.assert_series_equal(a, b)
    pd.testing.assert_series_equal(a, c)
    stores = sorted(p.name for p in (tmp_path / "b/cells/selftest/selftest/pa_lrp").glob("shard-*.jsonl"))
    assert stores == ["shard-000-of-003.jsonl", "shard-001-of-003.jsonl", "shard-002-of-003.jsonl"]


def test_values_are_the_adapter_computation(tmp_path):
    _, df = _run(tmp_path, "task.options.n=5")
    row = df[(df.method == "pa_lrp") & (df.sample_id == "selftest-00003") & (df.metric == "ac")
             & (df.variant == "pruning")].sort_values("step")
    np.testing.assert_allclose(row["value"].to_numpy(), selftest_values("selftest-00003", "pa_lrp")["pruning_ac"],
                               rtol=1e-9)
    assert row["step"].tolist() == pytest.approx([0.1 * k for k in range(11)])


def test_resume_computes_only_missing_samples(tmp_path):
    first, _ = _run(tmp_path, "runner.max_samples=15")
    assert sum(r.n_computed for r in first.reports) == 30
    second, df = _run(tmp_path, "runner.n_shards=2")  # different sharding on resume: still no recomputation
    assert sum(r.n_computed for r in second.reports) == 2 * 25
    assert sum(r.n_skipped for r in second.reports) == 2 * 15
    assert df.groupby(["method", "sample_id", "metric", "variant", "step"]).size().max() == 1  # no duplicates
    assert df.sample_id.nunique() == 40
    third, _ = _run(tmp_path)
    assert sum(r.n_computed for r in third.reports) == 0


def test_resume_with_other_settings_is_refused(tmp_path):
    _run(tmp_path, "runner.max_samples=3")
    # the protocol also changes its default stabilizers (official -> none) and TF32 (conv -> off)
    with pytest.raises(BadInputError, match=r"other settings \(changed: protocol, stabilizers, tf32\)"):
        _run(tmp_path, "protocol=corrected")
    with pytest.raises(BadInputError, match=r"other settings \(changed: stabilizers\)"):
        _run(tmp_path, "stabilizers=none")
    _run(tmp_path, "stabilizers=official")  # the protocol's default spelled out: the same settings


def test_unknown_stabilizers_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(BadInputError, match="unknown stabilizers 'exact' -- use one of: official, none"):
        _run(tmp_path, "stabilizers=exact")
    assert not (tmp_path / "cells").exists()


def test_nonfinite_relevance_is_recorded_and_counted_not_fatal(tmp_path):
    outcome, df = _run(tmp_path, "task.options.nonfinite_every=10")
    flagged = df[df.metric == NONFINITE_METRIC]
    assert sorted(flagged.sample_id.unique()) == ["selftest-00000", "selftest-00010", "selftest-00020",
                                                  "selftest-00030"]
    assert outcome.merge.n_nonfinite == 8 and outcome.merge.n_samples == 80
    assert df[df.sample_id == "selftest-00010"].metric.unique().tolist() == [NONFINITE_METRIC]
    # the summary counts them: 36 samples used, 4 with non-finite relevance
    assert re.search(r"\| attnlrp \| 36\s+\| 4\s+\|", outcome.summary)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [c["n_nonfinite"] for c in manifest["cells"]] == [4, 4]


def test_selection_rules_by_hand():
    flags = [True, False, True, True, False, True]
    assert _apply_rule(flags, Selection.correct_only, 3) == ([0, 2, 3], True)
    assert _apply_rule(flags, Selection.until_correct, 3) == ([0, 1, 2, 3], True)
    assert _apply_rule(flags, Selection.until_correct, 9) == ([0, 1, 2, 3, 4, 5], False)


@pytest.mark.parametrize("rule", ["until_correct", "correct_only"])
def test_selection_is_shard_and_batch_independent(tmp_path, rule):
    overrides = (f"task.selection={rule}", "task.select_count=12")
    _, a = _run(tmp_path / "a", *overrides, "runner.n_shards=1", "runner.batch_size=3")
    _, b = _run(tmp_path / "b", *overrides, "runner.n_shards=4", "runner.batch_size=11")
    ids = [f"selftest-{i:05d}" for i in range(40)]
    correct = [selftest_correct(i) for i in ids]
    if rule == "correct_only":
        expected = [i for i, ok in zip(ids, correct) if ok][:12]
    else:
        last = [k for k, ok in enumerate(correct) if ok][11]
        expected = ids[:last + 1]
    assert sorted(a.sample_id.unique()) == sorted(b.sample_id.unique()) == sorted(expected)
    manifest = json.loads((tmp_path / "a/manifest.json").read_text())
    (shard,) = manifest["cells"][0]["shards"]
    record = shard["selection"]
    assert record["n_selected"] == len(expected) and record["rule"] == rule
    assert record["candidates_seen"] % SELECTION_CHUNK == 0 or record["candidates_seen"] == 40
    pd.testing.assert_series_equal(per_sample_values(a), per_sample_values(b))


def test_run_dir_records(tmp_path):
    """On the CPU: no device peak memory, the CPU's first automatic batch size."""
    _run(tmp_path, "task.options.n=4", "runner.devices=[cpu]")
    cell = json.loads((tmp_path / "cells/selftest/selftest/attnlrp/cell.json").read_text())
    assert cell["key"] == "selftest/selftest/attnlrp" and cell["settings"]["protocol"] == "official"
    status = json.loads((tmp_path / "cells/selftest/selftest/attnlrp/shard-000-of-001.status.json").read_text())
    assert status["status"] == "done" and status["n_computed"] == 4 and status["device"] == "cpu"
    timings = status["timings"]
    assert set(timings) == {"load_model_s", "load_data_s", "selection_s", "data_wait_s", "explain_s", "forwards_s",
                            "metrics_s", "write_s", "warmup_s", "warmup_samples", "total_s", "samples"}
    assert timings["warmup_samples"] == 4 and timings["samples"] == 4 and timings["warmup_s"] <= timings["total_s"]
    assert status["loader_workers"] == 0  # self-test samples are in memory: nothing to load
    assert status["batch_size"] == CPU_AUTO_BATCH_SIZE and status["peak_device_bytes"] is None
    assert len(list((tmp_path / "cells/selftest/selftest/attnlrp/explanations").glob("*.npz"))) == 4


def test_a_user_error_mid_run_keeps_finished_results(tmp_path, monkeypatch):
    from palrp_bench.evaluation.tasks.selftest import SelftestAdapter

    real = SelftestAdapter.evaluate

    def failing(self, bundle, samples, ctx, metrics=("selftest",)):
        if ctx.method == "pa_lrp":
            raise BadInputError("sample text is empty", "drop empty texts")
        return real(self, bundle, samples, ctx, metrics)

    monkeypatch.setattr(SelftestAdapter, "evaluate", failing)
    with pytest.raises(BadInputError, match="sample text is empty"):
        _run(tmp_path, "task.options.n=5")
    df = read_results(tmp_path)  # merged although the run stopped
    assert set(df.method) == {"attnlrp"} and df.sample_id.nunique() == 5
    status = json.loads((tmp_path / "cells/selftest/selftest/pa_lrp/shard-000-of-001.status.json").read_text())
    assert status["status"] == "failed" and status["error"].startswith("sample text is empty")
