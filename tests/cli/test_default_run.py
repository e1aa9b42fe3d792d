"""``palrp-bench`` with no arguments: the embedded default (tiny text and vision models, every method),
offline, ending with a readable table (issue "Command line")."""
import re
import time

import pytest

from palrp_bench import catalog
from runner.harness import read_results, run_cli


@pytest.mark.slow
def test_no_arguments_runs_the_embedded_default(tmp_path):
    t0 = time.monotonic()
    done = run_cli(cwd=tmp_path, timeout=600)
    seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = list((tmp_path / "runs").iterdir())
    df = read_results(run_dir)
    smoke = catalog.load("experiment", "smoke")
    expected = {(m, t, me) for b in smoke.cells for m in b.models for t in b.tasks for me in b.methods}
    assert set(map(tuple, df[["model", "task", "method"]].drop_duplicates().to_numpy())) == expected
    assert (df.metric == "nonfinite_relevance").sum() == 0
    assert {"auac", "au_mse"} <= set(re.findall(r"(auac|au_mse):", done.stdout))
    for title in ("tiny_llama_cls / synthetic_sentiment", "tiny_llama_causal / synthetic_mcqa",
                  "tiny_vit / synthetic_shapes ", "tiny_vit / synthetic_shapes_seg"):
        assert title in done.stdout
    assert re.search(r"\| pa_lrp\s+\| 20\s+\| 0\s+\| \d+\.\d{3} \[\d+\.\d{3}, \d+\.\d{3}\]", done.stdout)
    assert "[INFO]" not in done.stdout  # logs go to stderr and the run's log file
    for name in ("manifest.json", "metrics.csv", "metrics.json", "logs/palrp-bench.log"):
        assert (run_dir / name).exists(), name
    print(f"embedded default: {seconds:.1f} s")  # < 25 s on an idle 2-core machine (measured)
