"""The cost model (docs/planning.md): parameter counts against the libraries' own models, the per-sample work against
the forwards the procedures really run, the estimate's arithmetic, and where constants are read from."""
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from palrp_bench import catalog
from palrp_bench.data.imdb import MEAN_REVIEW_TOKENS
from palrp_bench.data.synthetic_evidence import MEAN_CONTEXT_TOKENS as EVIDENCE_CONTEXT_TOKENS, MEAN_TOKENS as EVIDENCE_TOKENS
from palrp_bench.data.synthetic_text import MEAN_TOKENS
from palrp_bench.planning import cost
from palrp_bench.evaluation.procedures.nlp_perturbation import NEXT_TOKEN_FORWARDS, NLP_FORWARDS
from palrp_bench.evaluation.procedures.vision_perturbation import VISION_FORWARDS
from palrp_bench.planning.cost import (NF4_BYTES_PER_PARAM, Architecture, CostConstants,
                                     Work, architecture_of, hf_architecture, estimate, load_constants,
                                     peak_memory, sample_work, user_cost_path, work_units)
from palrp_bench.runner.plan import plan_cells
from models.tiny_families import MOE_FAMILIES, make_model
from models.tiny_vlms import FAMILIES as VLM_FAMILIES, make_vlm
from models.tiny_llama import BASE, VARIANTS, make_llama
from runner.harness import compose_cfg


@pytest.mark.parametrize("variant", ["mha", "gqa", "mqa_tied", "linear_rope_bias"])
@pytest.mark.parametrize("kind", ["causal", "classifier"])
def test_decoder_parameter_counts_equal_the_library_models(variant, kind):
    model = make_llama(variant, kind)
    arch = hf_architecture(model.config.to_dict(), kind)
    assert arch.params == model.num_parameters()
    assert arch.body_params == sum(p.numel() for p in model.model.layers.parameters())
    linear = sum(m.weight.numel() + (m.bias.numel() if m.bias is not None else 0)
                 for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    assert arch.linear_params == linear
    assert (arch.layers, arch.hidden, arch.ffn, arch.heads) == (2, 32, 64, 4)


@pytest.mark.parametrize("model_type,kind,fields,blocks", [
    ("gpt2", "causal", dict(n_embd=32, n_layer=2, n_head=4, vocab_size=96, n_positions=64), "transformer.h"),
    ("bert", "classifier", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                                vocab_size=96, max_position_embeddings=64), "bert.encoder.layer"),
    ("opt", "causal", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=48, vocab_size=96,
                           max_position_embeddings=64, word_embed_proj_dim=32), "model.decoder.layers"),
])
def test_other_families_are_counted_by_the_library_classes(model_type, kind, fields, blocks):
    import transformers

    config = transformers.AutoConfig.for_model(model_type, **fields)
    cls = transformers.AutoModelForCausalLM if kind == "causal" else transformers.AutoModelForSequenceClassification
    model = cls.from_config(config)
    arch = hf_architecture(config.to_dict(), kind)
    assert arch.params == model.num_parameters()
    assert arch.body_params == sum(p.numel() for p in model.get_submodule(blocks).parameters())
    assert (arch.layers, arch.hidden, arch.heads) == (2, 32, 4)
    assert arch.ffn == {"gpt2": 128, "bert": 48, "opt": 48}[model_type]


