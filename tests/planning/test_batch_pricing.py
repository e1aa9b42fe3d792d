"""Plans that hold at the batch size the run will use (docs/planning.md "Cost model", "Calibration"): calibration
times the run's batch size (fixed, remembered, or halved on out-of-memory like the runner), the cost model prices
a batch, and the fit separates the per-batch overhead from the per-sample work."""
import math

import pytest
import torch

from palrp_bench.evaluation.tasks.selftest import SelftestAdapter
from palrp_bench.planning.calibrate import Measurement, fit_profiles, measure_cell
from palrp_bench.planning.cost import CostConstants, estimate, load_constants
from palrp_bench.runner import batching
from palrp_bench.runner.batching import CPU_AUTO_BATCH_SIZE, BatchSizer
from palrp_bench.runner.plan import plan_cells
from runner.harness import compose_cfg

# ------------------------------------------------------------------------------ calibration at the run's batch
@pytest.fixture
def evaluated(monkeypatch, tmp_path):
    """The batch sizes SelftestAdapter.evaluate is called with; batches above ``limit['n']`` samples raise a
    CUDA out-of-memory error. Remembered batch sizes start empty."""
    real = SelftestAdapter.evaluate
    seen = {"sizes": [], "n": 10 ** 9}

    def evaluate(self, bundle, samples, ctx, metrics=("selftest",)):
        seen["sizes"].append(len(samples))
        if len(samples) > seen["n"]:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, bundle, samples, ctx, metrics)

    monkeypatch.setattr(SelftestAdapter, "evaluate", evaluate)
    monkeypatch.setattr(batching, "_REMEMBERED", {})
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "cache"))
    return seen


def _selftest_cell(tmp_path):
    return plan_cells(compose_cfg(tmp_path, "experiment=selftest", "task=selftest", "model=selftest",
                                  "method=pa_lrp", "task.options.n=30"))[0]


def test_calibration_times_a_fixed_batch_size(tmp_path, evaluated):
    m = measure_cell(_selftest_cell(tmp_path), "cpu", None, load_constants(), batch_size=4)
    # a warm-up, one sample alone, then one full batch of the run's size
    assert evaluated["sizes"] == [1, 1, 4]
    assert (m.batch_size, m.n_timed, m.n_batches) == (4, 4, 1) and m.alone_seconds is not None
    evaluated["sizes"].clear()
    m = measure_cell(_selftest_cell(tmp_path), "cpu", 11, load_constants(), batch_size=4)
    assert evaluated["sizes"] == [1, 1, 4, 4, 1] and (m.n_timed, m.n_batches) == (9, 3)
    evaluated["sizes"].clear()
    m = measure_cell(_selftest_cell(tmp_path), "cpu", None, load_constants(), batch_size=1)
    assert evaluated["sizes"] == [1, 1, 1] and m.alone_seconds is None and (m.n_timed, m.n_batches) == (2, 2)


def test_calibration_of_auto_starts_from_the_remembered_size(tmp_path, evaluated):
    cell = _selftest_cell(tmp_path)
    remembered = BatchSizer("auto", "cpu", cell)
    remembered.size = 3
    remembered.worked()  # what a run that settled on 3 leaves in the user cache
    batching._REMEMBERED.clear()  # read back from the cache file, as a new process would
    m = measure_cell(cell, "cpu", None, load_constants(), batch_size="auto")
    assert evaluated["sizes"] == [1, 1, 3] and m.batch_size == 3


