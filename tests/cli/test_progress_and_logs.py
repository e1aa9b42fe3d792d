"""One progress bar across the jobs of an invocation (tqdm: samples, rate, ETA), logs on stderr and in
``<run_dir>/logs/``, and stdout holding the result tables only."""
import logging
import re

import pytest

from palrp_bench.runner.execute import RunProgress
from runner.harness import run_cli


def test_the_total_grows_with_the_jobs_and_estimates_the_ones_not_started(caplog):
    progress = RunProgress(3, quiet=True, log_every=10)
    with caplog.at_level(logging.INFO, logger="palrp_bench.runner"):
        progress.start_job("a", 10)
        assert progress.total == 30  # two jobs not started yet count as 10 samples each
        progress.update(10)
        progress.start_job("b", 20)
        assert progress.total == 45  # 10 + 20 known, the third at their mean (15)
        progress.update(20)
        progress.start_job("c", 0)
        assert progress.total == 30 and progress.done == 30
        progress.close()  # the last count is always logged
    lines = [r.getMessage() for r in caplog.records]
    assert "job 2/3 b: 20 sample(s) to compute" in lines
    assert any(re.fullmatch(r"30/30 samples \(\d+\.\d\d/s, ETA 0s\)", line) for line in lines)


@pytest.mark.slow
def test_stdout_has_the_tables_only_and_logs_go_to_stderr_and_the_run_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)  # set by in-process runs with runner.quiet=true
    run_dir = tmp_path / "r"
    done = run_cli("experiment=selftest", "task=selftest", "task.options.n=6", "method=attnlrp,pa_lrp", "-m",
                   f"run_dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[INFO]" not in done.stdout and "[HYDRA]" not in done.stdout and "sample/s" not in done.stdout
    assert re.search(r"\| pa_lrp\s+\| 6\s+\| 0\s+\| \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", done.stdout)
    assert "[palrp_bench.runner][INFO]" in done.stderr and "[HYDRA] Launching 2 jobs" in done.stderr
    assert "job 1/1" in done.stderr and "sample/s" in done.stderr  # each sweep job: one bar over its jobs
    log = (run_dir / "logs" / "palrp-bench.log").read_text()
    assert log.count("run dir") == 2  # both jobs of the sweep append to the run's log file
    quiet = run_cli("experiment=selftest", "task=selftest", "task.options.n=6", "runner.quiet=true",
                    "runner.log_every=3", f"run_dir={tmp_path / 'q'}", cwd=tmp_path)
    assert quiet.returncode == 0 and "sample/s" not in quiet.stderr
    assert re.search(r"job 2/2 selftest/selftest/\w+#0/1: 6 sample\(s\) to compute", quiet.stderr)
    assert re.search(r"12/12 samples \([\d.]+/s, ETA 0s\)", quiet.stderr)