def test_known_architectures_are_the_public_model_sizes():
    constants = load_constants()
    sizes = {name: hf_architecture(fields, "seq2seq" if fields["model_type"] == "t5"
                                   else "vlm" if "vision_config" in fields else "causal").params
             for name, fields in constants.architectures.items()}
    # published parameter counts (model cards): 6.74 B, 8.03 B, 1.10 B; Flan-T5-XL 2.85 B and -base 248 M
    # (num_parameters() of the checkpoints: shared embedding, encoder, decoder and their own output head)
    assert sizes["meta-llama/Llama-2-7b-hf"] == 6_738_415_616
    assert sizes["meta-llama/Llama-3.1-8B-Instruct"] == 8_030_261_248
    assert sizes["TinyLlama/TinyLlama-1.1B-Chat-v1.0"] == 1_100_048_384
    assert sizes["google/flan-t5-xl"] == 2_849_757_184
    assert sizes["google/flan-t5-base"] == 247_577_856


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_moe_parameters_split_active_from_total(family):
    """Memory counts every parameter; time counts the k of E routed experts a token uses (the fused experts of
    each sparse block, counted here from the library modules) and the widest MLP a token passes."""
    model = make_model(family, "causal")
    arch = hf_architecture(model.config.to_dict(), "causal")
    assert arch.params == model.num_parameters()
    k = model.config.num_experts_per_tok
    sparse = [m for m in model.modules() if hasattr(m, "gate_up_proj") and m.gate_up_proj.dim() == 3]
    assert sparse
    inactive = sum((e.gate_up_proj.numel() + e.down_proj.numel()) * (1 - k / e.gate_up_proj.shape[0])
                   for e in sparse)
    assert arch.inactive_params == int(inactive) and 0 < arch.inactive_params < arch.body_params
    widths = [k * e.down_proj.shape[-1] for e in sparse]
    assert arch.ffn >= max(widths)
    assert hf_architecture(make_llama("gqa", "causal").config.to_dict(), "causal").inactive_params == 0


def test_known_moe_architectures_are_the_published_sizes():
    """Total and active parameters (model cards: Mixtral 46.7B / 12.9B, Qwen3-30B-A3B 30.5B / 3.3B, OLMoE 6.9B /
    1.3B, Qwen1.5-MoE-A2.7B 14.3B / 2.7B, Moonlight 16B / 3B)."""
    constants = load_constants()
    published = {"mistralai/Mixtral-8x7B-v0.1": (46.7, 12.9), "Qwen/Qwen3-30B-A3B": (30.5, 3.3),
                 "allenai/OLMoE-1B-7B-0924": (6.9, 1.3), "Qwen/Qwen1.5-MoE-A2.7B": (14.3, 2.7),
                 "moonshotai/Moonlight-16B-A3B": (16.0, 2.9)}
    for name, (total, active) in published.items():
        arch = hf_architecture(constants.architectures[name], "causal")
        assert arch.params / 1e9 == pytest.approx(total, abs=0.06), name   # the cards round to 0.1 B
        assert (arch.params - arch.inactive_params) / 1e9 == pytest.approx(active, abs=0.06), name


