"""``runner.checkpoint`` (docs/engine.md, "Long contexts"): it reaches every explanation of a job, never changes a
sample's numbers (so it is no cell setting: a run may be resumed with the other value), is recorded in the job's
status, and a value that is no mode is refused before anything runs."""
import json

import pandas as pd
import pytest

from palrp_bench.app import run
from palrp_bench.errors import BadInputError
from palrp_bench.runner.plan import plan_cells, plan_jobs
from runner.harness import compose_cfg, per_sample_values, read_results

CELL = ("model=tiny_llama_causal", "task=synthetic_mcqa", "method=pa_lrp", "task.select_count=3",
        "runner.n_shards=1", "runner.quiet=true", "runner.devices=[cpu]", "runner.cache_explanations=false")


def test_checkpointed_runs_store_the_same_per_sample_values(tmp_path):
    run(compose_cfg(tmp_path / "plain", *CELL), out=open("/dev/null", "w"))
    run(compose_cfg(tmp_path / "ckpt", *CELL, "runner.checkpoint=layers"), out=open("/dev/null", "w"))
    plain, ckpt = read_results(tmp_path / "plain"), read_results(tmp_path / "ckpt")
    a, b = per_sample_values(plain), per_sample_values(ckpt)
    assert a.index.equals(b.index) and plain.sample_id.nunique() == 3
    pd.testing.assert_series_equal(a, b, check_exact=False, rtol=1e-5, atol=1e-6)
    (status,) = [json.loads(p.read_text()) for p in (tmp_path / "ckpt").glob("cells/*/*/*/shard-*.status.json")]
    assert status["checkpoint"] == "layers"
    records = [json.loads(next((tmp_path / run).glob("cells/*/*/*/cell.json")).read_text())
               for run in ("plain", "ckpt")]
    assert records[0]["fingerprint"] == records[1]["fingerprint"]  # not a cell setting


def test_jobs_carry_the_setting_and_a_bad_value_is_refused(tmp_path):
    cfg = compose_cfg(tmp_path, *CELL, "runner.checkpoint=layers")
    cells = plan_cells(cfg)
    (job,) = plan_jobs(cfg, cells, 1)
    assert job.checkpoint == "layers"
    assert job.cell.context("cpu", None, 8, job.checkpoint).explain_kwargs()["checkpoint"] == "layers"
    bad = compose_cfg(tmp_path, *CELL, "runner.checkpoint=everything")
    with pytest.raises(BadInputError, match="checkpoint='everything' is not a checkpointing mode"):
        plan_jobs(bad, plan_cells(bad), 1)
