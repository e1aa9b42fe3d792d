"""``mode=plan`` (docs/planning.md): sample counts by selection rule, stored samples, the budget's arithmetic against
the cost model, and the printed plan (every missing piece, device-hours, nothing written)."""
import json
import math
import os
import re

import pytest

from palrp_bench.app import run
from palrp_bench.planning.budget import format_plan, plan_budget, sample_count, stored_count
from palrp_bench.planning.cost import CostConstants, estimate, load_constants
from palrp_bench.runner.devices import resolve_devices
from palrp_bench.runner.plan import plan_cells, plan_jobs
from palrp_bench.runner.selection import cache_file_name
from runner.harness import NO_GPU, compose_cfg, run_cli


def _count(tmp_path, *overrides, max_samples=None):
    cell = plan_cells(compose_cfg(tmp_path, *overrides))[0]
    return sample_count(cell, tmp_path, load_constants(), max_samples)


@pytest.mark.parametrize("overrides,label,expected", [
    (("model=deit_base", "task=imagenet", "method=pa_lrp"), "5000", 5000),
    (("model=deit_base", "task=imagenet", "method=pa_lrp", "task.options.subset=all"), "50000", 50000),
    (("model=deit_base", "task=imagenet", "method=pa_lrp", "task.options.subset=700"), "700", 700),
    (("model=deit_base", "task=imagenet_seg", "method=pa_lrp"), "4276", 4276),
    (("model=llama3_8b", "task=wikipedia", "method=pa_lrp"), "2500", 2500),
    (("model=tinyllama", "task=imdb", "method=pa_lrp"), "~1112*", 1112),     # ceil(1000 / 0.9)
    (("model=llama3_8b", "task=mcqa", "method=pa_lrp"), "<=1000*", 1000),
    (("experiment=selftest", "model=selftest", "task=selftest", "method=pa_lrp", "task.options.n=7"), "7", 7),
])
def test_sample_counts_follow_the_selection_rules(tmp_path, overrides, label, expected):
    count = _count(tmp_path, *overrides)
    assert (count.label, count.expected) == (label, expected)
    assert count.pending == label.endswith("*")
    if count.pending:
        assert count.candidates == 1112  # one selection forward per candidate, until the rule is satisfied


def test_max_samples_caps_the_count_and_the_selection(tmp_path):
    """As the runner does, a capped selection stops once its first N entries are known."""
    count = _count(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp", max_samples=10)
    assert (count.label, count.expected, count.candidates) == ("10*", 10, 10)
    count = _count(tmp_path, "model=llama3_8b", "task=mcqa", "method=pa_lrp", max_samples=9)
    assert (count.label, count.expected, count.candidates) == ("9*", 9, 10)  # 9 correct at accuracy 0.9
    assert _count(tmp_path, "model=deit_base", "task=imagenet", "method=pa_lrp", max_samples=10).label == "10"


def test_cached_selection_flags_give_the_exact_count(tmp_path, monkeypatch):
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "cache"))
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp"))[0]
    path = tmp_path / "cache" / "selection" / cache_file_name(cell)
    path.parent.mkdir(parents=True)
    flags = [i % 10 != 0 for i in range(1200)]  # 9 of 10 correct: the 1000th correct is candidate 1112
    path.write_text(json.dumps({"sample_ids": [f"imdb-test-{i:05d}" for i in range(1200)], "flags": flags}))
    count = sample_count(cell, tmp_path, load_constants(), None)
    assert (count.label, count.expected, count.pending, count.candidates) == ("1112", 1112, False, 0)
    path.write_text(json.dumps({"sample_ids": [f"imdb-test-{i:05d}" for i in range(100)], "flags": flags[:100]}))
    count = sample_count(cell, tmp_path, load_constants(), None)
    assert (count.label, count.pending, count.candidates) == ("~1112*", True, 1112 - 100)