@pytest.mark.parametrize("family", sorted(VLM_FAMILIES))
def test_vision_language_architectures_count_the_library_models(family):
    """The meta-device count of a vision-language model: every parameter, the language model's blocks as the body,
    the tower and projector apart, and one image's patches and tokens (Qwen2-VL: a nominal 448 x 448 image)."""
    model = make_vlm(family)
    arch = hf_architecture(model.config.to_dict(), "vlm")
    assert arch.params == model.num_parameters()
    assert arch.body_params == sum(p.numel() for p in model.model.language_model.layers.parameters())
    towers = [getattr(model.model, name) for name in ("visual", "vision_tower", "multi_modal_projector")
              if hasattr(model.model, name)]
    assert arch.vision_params == sum(p.numel() for t in towers for p in t.parameters()) > 0
    vision = model.config.vision_config
    if family.startswith("qwen"):
        side = 448 // vision.patch_size
        assert (arch.vision_patches, arch.image_tokens) == (side * side, side * side // vision.spatial_merge_size ** 2)
    else:
        tokens = (16 if family == "llava" else model.config.mm_tokens_per_image)
        assert (arch.vision_patches, arch.image_tokens) == ((vision.image_size // vision.patch_size) ** 2, tokens)
    assert arch.image_token_equivalent() == pytest.approx(
        arch.image_tokens + arch.vision_params * arch.vision_patches / arch.body_params)


def test_known_vision_language_architectures_are_the_published_sizes():
    """Model cards: Qwen2.5-VL-7B-Instruct 8.29B, LLaVA-1.5-7B 7.06B, Gemma 3 4B 4.30B (its SigLIP tower 0.42B with
    the projector); image tokens 256 (Qwen, a 448-pixel image), 576, 256."""
    constants = load_constants()
    published = {"Qwen/Qwen2.5-VL-7B-Instruct": (8.29, 256), "llava-hf/llava-1.5-7b-hf": (7.06, 576),
                 "google/gemma-3-4b-it": (4.30, 256)}
    for name, (total, tokens) in published.items():
        arch = hf_architecture(constants.architectures[name], "vlm")
        assert arch.params / 1e9 == pytest.approx(total, abs=0.01), name
        assert arch.image_tokens == tokens and arch.family == "decoder"
    gemma = hf_architecture(constants.architectures["google/gemma-3-4b-it"], "vlm")
    assert gemma.vision_params / 1e9 == pytest.approx(0.42, abs=0.01)


def test_moe_time_counts_active_parameters_and_memory_all(tmp_path):
    constants = _constants()
    cell = plan_cells(compose_cfg(tmp_path, "model=qwen3_30b_a3b", "task=mcqa", "method=pa_lrp"))[0]
    arch = architecture_of(cell.model, constants)
    work = Work(1, 100.0, 0, 0.0, 2.0)
    active = arch.body_params - arch.inactive_params
    assert work_units(arch, work) == pytest.approx(2.0 * 100 * (active + 2 * 100 * arch.attention_width
                                                                * arch.layers) / 1e9)
    assert work_units(replace(arch, inactive_params=0), work) > 5 * work_units(arch, work)   # 128 experts, 8 used
    weights = peak_memory(cell.model, arch, Work(0, 0.0, 0, 0.0), constants, "cuda:0", 8, 64)
    assert weights == pytest.approx(arch.params * 2)


def test_vit_architectures_equal_the_timm_models():
    import timm

    from palrp_bench.data.synthetic_vision import load_tiny_vit

    tiny = architecture_of(catalog.load("model", "tiny_vit"))
    model = load_tiny_vit()
    assert tiny.params == sum(p.numel() for p in model.parameters()) and tiny.tokens == 65
    deit = architecture_of(catalog.load("model", "deit_tiny"))
    reference = timm.create_model("deit_tiny_patch16_224", pretrained=False)
    assert deit.params == sum(p.numel() for p in reference.parameters()) == 5_717_416
    assert (deit.tokens, deit.layers, deit.hidden, deit.ffn) == (197, 12, 192, 768)
    import torchvision

    vit_b16 = architecture_of(catalog.load("model", "vit_b16"))  # torchvision weights, loaded as a timm ViT
    assert vit_b16.params == sum(p.numel() for p in torchvision.models.vit_b_16().parameters()) == 86_567_656


def _count_rows(module):
    """A forward pre-hook counting the rows (samples) that pass through ``module``."""
    seen = []

    def hook(_, args, kwargs):
        x = kwargs.get("input_ids", args[0] if args else None)
        seen.append(x.shape[0])
    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    return seen, handle


@pytest.mark.parametrize("model,task", [("tiny_llama_cls", "synthetic_sentiment"),
                                        ("tiny_llama_causal", "synthetic_mcqa")])
def test_nlp_work_counts_the_forwards_the_procedure_runs(tmp_path, model, task):
    """The perturbation forwards of a sample: classification at most NLP_FORWARDS rows, exactly that many unless
    two perturbed copies coincide (e.g. a replaced token that already was UNK; forwarded once); next token one
    fewer when the number N of perturbable tokens is even (generation and pruning at 50% keep the same N/2)."""
    from palrp_bench.evaluation.tasks import task_adapter
    from palrp_bench.runner.bundles import load_bundle

    cell = plan_cells(compose_cfg(tmp_path, f"model={model}", f"task={task}", "method=pa_lrp",
                                  "protocol=corrected"))[0]
    bundle = load_bundle(cell.model, "cpu")
    adapter = task_adapter(cell.task.kind)
    samples = adapter.load_samples(cell.task, bundle)[:6]
    rows = []
    for sample in samples:
        seen, handle = _count_rows(bundle.model.model)
        try:
            adapter.evaluate(bundle, [sample], cell.context("cpu", None, 64), cell.metrics)
        finally:
            handle.remove()
        rows.append(sum(seen))
    work = sample_work(cell, architecture_of(cell.model), load_constants())
    if task == "synthetic_mcqa":  # corrected: BOS kept, N = tokens - 1
        assert rows == [NLP_FORWARDS - ((len(s.input_ids) - 1) % 2 == 0) for s in samples]
        assert work.forwards == NEXT_TOKEN_FORWARDS == NLP_FORWARDS - 0.5
    else:
        assert max(rows) == work.forwards == NLP_FORWARDS, rows
    sample = samples[0]
    if task == "synthetic_sentiment":
        assert work.explain_tokens == len(sample.input_ids) == 25  # padded to pad_to, as explained


def test_vision_work_counts_the_forwards_the_procedure_runs(tmp_path):
    from palrp_bench.evaluation.tasks import task_adapter
    from palrp_bench.runner.bundles import load_bundle

    cell = plan_cells(compose_cfg(tmp_path, "model=tiny_vit", "task=synthetic_shapes", "method=pa_lrp"))[0]
    bundle = load_bundle(cell.model, "cpu")
    adapter = task_adapter(cell.task.kind)
    samples = adapter.load_samples(cell.task, bundle)[:2]
    seen = []
    handle = bundle.model.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[0]))
    try:
        adapter.evaluate(bundle, samples, cell.context("cpu", None, 64), cell.metrics)
    finally:
        handle.remove()
    work = sample_work(cell, architecture_of(cell.model), load_constants())
    assert work.forwards == VISION_FORWARDS and work.explanations == 2
    assert sum(seen) == len(samples) * VISION_FORWARDS


def test_attnlrp_protocol_and_multi_pass_methods(tmp_path):
    """The AttnLRP-paper perturbation forwards two curves over every token (sharing the empty and the full input):
    2 N rows; Integrated Gradients costs n_steps forwards and backwards, i.e. n_steps LRP-sized explanations."""
    from palrp_bench.evaluation.tasks import task_adapter
    from palrp_bench.runner.bundles import load_bundle

    cell = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_cls", "task=synthetic_sentiment_attnlrp",
                                  "method=attnlrp"))[0]
    bundle = load_bundle(cell.model, "cpu")
    adapter = task_adapter(cell.task.kind)
    sample = adapter.load_samples(cell.task, bundle)[0]
    seen = []
    handle = bundle.model.model.register_forward_pre_hook(
        lambda _, args, kwargs: seen.append((kwargs.get("inputs_embeds") if kwargs.get("input_ids") is None
                                             else kwargs["input_ids"]).shape[0]), with_kwargs=True)
    try:
        adapter.evaluate(bundle, [sample], cell.context("cpu", None, 64), cell.metrics)
    finally:
        handle.remove()
    constants = load_constants()
    work = sample_work(cell, architecture_of(cell.model), constants)
    n = sample.meta["n_tokens"]
    assert sum(seen) == 2 * n and work.forwards == 2 * MEAN_TOKENS["cls"]
    r = constants.explain_cost["decoder/none"]
    ig = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_cls", "task=synthetic_sentiment_attnlrp",
                                "method=integrated_gradients"))[0]
    assert sample_work(ig, architecture_of(ig.model), constants).explain_forwards == pytest.approx(50 * r)
    vision = plan_cells(compose_cfg(tmp_path, "model=tiny_vit", "task=synthetic_shapes_attnlrp", "method=atman"))[0]
    work = sample_work(vision, architecture_of(vision.model), constants)
    assert work.forwards == 2 * 64 and work.explain_forwards == 64 + 1  # 64 steps; AtMan: one pass per patch + 1


