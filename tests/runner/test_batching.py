"""``runner.batch_size`` (issue "Ready for the real run", item 5): ``auto`` halves on out-of-memory (an injected
fake CUDA OOM here), remembers the size per model, task and device in the process and in the user cache, and
changes no number; bad values are one-line errors; samples are batched longest first."""
import json

import pandas as pd
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.tasks.selftest import SelftestAdapter
from palrp_bench.runner import batching
from palrp_bench.app import run
from palrp_bench.runner.batching import (CPU_AUTO_BATCH_SIZE, CUDA_AUTO_START, BatchSizer, check_batch_size,
                                         length_sorted)
from runner.harness import compose_cfg, per_sample_values, read_results

# on the CPU (its first automatic batch size, CPU_AUTO_BATCH_SIZE); the GPU's is checked in
# test_auto_starts_from_the_device_s_first_size
SELFTEST = ("experiment=selftest", "task=selftest", "model=selftest", "method=pa_lrp", "runner.quiet=true",
            "task.options.n=21", "runner.devices=[cpu]")


def _run(run_dir, *overrides):
    return run(compose_cfg(run_dir, *SELFTEST, *overrides), out=open("/dev/null", "w"))


@pytest.fixture
def fake_oom(monkeypatch, tmp_path):
    """SelftestAdapter.evaluate runs out of 'device memory' above ``limit['n']`` samples per batch."""
    real = SelftestAdapter.evaluate
    limit = {"n": 3, "raised": 0, "sizes": [], "error": torch.cuda.OutOfMemoryError}

    def evaluate(self, bundle, samples, ctx, metrics=("selftest",)):
        limit["sizes"].append(len(samples))
        if len(samples) > limit["n"]:
            limit["raised"] += 1
            raise limit["error"]("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, bundle, samples, ctx, metrics)

    monkeypatch.setattr(SelftestAdapter, "evaluate", evaluate)
    monkeypatch.setattr(batching, "_REMEMBERED", {})
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "cache"))
    return limit


def test_auto_halves_on_out_of_memory_remembers_and_changes_no_number(tmp_path, fake_oom):
    reference = _run(tmp_path / "one", "runner.batch_size=1")
    fake_oom["sizes"].clear()
    outcome = _run(tmp_path / "auto", "runner.batch_size=auto")
    assert fake_oom["sizes"][:3] == [CPU_AUTO_BATCH_SIZE, CPU_AUTO_BATCH_SIZE // 2, CPU_AUTO_BATCH_SIZE // 4]
    assert fake_oom["raised"] == 2 and max(fake_oom["sizes"][2:]) == 2
    assert outcome.reports[0].batch_size == 2 and reference.reports[0].batch_size == 1
    pd.testing.assert_series_equal(per_sample_values(read_results(tmp_path / "one")),
                                   per_sample_values(read_results(tmp_path / "auto")))
    (remembered,) = (batching.user_cache_dir() / "batch_size").glob("*.json")
    assert json.loads(remembered.read_text())["batch_size"] == 2
    status = json.loads((tmp_path / "auto/cells/selftest/selftest/pa_lrp/shard-000-of-001.status.json").read_text())
    assert status["batch_size"] == 2 and status["n_computed"] == 21
    # the next run of the same model and task starts at the remembered size: no out-of-memory any more
    fake_oom["sizes"].clear()
    _run(tmp_path / "again", "runner.batch_size=auto")
    assert fake_oom["raised"] == 2 and set(fake_oom["sizes"]) == {2, 1}
    # ... also in a new process (the user cache), and a fixed size is never changed
    batching._REMEMBERED.clear()
    assert BatchSizer("auto", "cpu", outcome.cells[0]).size == 2
    assert BatchSizer(5, "cpu", outcome.cells[0]).size == 5


def test_a_runtime_error_saying_out_of_memory_counts_and_other_errors_pass(tmp_path, fake_oom):
    fake_oom["error"] = RuntimeError
    assert _run(tmp_path / "a", "runner.batch_size=auto").reports[0].batch_size == 2
    fake_oom["error"] = ValueError  # not an out-of-memory error: never retried
    with pytest.raises(ValueError, match="out of memory"):
        _run(tmp_path / "b", "runner.batch_size=8")


def test_a_fixed_batch_size_is_not_retried_and_one_sample_too_many_is_one_line(tmp_path, fake_oom):
    with pytest.raises(torch.cuda.OutOfMemoryError):
        _run(tmp_path / "a", "runner.batch_size=4")
    fake_oom["n"] = 0
    with pytest.raises(BadInputError, match="out of memory on cpu even with one sample per batch") as err:
        _run(tmp_path / "b", "runner.batch_size=auto")
    assert "\n" not in str(err.value)


def test_auto_starts_from_the_device_s_first_size():
    """No size remembered (no cell, so no cache key): CUDA_AUTO_START on a GPU, CPU_AUTO_BATCH_SIZE on the CPU; a
    fixed size is kept."""
    assert BatchSizer("auto", "cuda:0").size == CUDA_AUTO_START
    assert BatchSizer("auto", "cpu").size == CPU_AUTO_BATCH_SIZE
    assert BatchSizer(3, "cuda:0").size == 3


@pytest.mark.parametrize("value", ["abc", 0, -3, 2.5, True])
def test_bad_batch_sizes_are_one_line_errors(value):
    with pytest.raises(BadInputError, match=r"runner.batch_size must be a positive integer or 'auto'") as err:
        check_batch_size(value)
    assert "\n" not in str(err.value)
    assert check_batch_size("auto") == "auto" and check_batch_size(3) == 3


def test_the_command_line_rejects_a_bad_batch_size(tmp_path):
    with pytest.raises(BadInputError, match="'auto'"):
        _run(tmp_path, "runner.batch_size=many")


def test_samples_are_batched_longest_first_when_the_adapter_knows_lengths():
    class Lengths:
        @staticmethod
        def sample_length(s):
            return s[1]

    samples = [("a", 3), ("b", 9), ("c", 3), ("d", 5)]
    assert length_sorted(samples, Lengths()) == [("b", 9), ("d", 5), ("a", 3), ("c", 3)]
    assert length_sorted(samples, object()) == samples
