"""A real run killed with SIGKILL mid-way and started again: nothing finished is recomputed, nothing is torn
or duplicated, and the results equal an uninterrupted run (issue "Runner", resumable store)."""
import json
import os
import signal
import subprocess
import time

import pandas as pd
import pytest

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


def _wait_for_lines(proc, store, n: int) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if store.exists() and store.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, "the run ended before it could be interrupted"
        time.sleep(0.05)
    raise AssertionError("the run stored too few samples in time")


@pytest.mark.parametrize("sig, devices", [(signal.SIGINT, "[cpu]"), (signal.SIGTERM, "[cpu]"),
                                          (signal.SIGINT, "[cpu,cpu]")], ids=["sigint", "sigterm", "sigint-2-workers"])
def test_ctrl_c_and_sigterm_end_in_one_line_that_resumes(tmp_path, sig, devices):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM (what a scheduler sends to
    the process): exit 130 / 143, one line with the samples stored and the command that resumes, no traceback;
    every stored record complete and no temporary file left; the resume command finishes the run (run once, with one
    worker: resuming on two is what test_merge_workers covers)."""
    import re
    import shlex

    n = 40
    run_dir = tmp_path / "run"
    args = ["model=selftest", "task=selftest", "method=pa_lrp", f"task.options.n={n}", "task.options.delay_s=0.1",
            "runner.quiet=true", "runner.batch_size=4", f"runner.devices={devices}", f"run_dir={run_dir}"]
    cell = run_dir / "cells/selftest/selftest/pa_lrp"
    store = cell / ("shard-000-of-001.jsonl" if devices == "[cpu]" else "shard-000-of-002.jsonl")
    proc = subprocess.Popen(cli_command(*args), cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for_lines(proc, store, 6)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C reaches every process of the terminal's group
        else:
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig, stderr[-2000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    name = signal.Signals(sig).name
    found = re.fullmatch(rf"palrp-bench: interrupted \({name}\) after (\d+) sample\(s\); resume with: (.*)", last)
    assert found, last
    records = [r for path in cell.glob("shard-*.jsonl") for r in read_records(path)]
    ids = [r["sample_id"] for r in records]
    assert int(found.group(1)) == len(records) >= 6 and len(set(ids)) == len(ids) < n
    assert all(p.read_bytes().endswith(b"\n") for p in cell.glob("shard-*.jsonl"))  # no torn line
    assert not [p for p in run_dir.rglob("*.tmp")]  # no half-written explanation or status file
    statuses = [json.loads(p.read_text())["status"] for p in cell.glob("*.status.json")]
    assert "interrupted" in statuses and set(statuses) <= {"interrupted", "done"}  # a worker may have finished

    command = shlex.split(found.group(2))
    assert command == ["palrp-bench", *args]
    if devices != "[cpu]":
        return
    done = run_cli(*command[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_results(run_dir).sample_id.nunique() == n