def _constants(**profile) -> CostConstants:
    values = {"seconds_per_unit": 2e-3, "overhead_s": 0.5, "load_s_per_gparam": 10.0, **profile}
    return CostConstants(devices={"cpu": {"measured_on": "test", "profiles": {"decoder/bfloat16/none": values,
                                                                                "decoder/bfloat16/nf4": values}}},
                         explain_cost={"decoder/none": 2.0, "decoder/nf4": 8.0},
                         memory={"runtime_bytes": 1e9, "explain_per_hidden": 10, "explain_per_ffn": 4,
                                 "forward_per_hidden": 6, "forward_per_ffn": 3},
                         architectures=load_constants().architectures)


def test_estimate_arithmetic_follows_the_documented_formula(tmp_path):
    constants = _constants()
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp"))[0]
    result = estimate(cell, 10, "cpu", constants=constants, kind="cpu/test/2t")
    fields = constants.architectures["TinyLlama/TinyLlama-1.1B-Chat-v1.0"]
    d, layers, heads, ffn = 2048, 22, 32, 5632
    body = layers * (d * d + 2 * d * 256 + d * d + 3 * d * ffn + 2 * d)  # q, k+v (4 kv heads of 64), o, mlp, norms
    assert hf_architecture(fields, "classifier").body_params == body
    per_token = lambda t: body + 2 * t * d * layers  # noqa: E731
    real = MEAN_REVIEW_TOKENS  # the dataset's mean tokens per review (data/imdb.py)
    units = (1 * 2.0 * 512 * per_token(512) + NLP_FORWARDS * real * per_token(real)) / 1e9
    assert result.work == Work(1, 512.0, NLP_FORWARDS, float(real), 2.0)  # LRP: one forward + one backward = r
    assert result.units_per_sample == pytest.approx(units, rel=1e-12)
    assert result.per_sample == pytest.approx(0.5 + 2e-3 * units, rel=1e-12)
    assert result.seconds == pytest.approx(10 * result.per_sample, rel=1e-12)
    params = hf_architecture(fields, "classifier").params
    assert result.load_seconds == pytest.approx(10.0 * params / 1e9)
    assert result.select_per_candidate == pytest.approx(2e-3 * real * per_token(real) / 1e9)
    # memory: runtime + bf16 weights + the larger of explanation and forward activations
    explain = 8 * 512 * layers * ((10 * d + 4 * ffn) + 2 * heads * 512) * 2
    forward = 64 * real * ((6 * d + 3 * ffn) + heads * real) * 2
    assert result.peak_bytes == pytest.approx(1e9 + params * 2 + max(explain, forward))


