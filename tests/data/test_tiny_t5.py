"""The shipped tiny T5 of ``synthetic_squad`` (``tiny_t5``, assets/text/t5_squad; docs/evaluation.md "The
embedded suites"): it answers held-out synthetic qa samples it was never evaluated on with the answer word as its
first decoder token, it is small and its config loads it offline (its short deterministic training run is tested
with the evidence model's, tests/data/test_evidence_model.py)."""

from palrp_bench import catalog
from palrp_bench.data import synthetic_evidence as se
from palrp_bench.data import synthetic_text as st

#: A held-out set the training script never evaluated on (it used split "test", seed 0).
FRESH_SEED = 4242


def _train_module():
    from palrp_bench.finetune import tiny_text

    return tiny_text


def test_shipped_model_answers_fresh_samples_and_is_small():
    model, tok = st.load_tiny_text_model("t5_squad"), st.load_tiny_tokenizer(kind="t5_squad")
    assert type(model).__name__ == "T5ForConditionalGeneration" and tok.get_vocab() == se.EVIDENCE_VOCAB
    heldout = _train_module().t5_squad_heldout(model, tok, n=200, seed=FRESH_SEED)
    assert heldout["n_correct"] >= 180, heldout
    report = st.load_training_report("t5_squad")
    assert report["heldout"]["n_correct"] >= 0.9 * report["heldout"]["n"]
    assert report["n_parameters"] == sum(p.numel() for p in model.parameters())
    assert sum(f.stat().st_size for f in (st.ASSET_DIR / "t5_squad").iterdir()) < 1_000_000


def test_the_model_config_loads_model_and_tokenizer_offline():
    from omegaconf import OmegaConf

    from palrp_bench.models.loading import load_model

    cfg = OmegaConf.to_object(catalog.load("model", "tiny_t5"))
    loaded, tokenizer = load_model(cfg, "cpu")
    assert loaded.config.decoder_start_token_id == st.BOS_ID and tokenizer.get_vocab() == se.EVIDENCE_VOCAB

