"""SLURM path through the Hydra submitit launcher, exercised with its local executor: one shard per array
element, all shards writing into one run dir, merged by the last job (issue "Runner", cluster)."""
import os

import pandas as pd
import pytest

from palrp_bench.app import run
from runner.harness import compose_cfg, per_sample_values, read_results, run_cli

SLURM_EXTRA = 'the slurm extra is not installed (pip install -e ".[slurm]")'
pytest.importorskip("submitit", reason=SLURM_EXTRA)
pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason=SLURM_EXTRA)


def test_submitit_local_array_of_shards(tmp_path):
    run_dir = tmp_path / "sweep"
    done = run_cli("-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5", "experiment=selftest",
                   "task=selftest", "task.options.n=12", "runner.n_shards=2", "runner.shard=0,1",
                   "runner.quiet=true", f"run_dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    # each array element recorded its resolved config once it started (nothing is written before a run starts)
    assert sorted(p.name.rsplit("-", 1)[-1] for p in (run_dir / ".hydra").iterdir()) == ["job0", "job1"]
    assert list((run_dir / ".submitit").iterdir())  # really went through submitit
    stores = sorted(p.name for p in (run_dir / "cells/selftest/selftest/attnlrp").glob("shard-*.jsonl"))
    assert stores == ["shard-000-of-002.jsonl", "shard-001-of-002.jsonl"]
    reference = tmp_path / "reference"
    run(compose_cfg(reference, "experiment=selftest", "task=selftest", "task.options.n=12", "runner.quiet=true"),
        out=open(os.devnull, "w"))
    pd.testing.assert_series_equal(per_sample_values(read_results(run_dir)),
                                   per_sample_values(read_results(reference)))
