"""The finetuning cost (palrp_bench/planning/training.py, docs/planning.md "Finetuning the classifiers"): the shipped
constants against the measurements they were fitted to, the parameter and memory arithmetic, the cheapest setting
that fits, and the plan's lines for the missing classifiers."""
import re
from dataclasses import replace

import pytest

import palrp_bench.planning.budget as budget
import palrp_bench.planning.cost as cost
from palrp_bench import numerics
from palrp_bench.planning.cost import CostConstants, hf_architecture, load_constants
from palrp_bench.planning.training import (OFFICIAL_RECIPE, Setting, cheapest_fit, classifier_architecture,
                                           estimate_training, load_training_constants, needs_training,
                                           price_missing_classifiers, trainable_params, training_units, verdict)
from palrp_bench.runner.plan import plan_cells, plan_jobs
from runner.harness import compose_cfg

H100 = "cuda/NVIDIA H100 80GB HBM3"
TINYLLAMA = "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
LLAMA2 = "meta-llama/Llama-2-7b-hf"
#: the measured epoch: 640 training and 128 selection rows
MEASURED_EPOCH = replace(OFFICIAL_RECIPE, train_rows=640, val_rows=128, epochs=1)


@pytest.fixture(scope="module")
def tinyllama():
    return classifier_architecture(TINYLLAMA)


@pytest.fixture(scope="module")
def llama2():
    return classifier_architecture(LLAMA2)


# --------------------------------------------------------------------------------- the measured figures
@pytest.mark.parametrize("checkpointing,seconds,gigabytes", [(False, 69, 80.9), (True, 80, 26.0)])
def test_the_shipped_constants_reproduce_the_h100_epoch_they_were_fitted_to(tinyllama, checkpointing, seconds,
                                                                           gigabytes):
    """palrp-bench-finetune on one H100, TinyLlama float32, 640 + 128 rows; the constants carry 3 digits."""
    found = estimate_training(tinyllama, kind=H100, setting=Setting(checkpointing), recipe=MEASURED_EPOCH)
    assert found.seconds == pytest.approx(seconds, rel=5e-3)
    assert found.memory.total / 1e9 == pytest.approx(gigabytes, rel=5e-3)
    assert found.fits and found.device_memory == 85.0e9


def test_the_official_recipe_and_the_7b_states_match_the_issue_figures(tinyllama, llama2):
    """5000 rows x 10 epochs of TinyLlama about 1.5 h; LLaMA-2-7B float32 weights, gradients and AdamW states
    about 105 GB (16 bytes per trainable parameter, 4 per frozen embedding)."""
    official = estimate_training(tinyllama, kind=H100)
    assert official.seconds / 3600 == pytest.approx(1.5, rel=0.02)
    states = estimate_training(llama2, kind=H100).memory.states
    assert states / 1e9 == pytest.approx(105, rel=0.02)
    assert states == 4 * llama2.params + 12 * trainable_params(llama2, False)


