"""Table 4 under both pixel-perturbation tie-breaks side by side (two runs, one per tie-break)."""
import numpy as np
import pandas as pd
import pytest

from palrp_bench.metrics.perturbation import VISION_FRACTIONS
from palrp_bench.metrics.table import table_metrics
from palrp_bench.report.build import build_report
from palrp_bench.report.summary import summary_text
from palrp_bench.report.tables import tie_break_frame, tie_break_markdown
from palrp_bench.rundir import RESULT_COLUMNS


GPU = "cuda/NVIDIA H100 80GB HBM3"


def _vision_rows(run: str, tie_break: str, ones: int, share: float, n: int = 4) -> list[dict]:
    """``n`` samples whose positive agreement curve is 1 for the first ``ones`` steps, then 0."""
    base = {"run": run, "model": "tiny_vit", "quantization": "none", "dtype": "float32", "task": "synthetic_shapes",
            "paper_task": "synthetic_shapes", "protocol": "official", "causal": True, "tie_break": tie_break,
            "tie_device": GPU if tie_break == "topk" else "any",
            "rules": "official_vit", "aggregation": "official", "method": "pa_lrp"}
    rows = []
    for i in range(n):
        sid = f"img-{i}"
        rows += [dict(base, sample_id=sid, metric="agreement", variant="positive", step=round(p, 10),
                      value=float(k < ones)) for k, p in enumerate(VISION_FRACTIONS)]
        rows.append(dict(base, sample_id=sid, metric="tied_pixel_share", variant="predicted", step=np.nan,
                         value=share))
    return rows


def _area(ones: int) -> float:
    """x100 trapezoid area of a curve that is 1 on the first ``ones`` of the 9 steps."""
    return 100 * 0.1 * (ones - 1 + 0.5) if ones else 0.0


def test_both_tie_breaks_side_by_side(tmp_path):
    paths = []
    for run, tie_break, ones in (("run_topk", "topk", 4), ("run_random", "random", 2)):
        df = pd.DataFrame(_vision_rows(run, tie_break, ones, 0.4), columns=RESULT_COLUMNS)
        (tmp_path / run).mkdir()
        df.to_csv(tmp_path / run / "results.csv", index=False)
        paths.append(tmp_path / run / "results.csv")
    metrics = pd.concat([table_metrics(pd.read_csv(p, dtype={"variant": str, "sample_id": str}), 0.95, 100)
                         for p in paths])
    assert set(metrics["tie_break"]) == {"topk", "random"}
    shares = metrics[metrics.metric == "tied_pixel_share"]
    assert shares["value"].tolist() == pytest.approx([0.4, 0.4])
    wide = tie_break_frame(metrics)
    row = wide.loc[("tiny_vit", "synthetic_shapes", "pa_lrp", "auc_predicted", "positive")]
    assert row[("value", "topk")] == pytest.approx(_area(4)) and row[("value", "random")] == pytest.approx(_area(2))
    md = tie_break_markdown(wide, 0.95)
    assert "random - topk" in md and f"{_area(2) - _area(4):.3f}" in md
    report = build_report(paths, plots=False)
    assert "## Table 4 under each pixel-perturbation tie-break" in report.text
    # the published Table 4 depends on the device that ordered the ties: captions name it (random: none did)
    assert f"(ties ordered: topk on {GPU})" in report.text
    assert f"tie_break=topk (ties ordered on {GPU})" in summary_text(metrics[metrics.run == "run_topk"])
    assert "tie_break=random, " in summary_text(metrics[metrics.run == "run_random"])
    assert set(metrics["tie_device"]) == {GPU, "any"}


def test_no_side_by_side_section_with_one_tie_break(tmp_path):
    df = pd.DataFrame(_vision_rows("r", "topk", 3, 0.5), columns=RESULT_COLUMNS)
    assert tie_break_frame(table_metrics(df, 0.95, 100)).empty
    df.to_csv(tmp_path / "results.csv", index=False)
    assert "tie-break" not in build_report([tmp_path / "results.csv"], plots=False).text
