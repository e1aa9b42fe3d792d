"""Pricing long explanations with and without ``runner.checkpoint=layers`` (docs/planning.md "Peak memory",
docs/engine.md "Long contexts"): the memory formula of each mode, one more forward per backward in time, and a plan
that refuses a length its device cannot hold, naming the setting that would."""
import pytest

from palrp_bench.planning.budget import memory_problems, plan_budget, plan_device
from palrp_bench.planning.cost import architecture_of, estimate, explanation_memory, load_constants
from palrp_bench.runner.plan import plan_cells, plan_jobs
from runner.harness import compose_cfg

GB = 1e9


def _cell(tmp_path, *overrides):
    """Llama-3.1-8B (bf16) explaining IMDB reviews padded to ``max_length`` tokens: an explanation of that length."""
    cfg = compose_cfg(tmp_path / "run", "model=llama3_1_8b", "task=imdb", "method=pa_lrp", "runner.batch_size=1",
                      "runner.plan_device=h100", *overrides)
    return cfg, plan_cells(cfg)


def test_memory_formulas_of_both_modes():
    constants = load_constants()
    from types import SimpleNamespace

    arch = architecture_of(SimpleNamespace(loader="hf", kind="causal", source="meta-llama/Llama-3.1-8B",
                                           base_model=None, name="llama3_1_8b", options={}), constants)
    d, ffn, layers, heads = 4096, 14336, 32, 32
    assert (arch.hidden, arch.ffn, arch.layers, arch.heads, arch.attention_width) == (d, ffn, layers, heads, d)
    mem = constants.memory
    t = 32768.0
    # none: the fitted formula, its score term at most the 512 tokens of the fit (unchanged up to there)
    assert explanation_memory(arch, 512, 1, 2, mem) == pytest.approx(512 * layers * ((12 * d + 4 * ffn) + 2 * heads
                                                                                    * 512) * 2)
    assert explanation_memory(arch, t, 1, 2, mem) == pytest.approx(t * layers * ((12 * d + 4 * ffn) + 2 * heads * 512)
                                                                   * 2)
    # layers: every layer's input, the RoPE sinks and their gradients, the embeddings and their gradient, one layer,
    # one MLP chunk of 2^24 / d tokens
    kept = t * (layers * d + 4 * layers * 128 + 2 * d + 12 * d) * 2
    chunk = 4096 * 4 * ffn * 2
    assert explanation_memory(arch, t, 1, 2, mem, "layers") == pytest.approx(kept + chunk)
    # growing with the stream only: the slope per token is the kept widths, no T^2 term
    per_token = (explanation_memory(arch, 2 * t, 1, 2, mem, "layers") - explanation_memory(arch, t, 1, 2, mem,
                                                                                        "layers")) / t
    assert per_token == pytest.approx((layers * d + 4 * layers * 128 + 14 * d) * 2)
    assert 0.4e6 < per_token < 0.45e6  # about 0.42 MB per token for Llama-3.1-8B in bf16


def test_checkpointing_costs_one_forward_per_backward(tmp_path):
    constants = load_constants()
    for method, backwards in (("pa_lrp", 1), ("integrated_gradients", 50)):
        _, cells = _cell(tmp_path, f"method={method}", "task.options.max_length=4096")
        plain = estimate(cells[0], 10, "cuda:0", batch_size=1, constants=constants, kind="cuda/NVIDIA H100 80GB HBM3")
        ckpt = estimate(cells[0], 10, "cuda:0", batch_size=1, constants=constants, kind="cuda/NVIDIA H100 80GB HBM3",
                        checkpoint="layers")
        assert ckpt.work.explain_forwards == pytest.approx(plain.work.explain_forwards + backwards)
        assert ckpt.seconds > plain.seconds and ckpt.peak_bytes < plain.peak_bytes


def _budget(tmp_path, *overrides):
    constants = load_constants()
    cfg, cells = _cell(tmp_path, *overrides)
    priced_on = plan_device(cfg.runner, constants)
    return plan_budget(cells, plan_jobs(cfg, cells, 1), tmp_path / "run", ("cpu",), cfg.runner, constants, priced_on)


def test_a_plan_refuses_a_length_that_does_not_fit_and_names_the_setting_that_would(tmp_path):
    fits = _budget(tmp_path, "task.options.max_length=1024")
    assert memory_problems(fits) == []
    (refused,) = memory_problems(_budget(tmp_path, "task.options.max_length=32768"))
    assert refused.item.startswith("llama3_1_8b/imdb/pa_lrp: ") and "for 32768 tokens (runner.checkpoint=none)" \
        in refused.item and "more than the 85.0 GB of the device" in refused.item
    assert refused.fix.startswith("set runner.checkpoint=layers (")
    checkpointed = _budget(tmp_path, "task.options.max_length=32768", "runner.checkpoint=layers")
    assert memory_problems(checkpointed) == []
    (cell,) = checkpointed.cells
    assert 25 * GB < cell.estimate.peak_bytes < 40 * GB  # 16 GB of weights, about 0.42 MB per token
    (too_long,) = memory_problems(_budget(tmp_path, "task.options.max_length=262144", "runner.checkpoint=layers"))
    assert "(runner.checkpoint=layers)" in too_long.item
    assert too_long.fix.startswith("explain shorter inputs")
    (neither,) = memory_problems(_budget(tmp_path, "task.options.max_length=262144"))
    assert "with runner.checkpoint=layers" in neither.item and neither.fix.startswith("explain shorter inputs")


def test_the_printed_plan_lists_the_refusal(tmp_path):
    from palrp_bench.planning.budget import format_plan

    text = format_plan(_budget(tmp_path, "task.options.max_length=32768"), problems=[])
    assert "does not fit (1): these cells need more memory than the device has at any batch size" in text
    assert "fix: set runner.checkpoint=layers" in text
    assert "nothing missing" not in text
