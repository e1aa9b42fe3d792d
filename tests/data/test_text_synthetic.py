"""Embedded synthetic text suite: deterministic generation, task rules, shipped tokenizer and tiny models."""
import json

import pytest
import torch

from palrp_bench.data import synthetic_text as st
from palrp_bench.data.arc import format_mcqa_prompt, predicted_letter, select_correct
from palrp_bench.errors import BadInputError, MissingDataError

#: A held-out set the training script never evaluated on (it used split "test", seed 0).
FRESH_SEED = 4242


@pytest.fixture(scope="module")
def tok():
    return st.load_tiny_tokenizer()


@pytest.fixture(scope="module")
def cls_model():
    return st.load_tiny_text_model("cls")


@pytest.fixture(scope="module")
def causal_model():
    return st.load_tiny_text_model("causal")


# ------------------------------------------------------------------------------------------------ generation
@pytest.mark.parametrize("make", [st.make_synthetic_classification, st.make_synthetic_mcqa])
def test_generation_is_deterministic_and_prefix_stable(make):
    a, b = make(40, seed=3, split="val"), make(40, seed=3, split="val")
    assert [(s.sample_id, s.input_ids, s.label, s.meta) for s in a] == [
        (s.sample_id, s.input_ids, s.label, s.meta) for s in b]
    assert [s.input_ids for s in make(10, seed=3, split="val")] == [s.input_ids for s in a[:10]]
    assert [s.input_ids for s in make(40, seed=4, split="val")] != [s.input_ids for s in a]
    assert [s.input_ids for s in make(40, seed=3, split="train")] != [s.input_ids for s in a]
    task = "cls" if make is st.make_synthetic_classification else "mcqa"
    assert a[7].sample_id == f"synth-{task}-val-s3-00007"


def test_classification_label_is_an_early_trigger():
    samples = st.make_synthetic_classification(600, seed=1)
    labels = [s.label for s in samples]
    assert 0.4 < sum(labels) / len(labels) < 0.6
    hard_negatives = 0
    for s in samples:
        words = s.meta["text"].split()
        assert s.input_ids == [st.BOS_ID] + [st.VOCAB[w] for w in words]
        assert st.REVIEW_LENGTHS[0] <= len(words) <= st.REVIEW_LENGTHS[1]
        early = [i + 1 for i, w in enumerate(words[:st.TRIGGER_WINDOW]) if w in st.TRIGGERS]
        assert s.label == int(bool(early)) and s.meta["evidence_positions"] == early
        assert s.meta["trigger_positions"] == [i + 1 for i, w in enumerate(words) if w in st.TRIGGERS]
        assert s.meta["decoy_positions"] == [i + 1 for i, w in enumerate(words) if w in st.DECOYS]
        hard_negatives += s.label == 0 and bool(s.meta["trigger_positions"])
    assert hard_negatives > 100  # triggers after the window occur: position, not presence, decides


def test_classification_padding_is_eos():
    plain = st.make_synthetic_classification(20, seed=2)
    padded = st.make_synthetic_classification(20, seed=2, pad_to=30)
    for p, q in zip(plain, padded):
        n = p.meta["n_tokens"]
        assert len(q.input_ids) == 30 and q.input_ids[:n] == p.input_ids and q.meta["n_pad"] == 30 - n
        assert set(q.input_ids[n:]) <= {st.EOS_ID} and st.EOS_ID not in p.input_ids
    with pytest.raises(BadInputError, match="pad_to"):
        st.make_synthetic_classification(2, pad_to=10)


def test_mcqa_prompt_answer_and_evidence():
    samples = st.make_synthetic_mcqa(300, seed=5)
    assert len({len(s.input_ids) for s in samples}) == 1
    letters = {s.meta["answer_letter"] for s in samples}
    assert letters == {"A", "B", "C", "D"}
    for s in samples:
        asked = s.meta["question"].split()[-1].rstrip("?")
        in_category = [c for c in s.meta["choices"] if c in st.OPTION_CATEGORIES[asked]]
        assert len(in_category) == 1 and len(set(s.meta["choices"])) == 4
        assert s.meta["choices"][s.label] == in_category[0] and s.meta["answer_letter"] == "ABCD"[s.label]
        assert s.meta["prompt"] == format_mcqa_prompt(s.meta["question"], s.meta["choices"])
        assert s.meta["answer_token_id"] == st.VOCAB[s.meta["answer_letter"]]
        q, letter, word = s.meta["evidence_positions"]
        assert s.input_ids[q] == st.VOCAB[asked]
        assert s.input_ids[letter] == s.meta["answer_token_id"] and s.input_ids[word] == st.VOCAB[in_category[0]]


@pytest.mark.parametrize("kwargs", [{"n": -1}, {"n": 2, "split": "dev"}, {"n": 2, "seed": -5}, {"n": 1.5}])
def test_generator_arguments(kwargs):
    with pytest.raises(BadInputError):
        st.make_synthetic_mcqa(**kwargs)


# ------------------------------------------------------------------------------------------------ tokenizer
def test_shipped_tokenizer_matches_the_code_and_the_samples(tok):
    assert tok.get_vocab() == st.VOCAB == st.build_tiny_tokenizer().get_vocab()
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2, 2)
    for s in st.make_synthetic_classification(20):
        assert tok(s.meta["text"])["input_ids"] == s.input_ids
    for s in st.make_synthetic_mcqa(20):
        assert tok(s.meta["prompt"])["input_ids"] == s.input_ids == st.words_to_ids(s.meta["prompt"])
    assert tok.convert_ids_to_tokens(st.VOCAB["\n"]) == "\n"
    assert tok("zebra film")["input_ids"] == [st.BOS_ID, st.UNK_ID, st.VOCAB["film"]]