def test_trainable_parameters_are_what_the_script_trains():
    """Everything whose name has no "embed" (palrp_bench/finetune/imdb.py select_trainable), counted on the model."""
    import torch
    import transformers

    fields = dict(model_type="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=300, tie_word_embeddings=False)
    arch = hf_architecture(fields, "classifier")
    config = transformers.AutoConfig.for_model(**fields)
    with torch.device("meta"):
        model = transformers.AutoModelForSequenceClassification.from_config(config)
    named = dict(model.named_parameters())
    assert trainable_params(arch, False) == sum(p.numel() for n, p in named.items() if "embed" not in n)
    assert trainable_params(arch, True) == named["score.weight"].numel()


# ----------------------------------------------------------------------------------------------- memory
def test_fsdp_shards_the_states_and_splits_the_batch(llama2):
    constants = load_training_constants()
    one = estimate_training(llama2, kind=H100, setting=Setting(True, 1)).memory
    two = estimate_training(llama2, kind=H100, setting=Setting(True, 2)).memory
    four = estimate_training(llama2, kind=H100, setting=Setting(False, 4)).memory
    assert two.states == pytest.approx(one.states / 2)
    assert two.activations == pytest.approx(one.activations / 2)  # 16 of the 32 rows each
    block = llama2.body_params / llama2.layers * 4
    assert one.unsharded == 0 and two.unsharded == pytest.approx(constants.fsdp_unsharded_blocks * block)
    tokens = OFFICIAL_RECIPE.max_length
    per_layer = constants.per_hidden * llama2.hidden + constants.per_ffn * llama2.ffn
    assert four.activations == pytest.approx(8 * tokens * llama2.layers * per_layer * 4)


def test_checkpointing_trades_memory_for_time(tinyllama):
    plain = estimate_training(tinyllama, kind=H100)
    checkpointed = estimate_training(tinyllama, kind=H100, setting=Setting(True))
    assert checkpointed.memory.activations < plain.memory.activations / 5
    constants = load_training_constants()
    rows = OFFICIAL_RECIPE.epochs * OFFICIAL_RECIPE.train_rows
    extra = training_units(tinyllama, gradient_checkpointing=True) - training_units(tinyllama)
    assert extra == pytest.approx(rows * constants.recompute_forwards * cost.forward_units(tinyllama, 512))
    assert checkpointed.seconds > plain.seconds


def test_the_4bit_row_trains_the_head_in_one_forward_per_row(llama2):
    found = estimate_training(llama2, kind=H100, head_only=True, setting=Setting(True, 4))
    assert found.setting == Setting() and found.dtype == "bfloat16"  # nothing to checkpoint or shard
    assert found.units == pytest.approx(10 * (5000 + 1000) * cost.forward_units(llama2, 512))
    nf4 = llama2.linear_params * cost.NF4_BYTES_PER_PARAM + (llama2.params - llama2.linear_params) * 2
    assert found.memory.weights == pytest.approx(nf4)
    assert found.memory.gradients == 2 * 2 * llama2.hidden and found.fits


# ------------------------------------------------------------------------------------------ what fits
@pytest.mark.parametrize("model,kind,memory,head_only,expected", [
    (LLAMA2, H100, None, False, "needs 2 GPUs with FSDP and --gradient-checkpointing"),
    (LLAMA2, H100, None, True, "fits"),
    (TINYLLAMA, H100, None, False, "fits"),
    (TINYLLAMA, "cuda/NVIDIA A100-SXM4-40GB", 40e9, False, "fits with --gradient-checkpointing"),
    (LLAMA2, "cuda/NVIDIA A100-SXM4-40GB", 40e9, False, "needs 4 GPUs with FSDP and --gradient-checkpointing"),
    (TINYLLAMA, "cpu/Some CPU/8t", 24e9, False, "does not fit 24.0 GB even with --gradient-checkpointing"),
    (TINYLLAMA, "cuda/Some GPU", 2e9, False,
     "does not fit 2.0 GB even on 8 GPUs with FSDP and --gradient-checkpointing"),
    (TINYLLAMA, "cuda/Some GPU", None, False, "memory of cuda/Some GPU unknown"),
])
def test_the_verdict_names_the_cheapest_setting_that_fits(model, kind, memory, head_only, expected):
    arch = classifier_architecture(model)
    plain = estimate_training(arch, kind=kind, device_memory=memory, head_only=head_only)
    best = cheapest_fit(arch, kind=kind, device_memory=memory, head_only=head_only)
    assert verdict(plain, best) == expected
    if best is not None:  # the first that fits: every cheaper setting does not
        cheaper = [Setting(c, n) for n in (1, 2, 4, 8) for c in (False, True)]
        for setting in cheaper[:cheaper.index(best.setting)]:
            assert not estimate_training(arch, kind=kind, device_memory=memory, setting=setting).fits


# ------------------------------------------------------------------------------------------------- time
def test_kinds_without_a_training_constant_take_the_cost_models_forward_constant(tinyllama, llama2):
    constants = load_constants()
    cpu = estimate_training(tinyllama, kind="cpu/Some CPU/2t", cost_constants=constants)
    per_unit = constants.profile("cpu/Some CPU/2t", "decoder/float32/none").seconds_per_unit
    assert cpu.seconds == pytest.approx(per_unit * cpu.units) and "cost model" in cpu.origin
    unknown = estimate_training(tinyllama, kind="cuda/Some GPU", cost_constants=constants)
    assert unknown.seconds is None and "no constant" in unknown.origin
    # a calibration of the GPU's NF4 forwards is what the head-only row runs: it wins over the shipped figure
    calibrated = CostConstants(devices={H100: {"profiles": {"decoder/bfloat16/nf4": {"seconds_per_unit": 1e-5}}}},
                               memory=constants.memory)
    head = estimate_training(llama2, kind=H100, head_only=True, cost_constants=calibrated)
    assert head.seconds == pytest.approx(1e-5 * head.units)
    # shipped: the head-only row takes the H100's NF4 forward constant of the cost model (no training figure)
    shipped = estimate_training(llama2, kind=H100, head_only=True, cost_constants=constants)
    nf4 = constants.profile(H100, "decoder/bfloat16/nf4").seconds_per_unit
    assert shipped.seconds == pytest.approx(nf4 * shipped.units) and "cost model" in shipped.origin


def test_fsdp_divides_the_wall_clock_not_the_device_hours(llama2):
    one = estimate_training(llama2, kind=H100, setting=Setting(True, 1))
    two = estimate_training(llama2, kind=H100, setting=Setting(True, 2))
    assert two.seconds == pytest.approx(one.seconds / 2) and two.device_seconds == pytest.approx(one.seconds)


# ------------------------------------------------------------------------------------------------ plans
def test_missing_classifiers_are_the_local_classifier_folders_without_a_saved_model(tmp_path):
    cells = plan_cells(compose_cfg(tmp_path / "run", "experiment=table1"))
    priced = price_missing_classifiers(cells, H100, None)
    assert [(t.model, t.base_model, t.head_only) for t in priced] == [
        ("llama2_7b", LLAMA2, False), ("llama2_7b_4bit", LLAMA2, True), ("tinyllama", TINYLLAMA, False)]
    folder = tmp_path / "tinyllama_imdb"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    model = cells[-1].model
    assert needs_training(model)
    assert needs_training(replace(model, source=str(folder)))  # no weights yet
    (folder / "model.safetensors").write_bytes(b"")
    assert not needs_training(replace(model, source=str(folder)))
    assert not needs_training(replace(model, source=TINYLLAMA))  # a hub classifier is downloaded, not trained


def test_the_plan_prices_the_missing_classifiers_on_the_planned_kind(tmp_path, monkeypatch):
    monkeypatch.setattr(numerics, "device_kind", lambda device, **_: H100)
    monkeypatch.setattr(budget, "_machine_memory", lambda devices: None)
    cfg = compose_cfg(tmp_path / "run", "experiment=table1", "runner.devices=[cpu]")
    cells = plan_cells(cfg)
    plan = budget.plan_budget(cells, plan_jobs(cfg, cells, 1), tmp_path / "run", ("cpu",), cfg.runner,
                              load_constants())
    assert [t.model for t in plan.training] == ["llama2_7b", "llama2_7b_4bit", "tinyllama"]
    seconds = sum(t.estimate.device_seconds for t in plan.training)
    assert seconds / 3600 == pytest.approx(11.3 + 0.7 + 1.5, abs=0.3)
    text = budget.format_plan(plan, cfg.experiment, [], len(cells))
    assert f"training: {seconds / 3600:.1f} device-hours, 3 missing classifiers" in text
    rows = {line.split()[0]: line for line in text.splitlines()
            if re.match(r"(llama2_7b|llama2_7b_4bit|tinyllama)\s+[\d.,]+ h ", line)}
    assert "needs 2 GPUs with FSDP and --gradient-checkpointing" in rows["llama2_7b"]
    assert "fits" in rows["tinyllama"] and "head" in rows["llama2_7b_4bit"]
    seven = plan.training[0].estimate
    assert f"{seven.memory.total / 1e9:.1f} GB" in rows["llama2_7b"]
    assert f"on {H100}:" in text and all(len(line) <= 100 for line in text.splitlines())
    assert "training:" in "\n".join(budget.format_totals(plan))  # also under a refused run's problem list


def test_a_plan_without_missing_classifiers_says_nothing_of_training(tmp_path):
    cfg = compose_cfg(tmp_path / "run", "experiment=selftest", "task=selftest")
    cells = plan_cells(cfg)
    plan = budget.plan_budget(cells, plan_jobs(cfg, cells, 1), tmp_path / "run", ("cpu",), cfg.runner,
                              load_constants())
    assert plan.training == [] and "training" not in budget.format_plan(plan, None, [], 1)