def test_stored_samples_are_counted_and_not_estimated_again(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ("experiment=selftest", "task=selftest", "runner.quiet=true")
    run(compose_cfg(run_dir, *overrides, "task.options.n=6"))
    cfg = compose_cfg(run_dir, *overrides, "task.options.n=9")
    cells = plan_cells(cfg)
    assert [stored_count(c, run_dir) for c in cells] == [6, 6]
    devices = resolve_devices(["cpu"], n_cuda=0)
    budget = plan_budget(cells, plan_jobs(cfg, cells, 1), run_dir, devices.devices, cfg.runner, load_constants())
    assert [(b.count.expected, b.stored, b.remaining, b.estimate.n_samples) for b in budget.cells] == [(9, 6, 3, 3)] * 2


def _constants() -> CostConstants:
    values = {"seconds_per_unit": 3e-3, "overhead_s": 0.25, "load_s_per_gparam": 20.0}
    return CostConstants(devices={"cpu": {"measured_on": "test machine", "run_overhead_s": 7.0,
                                          "profiles": {"decoder/bfloat16/none": values}}},
                         explain_cost={"decoder/none": 2.0}, memory={"runtime_bytes": 1e9},
                         architectures=load_constants().architectures, assumed_accuracy=0.8)


def test_plan_arithmetic_equals_the_cost_model(tmp_path):
    constants = _constants()
    cfg = compose_cfg(tmp_path / "run", "experiment=table1", "model=tinyllama", "runner.devices=[cpu,cpu]")
    cells = plan_cells(cfg)
    devices = ("cpu", "cpu")
    budget = plan_budget(cells, plan_jobs(cfg, cells, 2), tmp_path / "run", devices, cfg.runner, constants)
    n = math.ceil(1000 / 0.8)
    one = estimate(cells[0], n, "cpu", constants=constants, kind=budget.device_kind)
    assert [b.count.expected for b in budget.cells] == [n] * 3
    selection = n * one.select_per_candidate  # charged once for tinyllama x imdb
    assert [b.selection_seconds for b in budget.cells] == [pytest.approx(selection), 0.0, 0.0]
    cells_seconds = 3 * n * one.per_sample + selection
    assert budget.device_seconds() == pytest.approx(cells_seconds)
    assert budget.load_seconds == pytest.approx(2 * one.load_seconds)  # one load per worker
    assert budget.total_device_seconds() == pytest.approx(cells_seconds + 2 * one.load_seconds)
    assert budget.wall_seconds() == pytest.approx(budget.total_device_seconds() / 2 + 7.0)
    text = format_plan(budget, cfg.experiment, [], 6)
    hours = budget.total_device_seconds() / 3600
    assert re.search(rf"total: {hours:.1f} device-hours \(", text), text
    assert "6 job(s) on cpu x2 (2 workers)" in text and "nothing missing" in text
    assert "~1250*" in text and "counts assume accuracy 0.8" in text


def test_uncalibrated_devices_say_so_instead_of_a_time(tmp_path):
    constants = _constants()
    cfg = compose_cfg(tmp_path / "run", "model=tinyllama", "task=imdb", "method=pa_lrp")
    cells = plan_cells(cfg)
    budget = plan_budget(cells, plan_jobs(cfg, cells, 1), tmp_path / "run", ("cpu",), cfg.runner,
                         CostConstants(explain_cost=constants.explain_cost, architectures=constants.architectures))
    text = format_plan(budget, None, [], 1)
    assert budget.total_device_seconds() is None and "uncal." in text and "total: ? device-hours" in text
    assert "mode=calibrate" in text


def test_plan_on_an_empty_machine_lists_everything_and_writes_nothing(tmp_path):
    """No GPU (hidden from the child), no checkpoints, no data."""
    done = run_cli("mode=plan", "experiment=table1", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2, done.stderr[-2000:]
    out = done.stdout
    assert "cpu time per task: imdb " in out and re.search(r"total: [\d,.]+ device-hours", out)
    assert "missing (5)" in out
    assert re.search(r"^training: [\d,.]+ device-hours, 3 missing classifiers", out, re.MULTILINE)
    for model in ("llama2_7b ", "llama2_7b_4bit ", "tinyllama "):  # one line each: hours, peak memory, verdict
        assert re.search(rf"^{model}\s+[\d,.]+ h\s+[\d.]+ GB  (fits|does not fit|needs)", out, re.MULTILINE), model
    for piece in ("a CUDA GPU", "./checkpoints/llama2_7b_imdb (", "./checkpoints/llama2_7b_imdb_4bit (",
                  "./checkpoints/tinyllama_imdb (", "IMDB CSV data/imdb/IMDB Dataset.csv"):
        assert piece in out, piece
    assert all(len(line) <= 100 for line in out.splitlines()), max(out.splitlines(), key=len)
    assert done.stderr.strip().splitlines()[-1].startswith("palrp-bench: error: plan incomplete: 5 problem(s)")
    assert os.listdir(tmp_path) == []  # no runs/, no .hydra, no log file


def test_plan_of_the_embedded_default_is_complete(tmp_path):
    """On any machine: with runner.devices=[auto] the plan names the devices this machine has (every GPU, else the
    CPU)."""
    done = run_cli("mode=plan", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    cells = len(plan_cells(compose_cfg(tmp_path / "run")))
    devices = resolve_devices(["auto"]).devices
    on = devices[0] if len(devices) == 1 else ",".join(devices)
    assert cells > 20 and f"{cells} cell(s), {cells} job(s) on {on}" in done.stdout, done.stdout
    assert "nothing missing" in done.stdout
    assert "tiny_vit           synthetic_shapes_seg" in done.stdout
    assert os.listdir(tmp_path) == []
