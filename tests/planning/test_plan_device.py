"""GPU plans from anywhere (docs/planning.md "Pricing a device this machine does not have", "On one H100"): the
shipped H100 constants reproduce the H100 measurements, and ``runner.plan_device`` prices a device kind from a
machine without it, touching no GPU."""
import io
import os
import re

import pytest
import torch

from palrp_bench.app import run
from palrp_bench.errors import BadInputError, MissingDataError
from palrp_bench.planning.budget import plan_budget, plan_device
from palrp_bench.planning.cost import load_constants, resolve_device_kind
from palrp_bench.runner.plan import plan_cells, plan_jobs
from runner.harness import NO_GPU, compose_cfg, fake_cuda_devices, run_cli

H100 = "cuda/NVIDIA H100 80GB HBM3"


# ----------------------------------------------------------------------------------- the shipped H100 constants
#: Measured on one H100 80GB HBM3 at runner.batch_size=auto (the full-size rehearsal with random weights, 20
#: samples per target; docs/planning.md "On one H100"): seconds per sample as the figures were reported, rounded
#: to one significant digit, so each stands for an interval (0.5 s: 0.45-0.55 s). Segmentation "0.1 s": Table 5's
#: 0.35 h over its 25,656 samples is 0.049 s, so the interval is taken as 0.05-0.1 s.
MEASURED_S_PER_SAMPLE = [
    ("tinyllama", "imdb", 0.45, 0.55),           # TinyLlama IMDB 0.5 s
    ("llama2_7b", "imdb", 0.35, 0.45),           # LLaMA-2-7B bf16 IMDB 0.4 s
    ("llama2_7b_4bit", "imdb", 0.85, 0.95),      # 7B NF4 0.9 s
    ("llama3_8b", "mcqa", 0.45, 0.55),           # LLaMA-3.1-8B MCQA 0.5 s
    ("llama3_8b", "wikipedia", 0.65, 0.75),      # LLaMA-3.1-8B Wikipedia 0.7 s
    ("deit_tiny", "imagenet", 0.1, 0.2),         # DeiT-T/S/B ImageNet 0.1-0.2 s
    ("deit_small", "imagenet", 0.1, 0.2),
    ("deit_base", "imagenet", 0.1, 0.2),
    ("deit_tiny", "imagenet_seg", 0.05, 0.1),    # segmentation 0.1 s
    ("deit_small", "imagenet_seg", 0.05, 0.1),
    ("deit_base", "imagenet_seg", 0.05, 0.1),
]
#: the per-table projections of the same rehearsal (paper samples x time per sample + loads), hours, rounded
MEASURED_HOURS = {"table1": (1.65, 1.75), "table2": (0.15, 0.25), "table3": (3.85, 3.95),
                  "table4+appendix_f": (1.35, 1.45), "table5": (0.345, 0.355)}
#: how far the plan may be from a measured interval
WITHIN = 1.5


def _h100_budget(tmp_path, experiment, *overrides):
    constants = load_constants()
    cfg = compose_cfg(tmp_path / "run", f"experiment={experiment}", "runner.plan_device=h100", *overrides)
    cells = plan_cells(cfg)
    priced_on = plan_device(cfg.runner, constants)
    return plan_budget(cells, plan_jobs(cfg, cells, priced_on.n_workers), tmp_path / "run", ("cpu",), cfg.runner,
                       constants, priced_on)


def _ratio(value, low, high) -> float:
    """How far ``value`` lies outside ``[low, high]``, as a factor (1 inside)."""
    return low / value if value < low else value / high if value > high else 1.0


@pytest.mark.parametrize("batch_size", ["auto", "8"])  # as measured, and the default
def test_shipped_h100_constants_reproduce_the_h100_measurements(tmp_path, batch_size):
    per_cell, hours = {}, {}
    for experiment in ("table1", "table2", "table3", "table4", "appendix_f", "table5"):
        budget = _h100_budget(tmp_path, experiment, f"runner.batch_size={batch_size}")
        assert budget.device_kind == H100 and budget.total_device_seconds() is not None
        for c in budget.cells:
            if c.cell.method == "pa_lrp" and set(c.cell.metrics) != {"positional_share"}:
                per_cell[(c.cell.model.name, c.cell.task.name)] = c.estimate.per_sample
        table = "table4+appendix_f" if experiment in ("table4", "appendix_f") else experiment
        hours[table] = hours.get(table, 0.0) + budget.total_device_seconds() / 3600
    for model, task, low, high in MEASURED_S_PER_SAMPLE:
        assert _ratio(per_cell[(model, task)], low, high) <= WITHIN, (model, task, per_cell[(model, task)])
    for table, (low, high) in MEASURED_HOURS.items():
        assert _ratio(hours[table], low, high) <= WITHIN, (table, hours[table])


def test_aliases_of_the_h100_use_its_constants_with_their_own_memory():
    constants = load_constants()
    from dataclasses import replace

    alias = constants.profile("cuda/NVIDIA H100 PCIe", "decoder/bfloat16/none")
    own = constants.profile(H100, "decoder/bfloat16/none")
    assert alias == replace(own, origin=alias.origin) and alias.origin.startswith(f"constants of {H100}")
    assert constants.device_entry("cuda/NVIDIA H100 PCIe")["memory_bytes"] < \
        constants.device_entry("cuda/NVIDIA H100 NVL")["memory_bytes"]
    assert constants.profile("cuda/Some other GPU", "decoder/bfloat16/none") is None


