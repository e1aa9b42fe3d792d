"""The SQuAD v2 column of AttnLRP's Table 1 offline: ``palrp-bench -m model=tiny_t5_squad task=synthetic_squad
method=...`` runs the shipped tiny T5 and reports delta_a and iou with intervals for every method that explains
T5 (docs/evaluation.md "SQuAD v2 with Flan-T5"). ``tiny_t5`` (random weights, the suite's shared vocabulary) cannot
answer the synthetic questions, so the trained ``tiny_t5_squad`` runs here."""
import numpy as np
import pandas as pd

from runner.harness import read_results, run_cli

#: the methods of the T5 twin; atman joins once it explains encoder-decoders
METHODS = ("attnlrp", "pa_lrp", "grad_x_input")


def test_synthetic_squad_reports_delta_a_and_iou_with_intervals(tmp_path):
    run = tmp_path / "run"
    done = run_cli("-m", "model=tiny_t5_squad", "task=synthetic_squad", f"method={','.join(METHODS)}",
                   "runner.max_samples=6", "runner.quiet=true", f"run_dir={run}", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = pd.read_csv(run / "metrics.csv", dtype={"variant": str})
    for metric, variant in (("delta_a", "insertion"), ("iou", "default")):
        rows = metrics[(metrics.metric == metric) & (metrics.variant == variant)].set_index("method")
        assert set(rows.index) == set(METHODS), (metric, rows)
        assert np.isfinite(rows[["value", "ci_low", "ci_high"]].to_numpy()).all()
        assert (rows.ci_low <= rows.value).all() and (rows.value <= rows.ci_high).all()
    iou = metrics[metrics.metric == "iou"]
    assert ((iou.value >= 0) & (iou.value <= 1)).all()
    df = read_results(run)
    assert set(df.task) == {"synthetic_squad"} and (df[df.metric == "correct"].groupby("method").size() == 6).all()
    for table in ("delta_a", "iou"):
        assert table in done.stdout
