"""The shipped tiny vision-language model of ``synthetic_vqa`` (``tiny_vlm``, assets/vision/tiny_vlm; docs/evaluation.md
"The embedded suites"): it answers grounded questions it was never evaluated on, the processor feeds it what it was
trained on, it is small, its config loads it offline, and the training script runs."""
import torch

from palrp_bench import catalog
from palrp_bench.data import synthetic_vqa as sv
from palrp_bench.finetune import tiny_vlm

#: a held-out set the training script never evaluated on (it used split "test", seed 0)
FRESH_SEED = 4242


def test_shipped_model_answers_fresh_questions_and_is_small():
    model, processor = sv.load_tiny_vlm()
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    fresh = tiny_vlm.evaluate(model, processor, n=200, seed=FRESH_SEED)["per_kind"]
    for kind in ("colour", "side"):  # chance: 1/2
        assert fresh[kind]["contrast_accuracy"] >= 0.9 and fresh[kind]["top1_accuracy"] >= 0.9, (kind, fresh)
    report = sv.load_tiny_vlm_report()
    assert report["parameters"] == sum(p.numel() for p in model.parameters())
    assert all(report["heldout"]["per_kind"][k]["contrast_accuracy"] >= 0.9 for k in ("colour", "side"))
    assert sum(f.stat().st_size for f in sv.tiny_vlm_dir().iterdir()) < 1_000_000


def test_the_processor_feeds_what_the_model_was_trained_on():
    samples = sv.make_synthetic_vqa(4, seed=1)
    processor = sv.build_tiny_vlm_processor()
    pixels = processor.image_processor(images=[s.load_image() for s in samples], return_tensors="pt")["pixel_values"]
    assert (tiny_vlm.image_pixels(torch.stack([s.image for s in samples])) - pixels).abs().max() < 1e-6
    from palrp_bench.evaluation.tasks.vqa_evidence import prompt_of

    batches = tiny_vlm.Batches(samples, processor)
    for s in samples:
        ids = processor(text=[prompt_of(processor, s.question)], images=[[s.load_image()]])["input_ids"][0]
        assert list(ids) == batches.prompts[s.question]


def test_the_model_config_loads_model_and_processor_offline():
    from omegaconf import OmegaConf

    from palrp_bench.models.loading import load_model

    cfg = OmegaConf.to_object(catalog.load("model", "tiny_vlm"))
    model, processor = load_model(cfg, "cpu")
    assert cfg.kind.value == "vlm" and model.config.image_token_id == processor.tokenizer.convert_tokens_to_ids(
        sv.IMAGE_TOKEN)


def test_a_short_training_run_writes_a_loadable_model(tmp_path):
    report = tiny_vlm.train(tmp_path, steps=3, pool=16, progress=False)
    model, _ = sv.load_tiny_vlm(tmp_path)
    assert report["recipe"]["steps"] == 3 and set(report["heldout"]["per_kind"]) == set(sv.VQA_QUESTIONS)
    assert report["parameters"] == sum(p.numel() for p in model.parameters())