# ------------------------------------------------------------------------------------------ runner.plan_device
@pytest.mark.parametrize("name", ["h100", "H100", H100, "NVIDIA H100 80GB HBM3", "cuda/nvidia h100 80gb hbm3"])
def test_plan_device_names(name):
    assert resolve_device_kind(name, load_constants()) == H100


def test_plan_device_aliases_and_unknown_kinds():
    constants = load_constants()
    assert resolve_device_kind("h100-pcie", constants) == "cuda/NVIDIA H100 PCIe"
    assert resolve_device_kind("cpu", constants) == "cpu"
    with pytest.raises(BadInputError) as err:
        resolve_device_kind("a100", constants)
    message = str(err.value)
    assert "\n" not in message and "runner.plan_device='a100'" in message
    assert f"h100 ({H100})" in message and "h100-pcie" in message and "mode=calibrate" in message


def test_a_calibrated_gpu_kind_can_be_named_with_its_memory(tmp_path):
    from palrp_bench.planning.calibrate import write_calibration

    path = tmp_path / "cost.json"
    write_calibration(path, "cuda/NVIDIA A100-SXM4-80GB", {"decoder/bfloat16/none": {
        "seconds_per_unit": 5e-6, "overhead_s": 0.3, "batch_overhead_s": 0.2, "load_s_per_gparam": 4.0,
        "batch_size": 16}}, [], "test", memory_bytes=85.1e9)
    constants = load_constants(path)
    runner = compose_cfg(tmp_path, "runner.plan_device=NVIDIA A100-SXM4-80GB").runner
    priced_on = plan_device(runner, constants)
    assert (priced_on.kind, priced_on.memory_bytes, priced_on.n_workers) == ("cuda/NVIDIA A100-SXM4-80GB", 85.1e9, 1)
    profile = constants.profile(priced_on.kind, "decoder/bfloat16/none")
    assert profile.batch_size == 16 and profile.origin.startswith("calibrated")
    # the shipped H100 profiles keep their own origin beside a calibrated one
    assert constants.profile(H100, "vit/float32/none").origin.startswith("shipped default")


def test_plan_device_workers_follow_the_gpu_indices(tmp_path):
    budget = _h100_budget(tmp_path, "table4", "runner.devices=[0,1,2,3]")
    assert budget.n_workers == 4 and budget.devices == ("cuda:0", "cuda:1", "cuda:2", "cuda:3")
    one = _h100_budget(tmp_path, "table4")
    assert one.n_workers == 1
    # the cells are sharded over the four workers as the run would be; device time is the same work
    assert all(c.n_jobs == 4 for c in budget.cells)
    assert budget.wall_seconds() == pytest.approx(budget.total_device_seconds() / 4 + budget.run_overhead_s
                                                  + budget.merge_seconds)
    assert budget.device_seconds() == pytest.approx(one.device_seconds())


def test_pricing_a_device_kind_touches_no_cuda(tmp_path, monkeypatch):
    fake_cuda_devices(monkeypatch, 0)  # this machine: no GPU (whatever it really has)

    def forbidden(*args, **kwargs):
        raise AssertionError("mode=plan with runner.plan_device touched torch.cuda")

    for name in ("is_available", "device_count", "get_device_properties", "get_device_name", "mem_get_info",
                 "max_memory_allocated", "current_device"):
        monkeypatch.setattr(torch.cuda, name, forbidden)
    printed = io.StringIO()
    with pytest.raises(MissingDataError, match="plan incomplete"):
        run(compose_cfg(tmp_path / "run", "mode=plan", "experiment=table1", "runner.plan_device=h100",
                        "runner.batch_size=auto"), out=printed)
    out = printed.getvalue()
    assert f"priced for device kind {H100}" in out and "h100 time per task: imdb" in out
    assert "a CUDA GPU (for llama2_7b, llama2_7b_4bit, tinyllama)" in out
    assert re.search(r"largest peak memory: [\d.]+ GB of 85\.0 GB on h100", out)


@pytest.mark.parametrize("experiment,task,needs_gpu", [("table1", "imdb", True), ("table3", "mcqa", True),
                                                       ("table4", "imagenet", False)])
def test_plan_on_an_h100_from_a_machine_without_a_gpu(tmp_path, experiment, task, needs_gpu):
    """What a user runs before renting one: hours of H100 time, the missing GPU still listed (the run itself needs
    it; DeiT does not)."""
    done = run_cli("mode=plan", f"experiment={experiment}", "runner.plan_device=h100", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2, done.stderr[-2000:]
    out = done.stdout
    assert f"priced for device kind {H100}" in out and "uncal." not in out
    assert re.search(rf"h100 time per task: {task} [\d.]+ (h|min)", out), out
    assert re.search(r"total: [\d.]+ device-hours \([\d.]+ (h|min) of h100 time\)", out), out
    assert ("a CUDA GPU (for " in out.split("missing (")[1]) == needs_gpu
    assert all(len(line) <= 100 for line in out.splitlines()), max(out.splitlines(), key=len)
    assert os.listdir(tmp_path) == []


def test_an_unknown_plan_device_is_one_line(tmp_path):
    done = run_cli("mode=plan", "experiment=table1", "runner.plan_device=a100", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2 and done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("palrp-bench: error: runner.plan_device='a100'"), done.stderr
    assert "h100" in errors[0] and "Traceback" not in done.stderr