def test_map_sensitivity_prices_one_float64_explanation_and_copy(tmp_path):
    """``runner.map_sensitivity=true``: one more explanation per sample, and the float64 copy's 8 bytes per parameter
    beside the bf16 weights, with the explanation's activations at 8 bytes (the runner's float64 one)."""
    constants = _constants()
    plain = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp"))[0]
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp",
                                  "runner.map_sensitivity=true"))[0]
    assert cell.metrics == (*plain.metrics, "map_sensitivity")
    base, result = (estimate(c, 10, "cpu", constants=constants, kind="cpu/test/2t") for c in (plain, cell))
    assert result.work == replace(base.work, explanations=2, float64_copy=True) and base.work.explanations == 1
    assert result.units_per_sample > base.units_per_sample
    arch = architecture_of(cell.model, constants)
    d, layers, heads, ffn = 2048, 22, 32, 5632
    explain64 = 8 * 512 * layers * ((10 * d + 4 * ffn) + 2 * heads * 512) * 8
    forward = 64 * 300 * ((6 * d + 3 * ffn) + heads * 300) * 2
    assert result.peak_bytes == pytest.approx(1e9 + arch.params * (2 + 8) + max(explain64, forward))


def test_nf4_weights_count_half_a_byte_per_quantized_parameter(tmp_path):
    constants = _constants()
    cells = plan_cells(compose_cfg(tmp_path, "experiment=table1", "model=llama2_7b_4bit"))
    arch = architecture_of(cells[0].model, constants)
    work = Work(0, 0.0, 0, 0.0)
    weights = peak_memory(cells[0].model, arch, work, constants, "cuda:0", 8, 64)
    assert weights == pytest.approx((arch.params - arch.linear_params) * 2 + arch.linear_params * NF4_BYTES_PER_PARAM)
    assert 3.5e9 < weights < 4.0e9  # a 7B NF4 model: ~3.7 GB


