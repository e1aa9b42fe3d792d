"""The embedded needle model (palrp_bench/finetune/tiny_text.py, kind ``needle``; docs/evidence.md "The embedded
model") loads with its own tokenizer through its config; its trainer's determinism is tested with the other tiny
models' (tests/data/test_evidence_model.py)."""
from omegaconf import OmegaConf

from palrp_bench import catalog
from palrp_bench.data import needle as nd


def test_the_config_loads_the_model_with_its_tokenizer():
    from palrp_bench.models.loading import load_model

    cfg = OmegaConf.to_object(catalog.load("model", "tiny_llama_needle"))
    loaded, tokenizer = load_model(cfg, "cpu")
    assert loaded.config.vocab_size == len(nd.NEEDLE_VOCAB) and tokenizer.get_vocab() == nd.NEEDLE_VOCAB
    assert loaded.config.max_position_embeddings == 4096
    assert tokenizer.tokenize("is 4829.") == ["is", "4", "8", "2", "9", "."]  # numbers as digits
