"""``mode=calibrate`` (docs/planning.md "Calibration"): measures on the machine at hand, writes the constants to the
user's XDG cache only (never into the package, never under runs/), and later plans use them."""
import hashlib
import io
import json

import pytest

from palrp_bench.planning import calibrate as calibration
from palrp_bench.app import run
from palrp_bench.planning.calibrate import Measurement, fit_profiles
from palrp_bench.numerics import device_kind
from palrp_bench.planning.cost import SHIPPED_CONSTANTS, CostConstants, load_constants, user_cost_path
from runner.harness import compose_cfg


def _package_state():
    package = SHIPPED_CONSTANTS.parents[1]
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return {str(p.relative_to(package)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_calibrate_writes_the_user_cache_only_and_plans_use_it(tmp_path, monkeypatch):
    monkeypatch.delenv("PALRP_CACHE_DIR", raising=False)  # the XDG rule itself
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    before = _package_state()
    run_dir = tmp_path / "run"
    printed = io.StringIO()
    run(compose_cfg(run_dir, "mode=calibrate", "model=tiny_llama_cls", "task=synthetic_sentiment", "method=pa_lrp",
                    "runner.devices=[cpu]"), out=printed)
    path = tmp_path / "xdg" / "palrp-bench" / "cost.json"
    assert user_cost_path() == path and path.is_file()
    assert _package_state() == before and list((tmp_path / "home").iterdir()) == []
    assert not run_dir.exists()
    data = json.loads(path.read_text())
    entry = data["devices"][device_kind("cpu", cpu_detail=True)]
    assert set(entry["profiles"]) == {"decoder/float32/none"}
    (measurement,) = entry["measurements"]
    assert measurement["model"] == "tiny_llama_cls" and measurement["per_sample"] > 0
    # the run's batch size (runner.batch_size=8): a warm-up, one sample alone, one full batch
    assert (measurement["batch_size"], measurement["n_timed"], measurement["n_batches"]) == (8, 8, 1)
    assert measurement["alone_seconds"] > 0 and entry["profiles"]["decoder/float32/none"]["batch_size"] == 8
    # the batched timing split as a job's timings split it: explanations and forwards took time, no stage exceeds it
    stages = measurement["stages"]
    assert set(stages) == {"data_wait_s", "explain_s", "forwards_s", "metrics_s", "write_s"}
    assert stages["explain_s"] > 0 and stages["forwards_s"] > 0
    assert 0 <= sum(stages.values()) <= measurement["per_sample"] * (1 + 1e-6)
    assert "per sample: data wait" in printed.getvalue()
    assert "tiny_llama_cls" in printed.getvalue() and str(path) in printed.getvalue()
    profile = load_constants().profile(device_kind("cpu", cpu_detail=True), "decoder/float32/none")
    assert profile.origin.startswith("calibrated") and str(path) in profile.origin
    # a second calibration of another model keeps the first profile
    run(compose_cfg(run_dir, "mode=calibrate", "model=tiny_vit", "task=synthetic_shapes_seg", "method=pa_lrp",
                    "runner.devices=[cpu]", "runner.max_samples=2"), out=io.StringIO())
    profiles = json.loads(path.read_text())["devices"][device_kind("cpu", cpu_detail=True)]["profiles"]
    assert set(profiles) == {"decoder/float32/none", "vit/float32/none"}


def _measurement(per_sample, units, cpu=None, threads=2, params=1e9, load=20.0) -> Measurement:
    return Measurement(model="m", task="t", method="pa_lrp", profile="decoder/bfloat16/none", params=int(params),
                       load_seconds=load, load_cpu=load, first_seconds=per_sample, per_sample=per_sample,
                       per_sample_cpu=per_sample if cpu is None else cpu, threads=threads, n_timed=2, explanations=1,
                       units=units,
                       predicted=None, peak_bytes=None, estimated_peak=None)


def _prior(seconds_per_unit=1e-3, overhead=0.5) -> CostConstants:
    return CostConstants(devices={"cpu": {"profiles": {"decoder/bfloat16/none": {
        "seconds_per_unit": seconds_per_unit, "overhead_s": overhead, "load_s_per_gparam": 5.0}}}})


def test_fit_solves_for_the_term_that_dominates(monkeypatch):
    monkeypatch.delenv("PALRP_CALIBRATE_CLOCK", raising=False)
    # compute-dominated (1e4 units at 1e-3 s = 10 s >> 0.5 s): the slope is refitted, the overhead kept
    fitted = fit_profiles([_measurement(30.5, 1e4), _measurement(20.5, 1e4), _measurement(40.5, 1e4)],
                          _prior(), "cpu/x/2t")["decoder/bfloat16/none"]
    assert fitted["seconds_per_unit"] == pytest.approx(3e-3) and fitted["overhead_s"] == 0.5
    assert fitted["load_s_per_gparam"] == pytest.approx(20.0)
    # overhead-dominated (10 units at 1e-3 s << 0.5 s): the overhead is refitted, the slope kept
    fitted = fit_profiles([_measurement(0.21, 10, params=1e6)], _prior(), "cpu/x/2t")["decoder/bfloat16/none"]
    assert fitted["overhead_s"] == pytest.approx(0.2) and fitted["seconds_per_unit"] == 1e-3
    assert fitted["load_s_per_gparam"] == 5.0  # a tiny model's load time calibrates nothing


def test_process_clock_times_compute_per_thread(monkeypatch):
    monkeypatch.setenv("PALRP_CALIBRATE_CLOCK", "process")
    fitted = fit_profiles([_measurement(100.0, 1e4, cpu=21.0, threads=2)], _prior(), "cpu/x/2t")
    assert fitted["decoder/bfloat16/none"]["seconds_per_unit"] == pytest.approx((10.5 - 0.5) / 1e4)
    monkeypatch.setenv("PALRP_CALIBRATE_CLOCK", "sundial")
    with pytest.raises(Exception, match="PALRP_CALIBRATE_CLOCK"):
        fit_profiles([_measurement(1.0, 1e4)], _prior(), "cpu/x/2t")


def test_calibration_needs_two_samples(tmp_path):
    from palrp_bench.errors import BadInputError
    from palrp_bench.runner.plan import plan_cells

    cell = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_cls", "task=synthetic_sentiment", "method=pa_lrp"))[0]
    with pytest.raises(BadInputError, match="at least 2 samples"):
        calibration.measure_cell(cell, "cpu", 1, load_constants())