def test_uncalibrated_device_kinds_get_no_time(tmp_path):
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp"))[0]
    result = estimate(cell, 10, "cuda:0", constants=_constants(), kind="cuda/Some GPU")
    assert result.seconds is None and result.per_sample is None and result.note.startswith("uncalibrated")
    assert result.peak_bytes is not None  # memory needs no calibration


def test_unknown_architecture_is_said_not_guessed(tmp_path):
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp",
                                  "model.base_model=null"))[0]
    result = estimate(cell, 10, "cpu", constants=_constants(), kind="cpu/test/2t")
    assert result.seconds is None and result.peak_bytes is None and "model.base_model" in result.note


def test_user_cache_follows_xdg_and_overrides_the_shipped_constants(tmp_path, monkeypatch):
    monkeypatch.delenv("PALRP_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cost_path() == tmp_path / "xdg" / "palrp-bench" / "cost.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cost_path() == tmp_path / "home" / ".cache" / "palrp-bench" / "cost.json"
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "own"))
    assert user_cost_path() == tmp_path / "own" / "cost.json"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    shipped = load_constants()
    assert shipped.profile("cuda/Some GPU", "decoder/bfloat16/none") is None
    assert shipped.profile("cpu/Other CPU/8t", "decoder/bfloat16/none").origin.startswith("shipped CPU default")
    user_cost_path().parent.mkdir(parents=True)
    user_cost_path().write_text(json.dumps({"devices": {"cuda/Some GPU": {
        "calibrated": "today", "profiles": {"decoder/bfloat16/none": {
            "seconds_per_unit": 1e-5, "overhead_s": 0.1, "load_s_per_gparam": 3.0}}}}}))
    profile = load_constants().profile("cuda/Some GPU", "decoder/bfloat16/none")
    assert profile.seconds_per_unit == 1e-5 and "calibrated" in profile.origin


def test_typical_tokens_are_capped_at_max_length(tmp_path):
    cell = plan_cells(compose_cfg(tmp_path, "model=tinyllama", "task=imdb", "method=pa_lrp",
                                  "task.options.max_length=128"))[0]
    work = sample_work(cell, architecture_of(cell.model), load_constants())
    assert work.forward_tokens == 128 and work.explain_tokens == 128
    assert work.explain_forwards == load_constants().explain_cost["decoder/none"]
    assert work_units(Architecture("decoder", body_params=10, layers=1, attention_width=0), work) \
        == pytest.approx((work.explain_forwards * 128 * 10 + NLP_FORWARDS * 128 * 10) / 1e9)


