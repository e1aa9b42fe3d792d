"""IMDB loader (docs/protocol.md section 2) on the 20-row Kaggle-format CSV and the Hugging Face-format parquet."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from palrp_bench.data.imdb import IMDB_LABELS, imdb_splits, load_imdb, official_split_indices
from palrp_bench.data.synthetic_text import EOS_ID, load_tiny_tokenizer
from palrp_bench.data.text_common import attention_mask
from palrp_bench.errors import BadInputError, MissingDataError, PalrpError

FIXTURES = Path(__file__).resolve().parent / "fixtures_text"
CSV = FIXTURES / "imdb" / "IMDB Dataset.csv"
HF_DIR = FIXTURES / "imdb_hf"


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer()


def sklearn_split():
    from sklearn.model_selection import train_test_split

    frame = pd.read_csv(CSV)
    return train_test_split(frame, test_size=0.3, random_state=42)


def test_official_split_indices_equal_sklearn_train_test_split():
    from sklearn.model_selection import train_test_split

    for n in (20, 50_000, 7):
        train, test = official_split_indices(n)
        ref_train, ref_test = train_test_split(np.arange(n), test_size=0.3, random_state=42)
        assert np.array_equal(train, ref_train) and np.array_equal(test, ref_test)


def test_kaggle_test_rows_are_the_official_selection_in_order(tok):
    _, df_test = sklearn_split()
    samples = load_imdb("kaggle_csv", CSV, split="test", limit=None, tokenizer=tok, max_length=64)
    assert len(samples) == len(df_test) == 6
    assert [s.sample_id for s in samples] == [f"imdb-test-{i:05d}" for i in range(6)]
    assert [s.meta["text"] for s in samples] == df_test["review"].tolist()
    assert [s.meta["csv_row"] for s in samples] == df_test.index.tolist()
    # official mapping: positive -> 0, everything else (negative) -> 1
    assert [s.label for s in samples] == [0 if v == "positive" else 1 for v in df_test["sentiment"]]
    assert IMDB_LABELS[0] == "positive"


def test_limit_keeps_the_first_rows_and_train_split(tok):
    df_train, _ = sklearn_split()
    full = load_imdb(path=CSV, split="train", limit=None, tokenizer=tok, max_length=64)
    first = load_imdb(path=CSV, split="train", limit=5, tokenizer=tok, max_length=64)
    assert len(full) == len(df_train) == 14
    assert [s.meta["text"] for s in full] == df_train["review"].tolist()
    assert [(s.sample_id, s.input_ids) for s in first] == [(s.sample_id, s.input_ids) for s in full[:5]]
    assert [s.sample_id for s in full] == [f"imdb-train-{i:05d}" for i in range(14)]


def test_right_padding_with_eos_and_truncation_including_bos(tok):
    max_length = 16
    samples = [s for split in ("train", "test")
               for s in load_imdb(path=CSV, split=split, limit=None, tokenizer=tok, max_length=max_length)]
    assert any(s.meta["truncated"] for s in samples) and not all(s.meta["truncated"] for s in samples)
    for s in samples:
        full = tok(s.meta["text"])["input_ids"]
        n = s.meta["n_tokens"]
        assert len(s.input_ids) == max_length and s.input_ids[0] == tok.bos_token_id
        assert s.input_ids[:n] == full[:max_length]
        assert n == min(len(full), max_length)
        assert s.meta["truncated"] == (len(full) > max_length)
        assert s.meta["n_pad"] == max_length - n
        assert s.input_ids[n:] == [EOS_ID] * s.meta["n_pad"]  # pad = eos
        assert attention_mask(s) == [1] * n + [0] * (max_length - n)


def test_no_padding_keeps_real_tokens_only(tok):
    samples = load_imdb(path=CSV, split="test", limit=None, tokenizer=tok, max_length=16, pad_to_max=False)
    assert all(len(s.input_ids) == s.meta["n_tokens"] <= 16 and s.meta["n_pad"] == 0 for s in samples)
    assert len({len(s.input_ids) for s in samples}) > 1


def test_default_location_comes_from_palrp_data_dir(tok, monkeypatch):
    monkeypatch.setenv("PALRP_DATA_DIR", str(FIXTURES))
    assert len(load_imdb(limit=3, tokenizer=tok, max_length=32)) == 3


def test_imdb_splits_holdout_is_carved_from_train(tok):
    splits = imdb_splits(tok, path=CSV, train_size=10, validation_size=3, max_length=32)
    train_part = load_imdb(path=CSV, split="train", limit=None, tokenizer=tok, max_length=32)
    test_ids = {s.sample_id for s in load_imdb(path=CSV, split="test", limit=None, tokenizer=tok, max_length=32)}
    assert splits.validation_kind == "train_holdout"
    assert [s.sample_id for s in splits.train] == [s.sample_id for s in train_part[:10]]
    assert [s.sample_id for s in splits.validation] == [s.sample_id for s in train_part[10:13]]
    assert not ({s.sample_id for s in splits.validation} & test_ids)


def test_imdb_splits_official_test_selection(tok):
    splits = imdb_splits(tok, path=CSV, train_size=5, validation="official_test", max_length=32)
    test = load_imdb(path=CSV, split="test", limit=None, tokenizer=tok, max_length=32)
    assert [s.sample_id for s in splits.validation] == [s.sample_id for s in test]
    with pytest.raises(BadInputError, match="no IMDB rows left"):
        imdb_splits(tok, path=CSV, train_size=14, max_length=32)


def test_hf_source_from_local_parquet(tok):
    samples = load_imdb("hf", HF_DIR, split="test", limit=None, tokenizer=tok, max_length=32)
    raw = pd.read_parquet(HF_DIR / "plain_text" / "test-00000-of-00001.parquet")
    order = np.random.RandomState(42).permutation(len(raw))
    assert [s.sample_id for s in samples] == [f"imdb-hf-test-{r:05d}" for r in order]
    assert [s.meta["text"] for s in samples] == raw["text"].iloc[order].tolist()
    # Hugging Face 1 = pos maps to our 0 = positive
    assert [s.label for s in samples] == [0 if raw["label"].iloc[r] == 1 else 1 for r in order]
    assert len({s.label for s in samples[:4]}) == 2  # the order mixes the label-sorted split


def test_hf_source_without_data_fails_fast_offline(tok):
    with pytest.raises(MissingDataError) as err:
        load_imdb("hf", None, tokenizer=tok)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kwargs, error, words", [
    ({"path": FIXTURES / "nowhere.csv"}, MissingDataError, "kaggle.com"),
    ({"path": CSV, "split": "validation"}, BadInputError, "split"),
    ({"path": CSV, "source": "imdb"}, BadInputError, "source"),
    ({"path": CSV, "limit": -1}, BadInputError, "limit"),
    ({"path": CSV, "max_length": 1}, BadInputError, "max_length"),
])
def test_user_errors_are_one_line(tok, kwargs, error, words):
    with pytest.raises(error) as err:
        load_imdb(tokenizer=tok, **kwargs)
    assert isinstance(err.value, PalrpError) and "\n" not in str(err.value) and words in str(err.value)


def test_malformed_csv_files(tok, tmp_path):
    wrong_columns = tmp_path / "cols.csv"
    pd.DataFrame({"text": ["a", "b", "c"], "label": [0, 1, 0]}).to_csv(wrong_columns, index=False)
    with pytest.raises(BadInputError, match="lacks the columns"):
        load_imdb(path=wrong_columns, tokenizer=tok)
    bad_label = tmp_path / "labels.csv"
    pd.DataFrame({"review": ["good", "bad", "meh"], "sentiment": ["positive", "negative", "neutral"]}).to_csv(
        bad_label, index=False)
    with pytest.raises(BadInputError, match="neutral"):
        load_imdb(path=bad_label, tokenizer=tok)
    empty = tmp_path / "empty.csv"
    pd.DataFrame({"review": [" ", " ", "bad film"], "sentiment": ["positive", "negative", "negative"]}).to_csv(
        empty, index=False)
    with pytest.raises(BadInputError, match="empty text"):
        load_imdb(path=empty, split="train", limit=None, tokenizer=tok)
    with pytest.raises(BadInputError, match="tokenizer"):
        load_imdb(path=CSV, tokenizer="meta-llama/Llama-2-7b-hf")


def test_the_pool_is_tokenised_when_used_with_the_ids_of_one_call_per_review(tok):
    """``load_imdb`` checks every text at once but tokenises a review when it is first used, many per tokenizer
    call; the ids (BOS, truncation including BOS, EOS padding) are those of one tokenizer call per review."""
    from data.test_text_common import _one_call_per_text

    for source, path in (("kaggle_csv", CSV), ("hf", HF_DIR)):
        for max_length, pad in ((16, True), (64, True), (16, False)):
            pool = load_imdb(source, path, split="train", limit=None, tokenizer=tok, max_length=max_length,
                             pad_to_max=pad)
            assert pool.n_tokenised == 0 and len(pool.sample_ids) == len(pool)
            assert pool[3].sample_id == pool.sample_ids[3] and pool.n_tokenised == 1
            for s in pool:
                ids, cut = _one_call_per_text(tok, s.meta["text"], max_length)
                assert s.input_ids[:s.meta["n_tokens"]] == ids and s.meta["truncated"] == cut
                assert s.input_ids[len(ids):] == ([EOS_ID] * (max_length - len(ids)) if pad else [])
            assert pool.n_tokenised == len(pool)
