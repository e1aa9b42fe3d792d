"""Tidy CSV + manifest (docs/design.md section 6, "Tidy CSV"), and the multi-worker path on two CPU worker processes."""
import json
import math

import pandas as pd
import pytest

from palrp_bench.app import run
from palrp_bench.errors import MissingDataError
from palrp_bench.metrics.nlp import au_mse, auac
from palrp_bench.rundir import METRICS_CSV_COLUMNS, RESULT_COLUMNS
from palrp_bench.runner.merge import merge_run
from runner.harness import compose_cfg, per_sample_values, read_results

SELFTEST = ("experiment=selftest", "task=selftest", "runner.quiet=true")


def test_tidy_csv_is_long_and_self_describing(tmp_path):
    run(compose_cfg(tmp_path / "r1", *SELFTEST, "task.options.n=6", "protocol=corrected", "rules=cp_lrp",
                    "seed=7", "runner.devices=[cpu]"), out=open("/dev/null", "w"))
    df = read_results(tmp_path / "r1")
    assert list(df.columns) == RESULT_COLUMNS
    assert set(df.run) == {"r1"} and set(df.model) == {"selftest"} and set(df.task) == {"selftest"}
    assert set(df.protocol) == {"corrected"} and set(df.rules) == {"cp_lrp"} and set(df.quantization) == {"none"}
    assert set(df.causal) == {True}  # every row says whether attention was causal
    assert set(df.aggregation) == {"official"} and set(df.dtype) == {"float32"}
    assert len(df) == 2 * 6 * 45
    scalar = df[df.metric == "correct"]
    assert scalar.step.isna().all() and set(scalar.variant) == {"all"}
    manifest = json.loads((tmp_path / "r1/manifest.json").read_text())
    assert manifest["seeds"] == [7] and manifest["devices"] == ["cpu"] and manifest["n_rows"] == len(df)
    assert manifest["environment"]["versions"]["torch"] and "commit" in manifest["environment"]["git"]
    assert manifest["invocations"][0]["config"]["protocol"] == "corrected"
    assert {c["key"] for c in manifest["cells"]} == {"selftest/selftest/attnlrp", "selftest/selftest/pa_lrp"}
    # merging again is idempotent
    before = [(tmp_path / "r1" / name).read_bytes() for name in ("results.csv", "metrics.csv")]
    merge_run(tmp_path / "r1")
    assert [(tmp_path / "r1" / name).read_bytes() for name in ("results.csv", "metrics.csv")] == before


def test_every_run_writes_metrics_csv_from_the_metric_functions(tmp_path):
    run(compose_cfg(tmp_path / "r1", *SELFTEST, "task.options.n=9"), out=open("/dev/null", "w"))
    df = read_results(tmp_path / "r1")
    metrics = pd.read_csv(tmp_path / "r1/metrics.csv", dtype={"variant": str})
    assert list(metrics.columns) == METRICS_CSV_COLUMNS
    assert set(metrics.metric) == {"auac", "au_mse"} and set(metrics.variant) == {"generation", "pruning"}
    for (method, metric, variant), row in metrics.set_index(["method", "metric", "variant"]).iterrows():
        raw = df[(df.method == method) & (df.metric == {"auac": "ac", "au_mse": "mse"}[metric])
                 & (df.variant == variant)]
        curves = raw.pivot(index="sample_id", columns="step", values="value").to_numpy()
        assert curves.shape == (9, 11)
        # metrics.csv holds 10 significant digits (float_format %.10g)
        assert row.value == pytest.approx({"auac": auac, "au_mse": au_mse}[metric](curves), rel=1e-9)
        assert row.ci_low < row.value < row.ci_high and row.n == 9 and row.n_nonfinite == 0
        assert row.interval == "bca_bootstrap"


def test_merge_of_a_non_run_dir_is_a_clear_error(tmp_path):
    with pytest.raises(MissingDataError, match="holds no results"):
        merge_run(tmp_path)


def test_two_cpu_workers_give_the_single_worker_results(tmp_path):
    run(compose_cfg(tmp_path / "one", *SELFTEST, "task.options.n=24"), out=open("/dev/null", "w"))
    double = run(compose_cfg(tmp_path / "two", *SELFTEST, "task.options.n=24", "runner.devices=[cpu,cpu]"),
                 out=open("/dev/null", "w"))
    assert len(double.jobs) == 4 and {j.n_shards for j in double.jobs} == {2}  # one shard per worker
    assert sorted(r.job for r in double.reports) == sorted(j.name for j in double.jobs)
    assert (tmp_path / "two/logs/worker-0.log").exists() and (tmp_path / "two/logs/worker-1.log").exists()
    pd.testing.assert_series_equal(per_sample_values(read_results(tmp_path / "one")),
                                   per_sample_values(read_results(tmp_path / "two")))


def test_a_worker_error_surfaces_as_one_line(tmp_path):
    from palrp_bench.errors import BadInputError

    with pytest.raises(BadInputError, match="task.options.n must be >= 1"):
        run(compose_cfg(tmp_path, *SELFTEST, "task.options.n=0", "runner.devices=[cpu,cpu]"),
            out=open("/dev/null", "w"))


@pytest.mark.cuda
def test_one_worker_per_gpu(tmp_path):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices (this machine has "
                    f"{torch.cuda.device_count()}); the same path runs on CPU workers in the test above")
    outcome = run(compose_cfg(tmp_path, *SELFTEST, "runner.devices=[0,1]"), out=open("/dev/null", "w"))
    assert {r.device for r in outcome.reports} == {"cuda:0", "cuda:1"}


def test_step_values_are_exact_fractions(tmp_path):
    run(compose_cfg(tmp_path, *SELFTEST, "task.options.n=2"), out=open("/dev/null", "w"))
    steps = sorted(read_results(tmp_path).step.dropna().unique())
    assert all(math.isclose(s, k / 10, abs_tol=1e-12) for s, k in zip(steps, range(11)))


def test_a_non_causal_task_says_so_in_every_row(tmp_path):
    run(compose_cfg(tmp_path / "r1", *SELFTEST, "task.options.n=3", "task.causal=false"), out=open("/dev/null", "w"))
    df = read_results(tmp_path / "r1")
    metrics = pd.read_csv(tmp_path / "r1/metrics.csv")
    assert set(df.causal) == {False} and set(metrics.causal) == {False}