def test_an_encoder_decoder_is_priced_by_its_encoder_and_decoder_blocks():
    """The tiny T5's architecture splits its blocks (tied head: the checkpoint holds none of its own); the work of
    a seq2seq_qa sample is the explanation and the context-only insertion curves, each forward adding the decoder
    at one token with its cross-attention over the encoder tokens."""
    from palrp_bench.data.synthetic_text import load_tiny_text_model
    from palrp_bench.planning.cost import forward_units, sample_work, work_units

    model = load_tiny_text_model("t5_squad")
    arch = architecture_of(catalog.load("model", "tiny_t5"))
    assert arch.family == "seq2seq" and arch.params == sum(p.numel() for p in model.parameters())
    assert arch.body_params == sum(p.numel() for p in model.encoder.block.parameters())
    assert arch.decoder_params == sum(p.numel() for p in model.decoder.block.parameters())
    assert (arch.layers, arch.decoder_layers, arch.attention_width) == (2, 2, 48)
    constants = load_constants()
    cell = SimpleNamespace(model=catalog.load("model", "tiny_t5"), task=catalog.load("task", "synthetic_squad"),
                           method="pa_lrp", metrics=("attnlrp_perturbation", "iou"))
    work = sample_work(cell, arch, constants)
    tokens, context = EVIDENCE_TOKENS["qa"], EVIDENCE_CONTEXT_TOKENS["qa"]
    assert (work.explanations, work.explain_tokens, work.decoder_tokens) == (1, tokens, 1.0)
    assert work.forwards == 1 + 2 * context
    one = (tokens * (arch.body_params + 2 * tokens * 48 * 2) + arch.decoder_params + 2 * tokens * 48 * 2) / 1e9
    assert forward_units(arch, tokens, 1.0) == pytest.approx(one, rel=1e-12)
    assert work_units(arch, work) == pytest.approx((work.explain_forwards + work.forwards) * one, rel=1e-12)


def test_a_local_squad_file_is_tokenised_to_size_time_by_the_mean_and_memory_by_the_longest(tmp_path):
    """squad_attnlrp with a local SQuAD v2 file and a model whose tokenizer is on the machine: the plan tokenises
    the pool the run will draw (every question by default) with the model's tokenizer, prices time with the mean
    prompt and context and memory with the longest prompt; without the file it falls back to the shipped table."""
    from pathlib import Path

    from palrp_bench.data.registry import load_dataset
    from palrp_bench.data.synthetic_text import load_tiny_tokenizer
    from palrp_bench.evaluation.tasks.base import dataset_tokens
    from palrp_bench.evaluation.tasks.seq2seq_qa import encode_qa, measured_prompts
    from palrp_bench.planning.cost import peak_memory, sample_work

    squad = Path(__file__).resolve().parents[1] / "data" / "fixtures_text" / "evidence" / "dev-v2.0.json"
    cell = plan_cells(compose_cfg(tmp_path, "model=tiny_t5", "task=squad_attnlrp", "method=pa_lrp",
                                  f"task.path={squad}", "task.pool_size=12"))[0]
    tok = load_tiny_tokenizer(kind="t5_squad")
    encoded = [encode_qa(tok, s) for s in load_dataset("squad", path=squad, limit=12, options=cell.task.options)]
    lengths = [len(ids) for ids, _, _ in encoded]
    assert len(lengths) == 12 and max(lengths) > sum(lengths) / 12       # unanswerable questions included
    mean, context, longest = measured_prompts(cell)
    assert mean == pytest.approx(sum(lengths) / 12) and longest == max(lengths)
    assert context == pytest.approx(sum(sum(c) for _, c, _ in encoded) / 12)
    arch, constants = architecture_of(cell.model), load_constants()
    work = sample_work(cell, arch, constants)
    assert (work.explain_tokens, work.longest_tokens) == (mean, longest)
    assert work.forwards == pytest.approx(1 + 2 * context)
    sized = peak_memory(cell.model, arch, work, constants, "cuda:0", 4, 64)
    by_mean = peak_memory(cell.model, arch, replace(work, longest_tokens=0.0), constants, "cuda:0", 4, 64)
    assert sized > by_mean
    missing = plan_cells(compose_cfg(tmp_path, "model=tiny_t5", "task=squad_attnlrp", "method=pa_lrp",
                                     f"task.path={tmp_path / 'none.json'}"))[0]
    assert measured_prompts(missing) is None
    assert sample_work(missing, arch, constants).explain_tokens == dataset_tokens(missing.task)[0]
