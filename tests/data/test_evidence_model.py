"""The synthetic evidence tasks and the shipped tiny evidence model (docs/evaluation.md, "Evidence data" and "The
embedded suites"): deterministic templates with the evidence where they say, the model's own fast tokenizer, the
model answering 50+ samples per task of a split it was never evaluated on, and a deterministic short training."""
import json

import pytest
import torch

from palrp_bench import catalog
from palrp_bench.data import synthetic_evidence as se
from palrp_bench.data import synthetic_text as st
from palrp_bench.data.evidence_common import EvidencePool, render, tokens_overlapping
from palrp_bench.data.registry import load_dataset
from palrp_bench.errors import BadInputError

#: A held-out set the training script never evaluated on (it used split "test", seed 0).
FRESH_SEED = 4242
TASKS = ("sva", "ra", "qa")


@pytest.fixture(scope="module")
def tok():
    return se.load_evidence_tokenizer()


@pytest.fixture(scope="module")
def model():
    return st.load_tiny_text_model("evidence")


# ------------------------------------------------------------------------------------------------ generation
@pytest.mark.parametrize("task", TASKS)
def test_generation_is_deterministic_and_prefix_stable(task):
    a = se.make_synthetic_evidence(task, 30, seed=3, split="val")
    assert [s.to_json() for s in a] == [s.to_json() for s in se.make_synthetic_evidence(task, 30, seed=3, split="val")]
    assert [s.to_json() for s in se.make_synthetic_evidence(task, 10, seed=3, split="val")] == [
        s.to_json() for s in a[:10]]
    assert [s.to_json() for s in se.make_synthetic_evidence(task, 30, seed=4, split="val")] != [s.to_json() for s in a]
    assert a[7].sample_id == f"synth-{task}-val-s3-00007"


@pytest.mark.parametrize("task", TASKS)
def test_templates_put_the_evidence_where_the_rule_says(task, tok):
    samples = se.make_synthetic_evidence(task, 300, seed=1)
    for s in samples:
        assert s.meta["evidence_source"] == "template" and len(s.evidence) == 1
        (word,) = s.evidence_words
        if task == "sva":
            nouns = {pair[s.meta["subject_number"] == "plural"] for pair in se.SVA_NOUNS}
            assert word in nouns
            verb = next(v for v in se.SVA_VERBS if s.target in v)
            assert s.target == verb[s.meta["subject_number"] == "plural"] and s.foil in verb and s.foil != s.target
        elif task == "ra":
            assert s.target == (se.REFLEXIVES["plural"] if s.meta["subject_number"] == "plural"
                                else se.REFLEXIVES[s.meta["gender"]])
            assert {s.target, s.foil} == {se.REFLEXIVES["plural"], se.REFLEXIVES[s.meta["gender"]]}
            assert s.prefix.split(" ").count(word) >= 1
        else:
            asked = s.question.split()[2]
            assert f"{asked} " in s.context and word == s.target and s.foil != s.target
            fact = next(f for f in s.context.split(". ") if f.startswith(asked + " "))
            assert fact.rstrip(".").endswith(word)
            kind = next(objects for _, _, objects in se.QA_RELATIONS if word in objects)
            assert s.foil in kind and f" {s.foil}." not in s.context  # same kind, absent from the context
        text = render(s, "causal")
        enc = tok(text.text, return_offsets_mapping=True)
        assert tok.unk_token_id not in enc["input_ids"]
        marked = tokens_overlapping(enc["offset_mapping"], text.evidence)
        assert [tok.convert_ids_to_tokens(i) for i, m in zip(enc["input_ids"], marked) if m] == [word]
    if task == "sva":  # attractors of the other number occur, so the nearest noun does not decide
        assert sum(s.meta["n_attractors"] > 0 for s in samples) > 60
    if task == "ra":
        assert sum(s.meta["attractor"] is not None for s in samples) > 100


def test_registered_synthetic_datasets_and_options():
    pool = load_dataset("synthetic_ra", options={"n": 20, "seed": 2, "split": "val"}, limit=12)
    assert isinstance(pool, EvidencePool) and len(pool) == 12 and pool.dropped == {}
    assert pool.sample_ids == [s.sample_id for s in se.make_synthetic_ra(12, seed=2, split="val")]
    assert len(load_dataset("synthetic_qa")) == se.DEFAULT_N
    with pytest.raises(BadInputError, match="unknown option"):
        load_dataset("synthetic_sva", options={"kind": "x"})
    with pytest.raises(BadInputError, match="split"):
        load_dataset("synthetic_sva", options={"split": "dev"})


