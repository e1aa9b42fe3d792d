"""A real run killed with SIGKILL mid-way and started again: nothing finished is recomputed, nothing is torn
or duplicated, and the results equal an uninterrupted run (issue "Runner", resumable store)."""
import json
import os
import signal
import subprocess
import time

import pandas as pd

from palrp_bench.app import run
from palrp_bench.runner.store import read_records
from runner.harness import cli_command, cli_env, compose_cfg, per_sample_values, read_results, run_cli

N = 60


def test_sigkill_then_resume(tmp_path):
    run_dir = tmp_path / "run"
    args = ["model=selftest", "task=selftest", "method=pa_lrp", f"task.options.n={N}", "task.options.delay_s=0.04",
            "runner.quiet=true", "runner.batch_size=4", f"run_dir={run_dir}"]
    store = run_dir / "cells/selftest/selftest/pa_lrp/shard-000-of-001.jsonl"
    proc = subprocess.Popen(cli_command(*args), cwd=tmp_path, env=cli_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if store.exists() and store.read_bytes().count(b"\n") >= 12:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    stored = [r["sample_id"] for r in read_records(store)]
    assert 12 <= len(stored) < N and len(set(stored)) == len(stored)
    assert not (run_dir / "results.csv").exists()  # killed before the merge

    done = run_cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    status = json.loads(store.with_suffix(".status.json").read_text())
    assert status["n_skipped"] == len(stored) and status["n_computed"] == N - len(stored)
    records = read_records(store)
    assert len(records) == N and len({r["sample_id"] for r in records}) == N
    assert [r["sample_id"] for r in records[:len(stored)]] == stored  # earlier lines untouched

    reference = tmp_path / "reference"
    run(compose_cfg(reference, "model=selftest", "task=selftest", "method=pa_lrp", f"task.options.n={N}",
                    "runner.quiet=true"), out=open(os.devnull, "w"))
    pd.testing.assert_series_equal(per_sample_values(read_results(run_dir)),
                                   per_sample_values(read_results(reference)))
