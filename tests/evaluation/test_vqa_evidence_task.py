"""The ``vqa_evidence`` task kind (docs/evidence.md "Visual question answering"): the prompt and the answer tokens, the
evidence carried to the language-model image tokens through each family's own processor (resizing and cropping
included), the drops, and the evaluation of tiny random models of the families through the evidence procedure."""
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from models.tiny_vlms import make_vlm, processor_for, save_checkpoint
from palrp_bench import catalog
from palrp_bench.data.synthetic_vqa import VQA_VOCAB
from palrp_bench.data.vqa import VqaSample
from palrp_bench.evaluation.tasks.base import JobContext
from palrp_bench.evaluation.tasks.vqa_evidence import (VqaEvidenceAdapter, answer_token, evidence_tokens,
                                                       prepare_vqa, prompt_of)
from palrp_bench.metrics.evidence import pointing_game, relevance_mass_accuracy
from palrp_bench.models.loading import load_hf_model, load_processor
from palrp_bench.models.registry import twin_for


@pytest.fixture(scope="module", params=["qwen2_vl", "llava", "gemma3"])
def bundle(request, tmp_path_factory):
    folder = save_checkpoint(request.param, tmp_path_factory.mktemp(request.param))
    model = load_hf_model(folder, kind="vlm", dtype="float32")
    return SimpleNamespace(model=model, tokenizer=load_processor(folder), device="cpu",
                           config=SimpleNamespace(kind=SimpleNamespace(value="vlm")), family=request.param)


def test_the_prompt_and_the_answer_tokens():
    processor = processor_for("qwen2_vl")
    prompt = prompt_of(processor, "what colour is the disk ?")
    assert prompt == "<|vision_start|><|image_pad|><|vision_end|> what colour is the disk ? answer :"
    tokenizer = processor.tokenizer
    assert answer_token(tokenizer, prompt, "red") == VQA_VOCAB["red"]
    assert answer_token(tokenizer, prompt + "\n", "left") == VQA_VOCAB["left"]  # no space after whitespace
    assert answer_token(tokenizer, prompt, "zebra") == tokenizer.unk_token_id


def _sample(box, size=64):
    return VqaSample("s", "what colour is the disk ?", "red", "blue", image=torch.rand(3, size, size), box=box)


def test_evidence_reaches_the_image_tokens_it_covers():
    """Qwen2-VL's processor keeps the 64 x 64 image: 8 x 8 tokens of 8 x 8 pixels. A box on whole tokens marks exactly
    those, a box on half a token marks it (covered 0.5), a box inside one token marks that one (the most covered)."""
    processor = processor_for("qwen2_vl")
    twin = twin_for(make_vlm("qwen2_vl", **{"vocab_size": len(processor.tokenizer)},
                             extra={"image_token_id": processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")}))
    evidence, coverage = evidence_tokens(twin, processor, _sample((8, 16, 24, 32)))
    assert [i for i, e in enumerate(evidence) if e] == [17, 18, 25, 26]  # rows 2-3, columns 1-2 of the 8 x 8 grid
    assert coverage[17] == 1.0 and coverage[0] == 0.0 and len(evidence) == 64
    half, coverage = evidence_tokens(twin, processor, _sample((8, 16, 12, 24)))
    assert [i for i, e in enumerate(half) if e] == [17] and coverage[17] == 0.5
    small, coverage = evidence_tokens(twin, processor, _sample((9, 17, 11, 19)))
    assert [i for i, e in enumerate(small) if e] == [17] and 0 < coverage[17] < 0.5


def test_the_processors_resizing_and_cropping_moves_the_evidence_with_the_image(bundle):
    """LLaVA's processor resizes the 64-pixel image to 16 and crops it, Gemma 3's resizes it: a box on the top-left
    quarter lands on the top-left quarter of the token grid either way."""
    twin = twin_for(bundle.model)
    evidence, _ = evidence_tokens(twin, bundle.tokenizer, _sample((0, 0, 32, 32)))
    side = int(len(evidence) ** 0.5)
    grid = torch.tensor(evidence).reshape(side, side)
    assert grid[:side // 2, :side // 2].all() and not grid[side // 2:].any() and not grid[:, side // 2:].any()


def test_drops_are_counted_by_reason(bundle):
    twin = twin_for(bundle.model)
    image = torch.rand(3, 64, 64)
    records = [VqaSample("unknown", "what colour is the disk ?", "zebra", "red", image=image, box=(0, 0, 8, 8)),
               VqaSample("all", "what colour is the disk ?", "red", "blue", image=image, box=(0, 0, 64, 64)),
               VqaSample("kept", "what colour is the disk ?", "red", "blue", image=image, box=(0, 0, 16, 16))]
    kept, dropped = prepare_vqa(records, twin, bundle.tokenizer)
    assert [p.sample_id for p in kept] == ["kept"]
    assert dropped == {"unknown_word": 1, "evidence_covers_all": 1}


def _ctx(method, contrastive=True):
    task = OmegaConf.to_object(catalog.load("task", "synthetic_vqa"))
    return JobContext(task=replace(task, contrastive=contrastive), method=method, rules=None, aggregation="official",
                      protocol="official", metrics=("evidence",), stabilizers="none")


@pytest.mark.parametrize("method", ["pa_lrp", "attnlrp"])
def test_every_row_is_written_and_the_image_rows_are_the_heatmaps(bundle, method):
    adapter = VqaEvidenceAdapter()
    pool = adapter.load_samples(replace(_ctx(method).task, options={"n": 4}), bundle)
    assert len(pool) + sum(pool.dropped.values()) == 4 and len(pool) >= 2
    samples = list(pool)[:2]
    results = adapter.evaluate(bundle, samples, _ctx(method))
    batch = next(adapter.explain(bundle, samples, _ctx(method)))
    for j, (result, sample) in enumerate(zip(results, samples)):
        rows = {(m, v): value for m, v, _, value in result.rows}
        for variant in ("default", "with_text"):
            assert {(m, variant) for m in ("pg", "mrr", "rma", "pta", "tied_token_share")} <= set(rows)
        heat = torch.from_numpy(batch.arrays[j]["image_scores"]).reshape(1, -1).double()
        evidence = torch.tensor(sample.evidence)[None]
        valid = torch.ones_like(evidence)
        assert rows[("pg", "default")] == float(pointing_game(heat, evidence, valid)[0])
        assert rows[("rma", "default")] == pytest.approx(float(relevance_mass_accuracy(heat, evidence, valid)[0]))
        assert result.info["image_tokens"] == len(sample) and result.info["contrastive"]
    with torch.no_grad():
        inputs = bundle.tokenizer(text=[samples[0].prompt], images=[[samples[0].record.load_image()]],
                                  return_tensors="pt")
        logits = bundle.model(**inputs).logits[0, -1]
    p = samples[0]
    assert results[0].info["logit"] == pytest.approx(float(logits[p.target_id] - logits[p.foil_id]), rel=1e-4)
    assert adapter.correct(bundle, samples[:1], None) == [bool(logits[p.target_id] > logits[p.foil_id])]


def test_a_text_model_is_refused_in_one_line():
    from models.tiny_families import make_model
    from palrp_bench.errors import BadInputError

    bundle = SimpleNamespace(model=make_model("llama", "causal"), tokenizer=processor_for("qwen2_vl"), device="cpu")
    with pytest.raises(BadInputError, match="vision-language models"):
        VqaEvidenceAdapter().load_samples(replace(_ctx("pa_lrp").task, options={"n": 2}), bundle)
