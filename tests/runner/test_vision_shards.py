"""Pixel perturbation through the runner on a real tiny model and task (the embedded ViT on the synthetic shapes):
per-sample values do not depend on sharding or batch sizes, the tie-break is a recorded, resume-guarded cell
setting, and every vision row carries it (issue "Numbers that hold on any machine", items 2 and 6)."""
import json

import pandas as pd
import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.vision_perturbation import tie_break_seeds
from palrp_bench.runner.app import run
from palrp_bench.runner.plan import plan_cells
from runner.harness import compose_cfg, per_sample_values, read_results

METHOD = "attnlrp"
VISION_CELL = ("model=tiny_vit", "task=synthetic_shapes", f"method={METHOD}", "task.options.n=6", "runner.quiet=true")


def _run(run_dir, *overrides):
    """Run the cell; also returns every tie-break seed the pixel choice received."""
    import palrp_bench.evaluation.vision_perturbation as procedure

    seeds: list[int] = []
    real = procedure.perturbation_masks

    def recording(*args, **kwargs):
        seeds.extend(kwargs.get("seeds") or [])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(procedure, "perturbation_masks", recording)
        run(compose_cfg(run_dir, *VISION_CELL, *overrides), out=open("/dev/null", "w"))
    return seeds, read_results(run_dir)


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("one")
    seeds, df = _run(run_dir, "protocol=corrected", "runner.n_shards=1", "runner.batch_size=6",
                     "runner.forward_batch_size=64")
    return run_dir, df, seeds


def test_corrected_random_tie_break_is_shard_and_batch_invariant(one_shard, tmp_path):
    _, one, one_seeds = one_shard
    three_seeds, three = _run(tmp_path, "protocol=corrected", "runner.n_shards=3", "runner.batch_size=2",
                              "runner.forward_batch_size=7")
    assert len(list((tmp_path / f"cells/tiny_vit/synthetic_shapes/{METHOD}").glob("shard-*.jsonl"))) == 3
    a, b = per_sample_values(one), per_sample_values(three)
    assert one.sample_id.nunique() == 6 and set(a.index.get_level_values("metric")) >= {
        "agreement", "accuracy", "tied_pixel_share", "relevance_positional"}
    curves = a.index.get_level_values("metric").isin(["agreement", "accuracy"])
    pd.testing.assert_series_equal(a[curves], b[curves], check_exact=True)  # the 0/1 curves: exactly
    # relevance sums and tie shares: to float32 rounding of the batched explanation
    pd.testing.assert_series_equal(a[~curves], b[~curves], rtol=1e-5, atol=1e-6)
    # each image's tie order is seeded by (run seed, its sample id) in both runs, whatever its batch or shard
    # (2 maps x 2 directions per image); the 0/1 curves alone see the tie order on few of these images
    expected = sorted(tie_break_seeds(0, sorted(one.sample_id.unique())) * 4)
    assert sorted(one_seeds) == sorted(three_seeds) == expected


def test_the_tie_break_is_recorded_in_every_row_and_in_the_cell(one_shard):
    run_dir, df, _ = one_shard
    assert set(df["tie_break"]) == {"random"} and set(df["protocol"]) == {"corrected"}
    assert set(df["tie_device"]) == {"any"}  # a seeded order: no device chose the tied pixels
    assert set(df["stabilizers"]) == {"none"}  # protocol=corrected's default, as the explanations used it
    metrics = pd.read_csv(run_dir / "metrics.csv", dtype={"variant": str})
    assert set(metrics["tie_break"]) == {"random"} and set(metrics["stabilizers"]) == {"none"}
    assert set(metrics["tie_device"]) == {"any"}
    shares = metrics[metrics.metric == "tied_pixel_share"].set_index("variant")["value"]
    assert set(shares.index) == {"predicted", "target"} and all(0 < v <= 1 for v in shares)
    cell = json.loads((run_dir / f"cells/tiny_vit/synthetic_shapes/{METHOD}/cell.json").read_text())
    assert cell["tie_break"] == "random" and cell["settings"]["tie_break"] == "random"
    assert cell["stabilizers"] == cell["settings"]["stabilizers"] == "none"


def test_resuming_with_another_tie_break_is_refused(one_shard):
    run_dir, _, _ = one_shard
    with pytest.raises(BadInputError, match=r"other settings \(changed: tie_break\)"):
        _run(run_dir, "protocol=corrected", "tie_break=topk")


def test_the_tie_break_setting_exists_only_where_pixels_are_perturbed(tmp_path):
    cells = {c.task.name: c for c in plan_cells(compose_cfg(tmp_path, "model=tiny_vit", "method=pa_lrp"))}
    assert cells["synthetic_shapes"].tie_break == "topk"  # protocol=official's default
    assert cells["synthetic_shapes_seg"].tie_break is None
    assert "tie_break" not in cells["synthetic_shapes_seg"].settings()  # other cells keep their fingerprint
    (text,) = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_cls", "task=synthetic_sentiment", "method=pa_lrp",
                                     "tie_break=random"))
    assert text.tie_break is None and text.describe()["tie_break"] is None
    with pytest.raises(BadInputError, match="unknown tie_break 'stable'") as info:
        plan_cells(compose_cfg(tmp_path, *VISION_CELL, "tie_break=stable"))
    assert "\n" not in str(info.value)


def test_official_topk_records_the_device_kind_that_ordered_ties(tmp_path):
    """Under tie_break=topk the tied pixels are the device's choice: every pixel-perturbation row, the cell's
    metrics and the printed table caption name the device kind (here the CPU, pinned)."""
    import io

    out = io.StringIO()
    run(compose_cfg(tmp_path, *VISION_CELL, "protocol=official", "runner.devices=[cpu]", "task.options.n=2"), out=out)
    df = read_results(tmp_path)
    assert set(df["tie_break"]) == {"topk"} and set(df["tie_device"]) == {"cpu"}
    metrics = pd.read_csv(tmp_path / "metrics.csv", dtype={"variant": str})
    assert set(metrics["tie_device"]) == {"cpu"}
    assert "tie_break=topk (ties ordered on cpu)" in out.getvalue()
