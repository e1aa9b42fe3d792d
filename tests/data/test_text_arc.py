"""ARC-Easy MCQA loader and the correct-answer selection (docs/protocol.md section 2, "MCQA")."""
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from palrp_bench.data.arc import (answer_letter_from_token, format_mcqa_prompt, load_arc_easy, predicted_letter,
                                  select_correct)
from palrp_bench.data.synthetic_text import VOCAB, load_tiny_tokenizer
from palrp_bench.errors import BadInputError, MissingDataError

FIXTURES = Path(__file__).resolve().parent / "fixtures_text"
ARC_DIR = FIXTURES / "arc"
PROTOCOL_PROMPT = ("The following is multiple choice question (with answers).\n\n{question}\nA. {a}\nB. {b}\nC. {c}\n"
                   "D. {d}\n\nPlease make sure to answer (A,B,C, or D)\nAnswer is:")


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer()


def test_prompt_is_the_protocol_text():
    got = format_mcqa_prompt("Which is hot?", ["ice", "fire", "snow", "rain"])
    assert got == PROTOCOL_PROMPT.format(question="Which is hot?", a="ice", b="fire", c="snow", d="rain")
    three = format_mcqa_prompt("Q?", ["x", "y", "z"])
    assert three.endswith("\nA. x\nB. y\nC. z\n\nPlease make sure to answer (A,B,C, or D)\nAnswer is:")


def test_train_then_test_answer_keys_a_to_d_only(tok):
    samples = load_arc_easy(tok, ARC_DIR)
    train = pq.read_table(ARC_DIR / "ARC-Easy" / "train-00000-of-00001.parquet").to_pylist()
    test = pq.read_table(ARC_DIR / "ARC-Easy" / "test-00000-of-00001.parquet").to_pylist()
    expected = [(r, split) for split, rows in (("train", train), ("test", test)) for r in rows
                if r["answerKey"] in ("A", "B", "C", "D")]
    assert len(expected) == 6 and len(train) + len(test) == 8  # the numeric-key and the E-key rows are dropped
    assert [s.sample_id for s in samples] == [f"arc-easy-{r['id']}" for r, _ in expected]
    assert [s.meta["source_split"] for s in samples] == [split for _, split in expected]
    for s, (r, _) in zip(samples, expected):
        assert s.label == "ABCD".index(r["answerKey"]) and s.meta["answer_letter"] == r["answerKey"]
        assert s.meta["prompt"] == format_mcqa_prompt(r["question"], r["choices"]["text"])
        assert s.input_ids == tok(s.meta["prompt"])["input_ids"] and s.input_ids[0] == tok.bos_token_id
        assert s.meta["n_tokens"] == len(s.input_ids) and s.meta["n_pad"] == 0
    by_id = {s.sample_id: s for s in samples}
    assert by_id["arc-easy-Mercury_0003"].meta["n_choices"] == 3 and "\nD." not in by_id[
        "arc-easy-Mercury_0003"].meta["prompt"]
    assert "\nE. snake\n\nPlease" in by_id["arc-easy-Mercury_0004"].meta["prompt"]  # all choices, like the official


def test_local_layouts_agree(tok):
    reference = [(s.sample_id, s.input_ids, s.label) for s in load_arc_easy(tok, ARC_DIR)]
    assert [(s.sample_id, s.input_ids, s.label) for s in load_arc_easy(tok, ARC_DIR / "ARC-Easy")] == reference
    jsonl = load_arc_easy(tok, FIXTURES / "arc_easy.jsonl")
    assert [(s.sample_id, s.input_ids, s.label) for s in jsonl] == reference
    assert [s.sample_id for s in load_arc_easy(tok, ARC_DIR, limit=2)] == [r[0] for r in reference[:2]]


def test_saved_dataset_dict_folder(tok, tmp_path):
    import datasets

    parts = {split: datasets.Dataset.from_parquet(str(ARC_DIR / "ARC-Easy" / f"{split}-00000-of-00001.parquet"))
             for split in ("train", "test")}
    datasets.DatasetDict(parts).save_to_disk(str(tmp_path / "arc"))
    assert ([s.sample_id for s in load_arc_easy(tok, tmp_path / "arc")]
            == [s.sample_id for s in load_arc_easy(tok, ARC_DIR)])


def test_original_ai2_jsonl_records(tok, tmp_path):
    record = {"id": "Q1", "question": {"stem": "Which is hot?", "choices": [
        {"text": t, "label": l} for t, l in zip(["ice", "fire", "snow", "rain"], "ABCD")]}, "answerKey": "B"}
    path = tmp_path / "ARC-Easy-Train.jsonl"
    path.write_text(__import__("json").dumps(record) + "\n")
    (sample,) = load_arc_easy(tok, path)
    assert sample.meta["prompt"] == PROTOCOL_PROMPT.format(question="Which is hot?", a="ice", b="fire", c="snow",
                                                           d="rain")
    assert sample.label == 1


@pytest.mark.parametrize("token, letter", [
    ("A", "A"), ("ĠB", "B"), ("▁C", "C"), ("D", "D"), ("E", None), ("Ġis", None), ("", None), (None, None),
    ("ĠUSA", "A"),  # the official rule reads any token ending in a letter A-D
])
def test_answer_letter_is_the_last_character(token, letter):
    assert answer_letter_from_token(token) == letter


def test_predicted_letter_uses_the_token_string(tok):
    assert predicted_letter(tok, VOCAB["C"]) == "C"
    assert predicted_letter(tok, VOCAB["Answer"]) is None


def test_select_correct_keeps_first_correct_and_stops_early(tok):
    samples = load_arc_easy(tok, ARC_DIR)  # answers B A C D A C
    predictions = ["B", "C", None, "D", "A", "C"]
    assert [s.sample_id for s in select_correct(samples, predictions)] == [
        samples[i].sample_id for i in (0, 3, 4, 5)]
    consumed = []

    def lazy():
        for p in predictions:
            consumed.append(p)
            yield p

    kept = select_correct(samples, lazy(), limit=2)
    assert [s.sample_id for s in kept] == [samples[0].sample_id, samples[3].sample_id]
    assert len(consumed) == 4  # the model is not run past the last sample needed
    assert select_correct(samples, predictions, limit=0) == []
    with pytest.raises(BadInputError, match="predictions for"):
        select_correct(samples, predictions[:3])


def test_errors(tok, tmp_path):
    with pytest.raises(MissingDataError, match="not found"):
        load_arc_easy(tok, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingDataError, match="no 'train' split"):
        load_arc_easy(tok, tmp_path / "empty")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "question": "q"}\n')
    with pytest.raises(BadInputError, match="lacks the columns"):
        load_arc_easy(tok, bad)
    with pytest.raises(MissingDataError) as err:  # the hub under HF_DATASETS_OFFLINE=1 (tests/conftest.py)
        load_arc_easy(tok)
    assert "\n" not in str(err.value)
    with pytest.raises(BadInputError):
        load_arc_easy(tok, ARC_DIR, limit=-3)