# ------------------------------------------------------------------------------------------------ models
def test_tiny_models_have_the_required_architecture(cls_model, causal_model):
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification

    assert isinstance(cls_model, LlamaForSequenceClassification) and isinstance(causal_model, LlamaForCausalLM)
    for model in (cls_model, causal_model):
        c = model.config
        assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (2, 64, 4, 2)
        assert c.pad_token_id == c.eos_token_id == st.EOS_ID and c.vocab_size == len(st.VOCAB)
        assert c.rope_parameters["rope_type"] == "default"
        assert not model.training
    assert cls_model.config.num_labels == 2
    for kind in ("cls", "causal"):
        size = sum(f.stat().st_size for f in (st.ASSET_DIR / kind).iterdir())
        assert size < 1_000_000


def test_classifier_reaches_its_reported_accuracy_on_fresh_data(cls_model):
    report = st.load_training_report("cls")
    assert report["heldout_accuracy"] >= 0.95
    fresh = st.make_synthetic_classification(600, seed=FRESH_SEED, split="test")
    accuracy = st.classification_accuracy(cls_model, fresh)
    assert accuracy >= max(0.95, report["heldout_accuracy"] - 0.03)


def test_classifier_ignores_eos_padding(cls_model):
    plain = st.make_synthetic_classification(64, seed=FRESH_SEED)
    padded = st.make_synthetic_classification(64, seed=FRESH_SEED, pad_to=40)
    with torch.no_grad():
        a = torch.cat([cls_model(input_ids=torch.tensor([s.input_ids])).logits for s in plain[:8]])
        # no attention mask: Hugging Face pools at the last non-pad (= non-eos) token, causal attention hides pads
        b = cls_model(input_ids=torch.tensor([s.input_ids for s in padded[:8]])).logits
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert st.classification_accuracy(cls_model, padded) == st.classification_accuracy(cls_model, plain)


def test_classifier_decision_depends_on_the_trigger_position(cls_model):
    """Moving the only trigger of a positive review out of the window must flip the prediction."""
    from palrp_bench.data.base import TextSample

    originals, moved = [], []
    for s in st.make_synthetic_classification(400, seed=FRESH_SEED + 1):
        if s.label != 1 or len(s.meta["trigger_positions"]) != 1:
            continue
        p = s.meta["trigger_positions"][0]
        last = len(s.input_ids) - 1  # the last word, outside the window
        if s.input_ids[last] in {st.VOCAB[w] for w in st.DECOYS}:
            continue
        ids = list(s.input_ids)
        ids[p], ids[last] = ids[last], ids[p]
        originals.append(s)
        moved.append(TextSample(s.sample_id + "-moved", ids, label=0, meta={"n_tokens": len(ids)}))
    assert len(moved) > 50
    assert st.classification_accuracy(cls_model, originals) >= 0.95  # predicted 1 with the trigger early
    assert st.classification_accuracy(cls_model, moved) >= 0.95  # predicted 0 once it is late


def test_causal_model_answers_the_mcqa_task_on_fresh_data(causal_model, tok):
    report = st.load_training_report("causal")
    assert report["heldout_accuracy"] >= 0.95
    fresh = st.make_synthetic_mcqa(300, seed=FRESH_SEED, split="test")
    accuracy = st.mcqa_accuracy(causal_model, tok, fresh)
    assert accuracy >= max(0.95, report["heldout_accuracy"] - 0.03)
    # the ARC selection code path runs on it: the official letter reading of the arg-max token
    ids, mask = st.batch_inputs(fresh[:50])
    with torch.no_grad():
        top = causal_model(input_ids=ids, attention_mask=mask).logits[:, -1].argmax(-1)
    letters = [predicted_letter(tok, int(t)) for t in top]
    kept = select_correct(fresh[:50], letters, limit=20)
    assert len(kept) == 20 and all(s.meta["answer_letter"] == l for s, l in zip(kept, letters[:20]) if l)


def test_qwen2_causal_model_answers_the_mcqa_task_on_fresh_data(tok):
    """The embedded default's second decoder family (a tiny Qwen2, trained with the causal recipe)."""
    model = st.load_tiny_text_model("qwen2_causal")
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.config.vocab_size == len(st.VOCAB)
    report = st.load_training_report("qwen2_causal")
    assert report["heldout_accuracy"] >= 0.95
    accuracy = st.mcqa_accuracy(model, tok, st.make_synthetic_mcqa(300, seed=FRESH_SEED, split="test"))
    assert accuracy >= max(0.95, report["heldout_accuracy"] - 0.03)


def test_training_reports_are_json_with_the_recipe():
    for kind in ("cls", "causal", "qwen2_causal"):
        report = json.loads((st.ASSET_DIR / kind / st.REPORT_NAME).read_text())
        assert report["kind"] == kind and report["heldout"]["split"] == "test"
        assert report["train"]["steps"] > 0 and report["n_parameters"] < 250_000


def test_missing_assets_and_bad_kind(tmp_path):
    with pytest.raises(MissingDataError, match="train_tiny_text.py"):
        st.load_tiny_text_model("cls", asset_dir=tmp_path)
    with pytest.raises(MissingDataError, match="train_tiny_text.py"):
        st.load_tiny_tokenizer(asset_dir=tmp_path)
    with pytest.raises(BadInputError, match="kind"):
        st.load_tiny_text_model("seq2seq")