def test_calibration_of_auto_halves_on_out_of_memory_like_the_runner(tmp_path, evaluated):
    evaluated["n"] = 2
    cell = _selftest_cell(tmp_path)
    m = measure_cell(cell, "cpu", None, load_constants(), batch_size="auto")
    start = CPU_AUTO_BATCH_SIZE
    # warm-up, alone, then the start size, halved until it fits; the timing restarts at the size that fits
    assert evaluated["sizes"] == [1, 1, start, start // 2, 2, 2, 2, 2]
    assert (m.batch_size, m.n_timed, m.n_batches) == (2, start, start // 2)
    assert BatchSizer("auto", "cpu", cell).size == 2  # remembered for the run, as the runner would


# ------------------------------------------------------------------------------------------ per-batch pricing
def _constants(a=0.7, o=0.25, s=2e-3) -> CostConstants:
    values = {"seconds_per_unit": s, "overhead_s": o, "batch_overhead_s": a, "load_s_per_gparam": 10.0}
    shipped = load_constants()
    return CostConstants(devices={"cuda/Test GPU": {"profiles": {"decoder/bfloat16/none": values}}},
                         explain_cost=shipped.explain_cost, memory=shipped.memory,
                         architectures=shipped.architectures)


def test_a_batch_costs_its_overhead_once(tmp_path):
    """seconds = n (o E + s units) + ceil(n / b) a (docs/planning.md "Cost model"), by hand."""
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp"))[0]
    constants = _constants()
    one = estimate(cell, 10, "cuda:0", batch_size=1, constants=constants, kind="cuda/Test GPU")
    units = one.units_per_sample
    for b, batches in ((1, 10), (4, 3), (8, 2), (64, 1)):
        result = estimate(cell, 10, "cuda:0", batch_size=b, constants=constants, kind="cuda/Test GPU")
        by_hand = 10 * (0.25 * 1 + 2e-3 * units) + batches * 0.7
        assert result.seconds == pytest.approx(by_hand, rel=1e-12) and result.batch_size == b
        assert result.per_sample == pytest.approx(by_hand / 10, rel=1e-12)
    # nothing left to run: the per-sample figure of a full batch
    empty = estimate(cell, 0, "cuda:0", batch_size=4, constants=constants, kind="cuda/Test GPU")
    assert empty.seconds == 0 and empty.per_sample == pytest.approx(0.25 + 2e-3 * units + 0.7 / 4, rel=1e-12)


def test_the_shipped_cpu_constants_do_not_depend_on_the_batch(tmp_path):
    """Batching gains little on a CPU: its constants have no batch overhead, so the documented CPU estimates stand."""
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp"))[0]
    shipped = load_constants()
    per_sample = {b: estimate(cell, 16, "cpu", batch_size=b, constants=shipped, kind="cpu/Some CPU/2t").per_sample
                  for b in (1, 8, 16)}
    assert per_sample[1] == per_sample[8] == per_sample[16]
    assert shipped.profile("cpu/Some CPU/2t", "decoder/bfloat16/none").batch_overhead_s == 0.0


def _measurement(alone, per_sample, units, n, batches, alone_units, explanations=1) -> Measurement:
    return Measurement(model="m", task="t", method="pa_lrp", profile="decoder/bfloat16/none", params=int(1e9),
                       load_seconds=10.0, load_cpu=10.0, first_seconds=alone, per_sample=per_sample,
                       per_sample_cpu=per_sample, threads=1, n_timed=n, explanations=explanations, units=units,
                       predicted=None, peak_bytes=None, estimated_peak=None, batch_size=math.ceil(n / batches),
                       n_batches=batches, alone_seconds=alone, alone_cpu=alone, alone_units=alone_units)


def _prior(s=1e-3, o=0.5, a=0.0) -> CostConstants:
    return CostConstants(devices={"cuda/Test GPU": {"profiles": {"decoder/bfloat16/none": {
        "seconds_per_unit": s, "overhead_s": o, "batch_overhead_s": a, "load_s_per_gparam": 5.0}}}})


def test_fit_separates_the_batch_overhead_from_the_per_sample_work(monkeypatch):
    monkeypatch.delenv("PALRP_CALIBRATE_CLOCK", raising=False)
    kind = "cuda/Test GPU"
    # compute-dominated: a = 1.5 s per batch, s = 3e-3 s per unit (o stays 0.5), one sample of 1e4 units alone and
    # 8 of 1.1e4 in 2 batches: alone 1.5 + 0.5 + 30, batched 2 * 1.5 + 8 * 0.5 + 3e-3 * 8.8e4
    batched = (2 * 1.5 + 8 * 0.5 + 3e-3 * 8 * 1.1e4) / 8
    fitted = fit_profiles([_measurement(1.5 + 0.5 + 30.0, batched, 1.1e4, 8, 2, 1e4)], _prior(), kind)
    values = fitted["decoder/bfloat16/none"]
    assert values["batch_overhead_s"] == pytest.approx(1.5, rel=1e-9)
    assert values["seconds_per_unit"] == pytest.approx(3e-3, rel=1e-9) and values["overhead_s"] == 0.5
    assert values["batch_size"] == 4
    # overhead-dominated (10 units at 1e-3 s): a = 0.3, o = 0.2 per explanation, s stays
    batched = (2 * 0.3 + 8 * 0.2 + 1e-3 * 80) / 8
    values = fit_profiles([_measurement(0.3 + 0.2 + 1e-2, batched, 10.0, 8, 2, 10.0)], _prior(), kind)[
        "decoder/bfloat16/none"]
    assert values["batch_overhead_s"] == pytest.approx(0.3, rel=1e-9)
    assert values["overhead_s"] == pytest.approx(0.2, rel=1e-9) and values["seconds_per_unit"] == 1e-3
    # a batch-1 timing faster per sample than the batch (noise) would make a negative: a = 0, s from both timings
    values = fit_profiles([_measurement(30.0, 31.0, 1e4, 8, 1, 1e4)], _prior(), kind)["decoder/bfloat16/none"]
    assert values["batch_overhead_s"] == 0.0
    assert values["seconds_per_unit"] == pytest.approx((8 * 31.0 + 30.0 - 9 * 0.5) / (9 * 1e4), rel=1e-12)
    # no batch-1 timing (a run at batch 1): the overhead per batch keeps its value from before
    m = _measurement(30.0, 30.7, 1e4, 2, 2, 1e4)
    m.alone_seconds = m.alone_units = None
    values = fit_profiles([m], _prior(a=0.2), kind)["decoder/bfloat16/none"]
    assert values["batch_overhead_s"] == 0.2
    assert values["seconds_per_unit"] == pytest.approx((30.7 - 0.5 - 0.2) / 1e4)
