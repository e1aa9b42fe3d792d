"""palrp_bench/bench/rehearse.py (``scripts/rehearse.py``): its tokenizer and data writers produce files the real loaders read, with the token
lengths of the real data, and its projection is load + paper samples x time per sample for every cell."""
from pathlib import Path

import pytest

from palrp_bench.bench import rehearse

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tok")
    rehearse.write_tokenizer(folder)
    return AutoTokenizer.from_pretrained(str(folder))


def test_the_tokenizer_is_llama_shaped_and_one_word_is_one_token(tokenizer):
    assert (tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    words = rehearse._words()[:40]
    ids = tokenizer(" ".join(words))["input_ids"]
    assert ids[0] == 1 and len(ids) == 1 + len(words)


def test_arc_and_wikipedia_in_the_hub_layout_read_by_the_real_loaders(tokenizer, tmp_path):
    from palrp_bench.data.arc import load_arc_easy
    from palrp_bench.data.wikipedia import load_wikipedia

    rehearse.write_arc(tmp_path / "arc")
    arc = load_arc_easy(tokenizer, tmp_path / "arc")
    assert len(arc) > 4000 and {s.meta["answer_letter"] for s in arc} == {"A", "B", "C", "D"}
    lengths = sorted(len(s.input_ids) for s in arc)
    assert 50 <= lengths[len(lengths) // 2] <= 120
    rehearse.write_wikipedia(tmp_path / "wiki")
    wiki = load_wikipedia(tokenizer, tmp_path / "wiki", limit=200)
    assert len(wiki) == 200 and sum(s.meta["truncated"] for s in wiki) > 100


def test_the_steady_rate_and_its_stages_leave_the_first_batch_out():
    """Seconds per sample after the first batch (warm-up) and its split by stage, from a job's timings
    (runner/execute.py)."""
    timings = {"data_wait_s": 0.48, "explain_s": 2.4, "forwards_s": 2.4, "metrics_s": 0.24, "write_s": 0.0,
               "warmup_s": 4.0, "warmup_samples": 16, "total_s": 10.0, "samples": 64}
    assert rehearse.steady_rate(timings) == (6.0 / 48, 16)
    assert rehearse.stage_split(timings) == "data 10 ms / explain 50 ms / forwards 50 ms / metrics+write 5.0 ms / " \
                                            "other 10 ms"
    assert rehearse.steady_rate(dict(timings, samples=16)) == (None, 0)  # one batch: nothing after the warm-up
    assert rehearse.steady_rate({}) == (None, 0) and rehearse.stage_split({}) == "-"  # a run that stored nothing


def test_projection_is_load_plus_paper_samples_times_time_per_sample():
    m = rehearse.Measured("deit_tiny_imagenet", "ok", samples=3, load_model_s=10.0, load_data_s=2.0,
                          per_sample_s=1.5)
    targets = {t.name: t for t in rehearse.TARGETS}
    text = rehearse.report([m], targets, type("A", (), {"device": "cpu"})())
    # table 4 cells of deit_tiny: 2 methods x (12 s + 5000 x 1.5 s) = 15024 s = 4.2 h
    assert "| table4+appendix_f | 1 of 3 | 4.2 h (measured cells only) |" in text
    assert "| table1 | 0 of 3 | - |" in text


def test_projection_as_data_splits_each_table_by_the_target_that_priced_its_cells():
    import json

    m = rehearse.Measured("llama3_8b_mcqa", "ok", samples=2, load_model_s=10.0, load_data_s=1.0, per_sample_s=2.0)
    skipped = rehearse.Measured("deit_base_imagenet", "skipped", note="needs memory")
    targets = {t.name: t for t in rehearse.TARGETS}
    tables = {p.table: p for p in rehearse.project([m, skipped], targets)}
    # mcqa and mcqa_noncausal: 2 cells x 3 methods x (10 s + 1 s + 1000 x 2 s)
    assert (tables["table3"].measured, tables["table3"].cells) == (2, 4)
    assert tables["table3"].by_target == {"llama3_8b_mcqa": pytest.approx(2 * 3 * 2011.0)}
    assert tables["table3"].seconds == pytest.approx(12066.0)
    assert tables["table1"].seconds is None and tables["table1"].by_target == {}
    args = type("A", (), {"device": "cpu", "samples": 2, "batch_size": 1, "dtype": "config"})()
    data = json.loads(json.dumps(rehearse.as_data([m, skipped], targets, args)))
    assert [t["target"] for t in data["targets"]] == ["llama3_8b_mcqa", "deit_base_imagenet"]
    assert {t["table"]: t["seconds"] for t in data["tables"]}["table3"] == pytest.approx(12066.0)


def test_each_measurement_stands_beside_the_plans_estimate_for_the_same_command(tmp_path):
    per_sample, load = rehearse._planned(["model=tiny_llama_cls", "task=synthetic_sentiment", "method=pa_lrp",
                                          "runner.max_samples=2", "runner.devices=[cpu]"], tmp_path / "run")
    assert per_sample is not None and 0 < per_sample < 60 and load is not None and load >= 0
    m = rehearse.Measured("tinyllama_imdb_csv", "ok", samples=2, load_model_s=3.0, per_sample_s=2.0,
                          planned_sample_s=4.0, planned_load_s=3.5)
    text = rehearse.report([m], {t.name: t for t in rehearse.TARGETS}, type("A", (), {"device": "cpu"})())
    row = next(line for line in text.splitlines() if line.startswith("| tinyllama_imdb_csv "))
    assert "| 3 s (4 s) |" in row and "| 2.0 s (4.0 s) | 0.50 |" in row
    assert not list(tmp_path.iterdir())  # planning writes nothing


TINY_LLAMA = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                  bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)


def _random_checkpoint_loads(folder, device):
    """A checkpoint written shard by shard with its weights drawn on ``device`` loads with the library's own
    loader: bf16, norms 1, the rest normal with std 0.02, several shards in the index."""
    import json

    import torch
    from transformers import LlamaForSequenceClassification

    rehearse._write_sharded_llama(folder, TINY_LLAMA, "classifier", shard_bytes=16 * 1024, device=device)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    model = LlamaForSequenceClassification.from_pretrained(folder)
    assert model.dtype == torch.bfloat16 and model.config.num_labels == 2
    weights = torch.cat([p.detach().float().reshape(-1) for n, p in model.named_parameters() if "norm" not in n])
    assert abs(float(weights.std()) - 0.02) < 2e-3 and abs(float(weights.mean())) < 1e-3
    assert all(bool((p == 1).all()) for n, p in model.named_parameters() if n.endswith("norm.weight"))


def test_random_weights_drawn_on_the_cpu_load(tmp_path):
    """The CPU twin of the GPU build below (the same code with the CPU as the device)."""
    _random_checkpoint_loads(tmp_path / "ckpt", "cpu")


@pytest.mark.cuda
def test_random_weights_drawn_on_the_gpu_load(tmp_path):
    """On a GPU machine the 7B / 8B weights are drawn there (seconds instead of 60-100 s on the CPU)."""
    assert rehearse.weights_device() == "cuda"
    _random_checkpoint_loads(tmp_path / "ckpt", "cuda")
