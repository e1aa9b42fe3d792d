"""The needle in a haystack through ``palrp-bench`` offline (docs/evidence.md "Needle in a haystack"): the embedded
model on a small grid, results with ``length`` and ``depth`` columns, the key mask and the positional share in the
table, the grid pictures of the report, and bad grids or corpora refused in one line before anything is written."""
import pandas as pd
import pytest

from palrp_bench.report.cli import main as report_main
from runner.harness import read_results, run_cli

GRID = ("task.options.lengths=[96,160]", "task.options.depths=[0,0.5,1]", "task.options.n=2")


@pytest.mark.slow  # one CLI run of 12 needles and the report: about 30 s
def test_the_embedded_grid_runs_offline_and_draws_the_needle_pictures(tmp_path):
    run = tmp_path / "run"
    done = run_cli("model=tiny_llama_needle", "task=synthetic_needle", "method=pa_lrp", *GRID, "runner.quiet=true",
                   "report.n_boot=50", f"run_dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    df = read_results(run)
    assert list(df.columns[-4:]) == ["step", "value", "length", "depth"]
    per_cell = df.groupby(["length", "depth"]).sample_id.nunique()
    assert per_cell.to_dict() == {(length, depth): 2 for length in (96, 160) for depth in (0.0, 0.5, 1.0)}
    assert (df.sample_id.str.extract(r"-L(\d+)-")[0].astype(int) == df.length).all()
    metrics = pd.read_csv(run / "metrics.csv", dtype={"variant": str})
    table = {(m, v): value for m, v, value in metrics[["metric", "variant", "value"]].itertuples(index=False)}
    assert table[("pg", "default")] == 100.0  # the value's tokens top every retrieved needle's relevance
    assert 0 < table[("positional_share_percent", "all")] < 100 and ("rma", "key") in table
    assert 'id="needle"' in (run / "report.html").read_text()
    assert report_main([str(run), "--n-boot", "50", "--needle-metric", "pg:key"]) == 0
    pictures = sorted(p.name for p in (run / "report").glob("needle_*.png"))
    assert pictures == ["needle_run_tiny_llama_needle_synthetic_needle_pg_key.png",
                        "needle_run_tiny_llama_needle_synthetic_needle_positional_share_percent_all.png"]


@pytest.mark.parametrize("args,needle", [
    (("task.options.depths=[0,1.5]",), "task.options.depths must be a list of fractions in [0, 1]"),
    (("task.path=corpus.md",), "is a .md file, not one of .txt, .jsonl, .json, .parquet, .csv"),
])
def test_bad_grids_and_corpora_are_one_line(tmp_path, args, needle):
    (tmp_path / "corpus.md").write_text("text")
    done = run_cli("model=tiny_llama_needle", "task=synthetic_needle", "method=attnlrp", *args,
                   f"run_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.startswith("palrp-bench: error:")]
    assert len(lines) == 1 and needle in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and not (tmp_path / "r").exists()