# ------------------------------------------------------------------------------------------------ tokenizer
def test_own_fast_tokenizer_with_offsets_and_the_shared_one_unchanged(tok):
    assert tok.is_fast and tok.bos_token_id == st.BOS_ID and tok.pad_token_id == st.PAD_ID
    assert tok.get_vocab() == se.EVIDENCE_VOCAB
    enc = tok("The keys are old.", return_offsets_mapping=True)
    assert tok.convert_ids_to_tokens(enc["input_ids"]) == ["<s>", "The", "keys", "are", "old", "."]
    assert enc["offset_mapping"][0] == (0, 0) and enc["offset_mapping"][2] == (4, 8)
    shared = st.load_tiny_tokenizer()
    assert "are" not in shared.get_vocab() and "himself" not in shared.get_vocab()
    assert st.tiny_tokenizer_dir("evidence") == se.EVIDENCE_DIR
    assert st.tiny_tokenizer_dir("causal") == st.tiny_tokenizer_dir() == st.ASSET_DIR / "tokenizer"


# ------------------------------------------------------------------------------------------------ the model
@pytest.mark.parametrize("task", TASKS)
def test_shipped_model_answers_50_plus_per_task(model, tok, task):
    samples = se.make_synthetic_evidence(task, 200, seed=FRESH_SEED, split="test")
    target, foil = se.contrast_logits(model, tok, samples)
    correct = int((target > foil).sum())
    assert correct >= 50 and correct / len(samples) >= 0.9, (task, correct)


def test_training_report_records_the_accuracy_per_task(model):
    report = st.load_training_report("evidence")
    assert report["kind"] == "evidence" and report["vocab_size"] == len(se.EVIDENCE_VOCAB)
    per_task = report["heldout"]["per_task"]
    assert set(per_task) == set(TASKS)
    for task, row in per_task.items():
        assert row["n_correct"] >= 50 and row["n_correct"] == round(row["contrast_accuracy"] * row["n"])
    assert model.config.vocab_size == len(se.EVIDENCE_VOCAB)
    assert report["n_parameters"] == sum(p.numel() for p in model.parameters())
    size = sum(f.stat().st_size for f in se.EVIDENCE_DIR.iterdir())
    assert size < 1_000_000


def test_the_model_config_loads_model_and_tokenizer_offline():
    from omegaconf import OmegaConf

    from palrp_bench.models.loading import load_model

    cfg = OmegaConf.to_object(catalog.load("model", "tiny_llama_evidence"))
    loaded, tokenizer = load_model(cfg, "cpu")
    assert loaded.config.vocab_size == len(se.EVIDENCE_VOCAB) and tokenizer.get_vocab() == se.EVIDENCE_VOCAB


@pytest.mark.parametrize("trainer, batch_size, extra", [("train_evidence", 12, {}), ("train_t5_squad", 8, {}),
                                                         ("train_needle", 2, {"heldout_lengths": (64,)})])
def test_a_short_training_run_is_deterministic(trainer, batch_size, extra):
    """The evidence LLaMA, the tiny T5 of synthetic_squad (tests/data/test_tiny_t5.py) and the needle LLaMA
    (tests/data/test_needle_model.py; held out at 64 tokens only, every depth)."""
    from palrp_bench.finetune import tiny_text

    fit = getattr(tiny_text, trainer)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = [fit(seed=5, steps=3, batch_size=batch_size, lr=5e-3, heldout_n=20, **extra) for _ in range(2)]
    finally:
        torch.set_num_threads(threads)
    (m1, _, r1), (m2, _, r2) = runs
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    assert r1["train"]["final_train_loss"] == r2["train"]["final_train_loss"]
    assert json.dumps(r1["heldout"]) == json.dumps(r2["heldout"])
    fresh = fit(seed=6, steps=3, batch_size=batch_size, lr=5e-3, heldout_n=4, **extra)[0].state_dict()
    assert not all(torch.equal(s1[k], fresh[k]) for k in s1)
