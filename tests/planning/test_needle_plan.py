"""Pricing the needle in a haystack (docs/evidence.md "Needle in a haystack", docs/planning.md "Peak memory") on
Llama-3.1-8B's architecture, nothing loaded: the grid's pool, time at its mean length, peak memory at its longest,
and the refusal of a length that only fits with ``runner.checkpoint=layers``, naming that setting."""
import pytest

from palrp_bench.planning.budget import memory_problems, plan_budget, plan_device
from palrp_bench.planning.cost import architecture_of, explanation_memory, load_constants, sample_work
from palrp_bench.runner.plan import plan_cells, plan_jobs
from runner.harness import NO_GPU, compose_cfg, run_cli

GB = 1e9
GRID = ("model=llama3_1_8b", "task=needle", "task.options.lengths=[4096,32768]", "method=pa_lrp",
        "runner.batch_size=1", "runner.plan_device=h100")


def _budget(tmp_path, *overrides):
    constants = load_constants()
    cfg = compose_cfg(tmp_path / "run", *GRID, *overrides)
    cells = plan_cells(cfg)
    return cells, plan_budget(cells, plan_jobs(cfg, cells, 1), tmp_path / "run", ("cpu",), cfg.runner, constants,
                              plan_device(cfg.runner, constants))


def test_the_grid_is_priced_at_its_mean_length_and_sized_for_its_longest(tmp_path):
    constants = load_constants()
    cells, budget = _budget(tmp_path, "runner.checkpoint=layers")
    (cell,) = cells
    work = sample_work(cell, architecture_of(cell.model, constants), constants)
    assert (work.explain_tokens, work.longest_tokens) == ((4096 + 32768) / 2, 32768)
    assert work.explanations == 1 and work.attributor == "lrp"
    (priced,) = budget.cells
    assert priced.count.candidates == 2 * 11 * 4  # lengths x depths x needles, before the retrieval filter
    assert memory_problems(budget) == []
    arch = architecture_of(cell.model, constants)
    weights = arch.params * 2  # bfloat16
    assert priced.estimate.peak_bytes == pytest.approx(
        weights + explanation_memory(arch, 32768, 1, 2, constants.memory, "layers"))


def test_32k_tokens_are_refused_without_checkpointing_naming_it(tmp_path):
    _, budget = _budget(tmp_path)
    (refused,) = memory_problems(budget)
    assert "llama3_1_8b/needle/pa_lrp: " in refused.item and "for 32768 tokens (runner.checkpoint=none)" in refused.item
    assert refused.fix.startswith("set runner.checkpoint=layers (")
    _, short = _budget(tmp_path, "task.options.lengths=[1024,4096]")
    assert memory_problems(short) == []


def test_the_cli_plan_lists_the_cell_and_no_memory_refusal_with_checkpointing(tmp_path):
    done = run_cli("mode=plan", *GRID, "runner.checkpoint=layers", f"run_dir={tmp_path / 'r'}", cwd=tmp_path,
                   env=NO_GPU)
    text = " ".join((done.stdout + done.stderr).split())
    assert "llama3_1_8b needle pa_lrp <=88*" in text, text[-3000:]
    assert "does not fit" not in text and "hub model meta-llama/Llama-3.1-8B (llama3_1_8b)" in text
    assert not (tmp_path / "r").exists()
