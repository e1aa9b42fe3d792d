"""palrp_bench/bench/gpu_hours.py (``scripts/bench_gpu.py``; docs/rehearsal.md "Hours per table against the
goals"): each table's projection, floor and ratio worked out by hand, the goals, the FLOPs of a sample from the cost model, the CPU dry run's table (the
measurement faked: the real one builds full-size checkpoints) and its step in the GPU check."""
import argparse
import json
from pathlib import Path

import pytest

from palrp_bench.bench import gpu_check, rehearse
from palrp_bench.bench import gpu_hours as bench_gpu

REPO = Path(__file__).resolve().parents[2]
TARGETS = {t.name: t for t in rehearse.TARGETS}


def _measured(target, steady, load_model=10.0, load_data=2.0):
    """80 samples, 16 of them in the first batch; after it ``steady`` s per sample: 10 % data wait, 40 % explain,
    40 % forwards, 5 % metrics, 5 % in no stage."""
    n = 64 * steady
    timings = {"data_wait_s": 0.1 * n, "explain_s": 0.4 * n, "forwards_s": 0.4 * n, "metrics_s": 0.05 * n,
               "write_s": 0.0, "warmup_s": 80 * steady, "warmup_samples": 16, "total_s": 80 * steady + n,
               "samples": 80}
    return rehearse.Measured(target, "ok", samples=80, load_model_s=load_model, load_data_s=load_data,
                             per_sample_s=(80 * steady + n) / 80, steady_sample_s=steady, warmup_samples=16,
                             timings=timings)


def _flops(target, work):
    return {"total": 1.0e11, "explain": 4.0e10, "forwards": 6.0e10}


def test_each_table_is_projected_floored_and_judged_by_hand():
    peak = 790e12
    results = [_measured("tinyllama_imdb_csv", 0.2), _measured("deit_tiny_imagenet", 0.1, 5.0, 1.0),
               _measured("deit_tiny_imagenet_seg", 0.02, 5.0, 1.0),
               rehearse.Measured("llama3_8b_mcqa", "ok", samples=16, per_sample_s=1.0)]  # one batch: not used
    flops = {"tinyllama_imdb_csv": 1.58e13, "deit_tiny_imagenet": 1.0e11, "deit_tiny_imagenet_seg": 7.9e10,
             "llama3_8b_mcqa": 2.7e13}
    rows = {r.name: r for r in bench_gpu.table_hours(results, flops, TARGETS, peak)}
    # Table 1, tinyllama cell only: 3 methods x (10 + 2 s + 1075 x 0.2 s) = 681 s; floor 3 x 1075 x 1.58e13 / 790e12
    t1 = rows["table1"]
    assert (t1.cells, t1.measured, t1.goal_s) == (3, 1, 2400.0)
    assert t1.seconds == pytest.approx(3 * (12 + 1075 * 0.2))
    assert t1.floor_s == pytest.approx(3 * 1075 * 0.02) and t1.ratio == pytest.approx(681 / 64.5)
    assert t1.verdict == "meets (measured cells only)"
    assert rows["table3"].seconds is None and rows["table3"].verdict == "-"  # the 8B ran one batch only
    # Table 4 + App. F (deit_tiny, 2 methods x 5000) and Table 5 (2 methods x 4276), one goal of 15 min together
    t4 = 2 * (6 + 5000 * 0.1)
    t5 = 2 * (6 + 4276 * 0.02)
    group = rows["tables 4+5 + App. F"]
    assert group.seconds == pytest.approx(t4 + t5) and group.goal_s == 900.0
    assert group.floor_s == pytest.approx(2 * 5000 * 1e11 / peak + 2 * 4276 * 7.9e10 / peak)
    assert group.verdict == "misses (measured cells only)" and t4 + t5 > 900
    paper = rows["whole paper"]
    assert paper.seconds == pytest.approx(681 + t4 + t5) and paper.goal_s == 2 * 3600
    assert rows["table2"].goal_s is None and rows["table2"].verdict == "-"


def test_a_sample_costs_what_the_cost_model_counts():
    """DeiT-tiny on ImageNet: 37 perturbation forwards and 2 explanations of one forward and one backward each, over
    197 tokens: 41 forwards of 2 FLOPs per parameter-token plus the attention's share."""
    from palrp_bench.bench.plan import config_of

    from palrp_bench.planning.cost import architecture_of, load_constants
    from palrp_bench.runner.plan import plan_cells

    cell = plan_cells(config_of(["model=deit_tiny", "task=imagenet", "method=pa_lrp"], Path("/nonexistent")))[0]
    arch = architecture_of(cell.model, load_constants())
    per_token = arch.body_params + 2 * arch.tokens * arch.attention_width * arch.layers
    assert bench_gpu.flops_per_sample(cell) == pytest.approx(2 * (37 + 2 * 2) * arch.tokens * per_token)


def test_the_cpu_dry_run_prints_the_table_with_its_assumed_peak(monkeypatch, capsys, tmp_path):
    runs = []

    def fake_run(target, args, work, out=None):
        runs.append((target.name, args.device, args.samples, args.batch_size))
        return _measured(target.name, 0.5)

    monkeypatch.setattr(rehearse, "run_target", fake_run)
    monkeypatch.setattr(bench_gpu, "target_flops", _flops)
    out = tmp_path / "hours.json"
    assert bench_gpu.main(["--device", "cpu", "--targets", "deit_tiny_imagenet_seg", "--work", str(tmp_path),
                           "--json", str(out)]) == 0
    assert runs == [("deit_tiny_imagenet_seg", "cpu", 4, "2")]
    printed = capsys.readouterr().out
    assert "an assumption" in printed and "FLOP/cycle" in printed
    data = json.loads(out.read_text())
    t5 = next(r for r in data["tables"] if r["name"] == "table5")
    assert t5["seconds"] == pytest.approx(2 * (12 + 4276 * 0.5))
    assert t5["floor_s"] == pytest.approx(2 * 4276 * 1e11 / data["peak_flops"])
    assert "| table5 | 1 of 3 |" in printed and "| whole paper | 1 of 14 |" in printed
    # per target the split of its 0.5 s after the first batch, explanation and forwards beside their own floors
    peak = data["peak_flops"]
    assert (f"| deit_tiny_imagenet_seg | ok | 64 of 80 | 16 samples | 0.500 s | 0.0500 s (10 %) | "
            f"0.2000 s ({4e10 / peak:.4f} s, {0.2 / (4e10 / peak):.1f}x) | "
            f"0.2000 s ({6e10 / peak:.4f} s, {0.2 / (6e10 / peak):.1f}x) | 0.0250 s | 0.0250 s | ") in printed


def test_without_cuda_it_stops_with_one_line(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(rehearse, "run_target", lambda *a: pytest.fail("nothing may run without CUDA"))
    assert bench_gpu.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "needs a CUDA device" in err and "--device cpu" in err


def test_the_gpu_check_step_has_a_row_per_target_and_per_table(monkeypatch, tmp_path):
    monkeypatch.setattr(rehearse, "run_target", lambda target, args, work, out=None: _measured(target.name, 0.5))
    monkeypatch.setattr(bench_gpu, "target_flops", _flops)
    args = gpu_check.parse_args(["--device", "cpu", "--targets", "deit_tiny_imagenet_seg,tinyllama_mcqa",
                                 "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")])
    check = gpu_check.Check(args, tmp_path / "out")
    rows = list(gpu_check.hours_step(check))
    target, *tables = rows
    assert (target.step, target.target, target.status, target.per_sample_s) == ("hours", "deit_tiny_imagenet_seg",
                                                                                 gpu_check.OK, 0.5)
    assert "64 samples after a first batch of 16" in target.note and "x)" in target.note
    by_name = {r.target: r for r in tables}  # tinyllama_mcqa prices no table: not run
    assert by_name["table5"].status == "partial" and by_name["table1"].status == gpu_check.SKIPPED
    assert "goal 15.0 min on one H100: misses" in by_name["tables 4+5 + App. F"].note
    assert (tmp_path / "out" / "hours" / "hours.md").is_file()
    assert json.loads((tmp_path / "out" / "hours" / "hours.json").read_text())["device"] == "cpu"
