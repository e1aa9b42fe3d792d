"""Wikipedia next-token loader (docs/protocol.md section 2) on two tiny shards in the hub's parquet layout."""
import inspect
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from palrp_bench.data.synthetic_text import load_tiny_tokenizer
from palrp_bench.data.wikipedia import load_wikipedia
from palrp_bench.errors import BadInputError, MissingDataError

FIXTURES = Path(__file__).resolve().parent / "fixtures_text"
WIKI_DIR = FIXTURES / "wikipedia"
SHARDS = sorted((WIKI_DIR / "20231101.en").glob("train-*.parquet"))


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer()


def articles():
    return [r for shard in SHARDS for r in pq.read_table(shard).to_pylist()]


def test_official_defaults():
    params = inspect.signature(load_wikipedia).parameters
    assert params["limit"].default == 2500 and params["max_length"].default == 512


def test_articles_in_shard_order_truncated_with_bos(tok):
    rows = articles()
    samples = load_wikipedia(tok, WIKI_DIR, limit=None, max_length=20)
    assert [s.sample_id for s in samples] == [f"wiki-{r['id']}" for r in rows]
    assert [s.meta["title"] for s in samples] == [r["title"] for r in rows]
    assert [s.meta["url"] for s in samples] == [r["url"] for r in rows]
    for s, r in zip(samples, rows):
        full = tok(r["text"])["input_ids"]
        assert s.input_ids == full[:20] and s.input_ids[0] == tok.bos_token_id and s.label is None
        assert s.meta["truncated"] == (len(full) > 20) and s.meta["n_tokens"] == len(s.input_ids)
    assert [s.meta["truncated"] for s in samples].count(True) == 1  # the long "Autism" article


def test_limit_crosses_shards_and_single_file(tok):
    assert [s.sample_id for s in load_wikipedia(tok, WIKI_DIR, limit=4, max_length=64)] == [
        "wiki-12", "wiki-25", "wiki-39", "wiki-290"]
    assert [s.sample_id for s in load_wikipedia(tok, SHARDS[1], limit=None)] == ["wiki-290", "wiki-303", "wiki-305"]
    assert load_wikipedia(tok, WIKI_DIR, limit=0) == []


def test_jsonl_copy_and_duplicate_ids(tok, tmp_path):
    rows = articles()
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert ([s.input_ids for s in load_wikipedia(tok, path, limit=None)]
            == [s.input_ids for s in load_wikipedia(tok, WIKI_DIR, limit=None)])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:2] + rows[:1]))
    with pytest.raises(BadInputError, match="twice"):
        load_wikipedia(tok, path, limit=None)


def test_errors(tok, tmp_path):
    with pytest.raises(MissingDataError, match="train-00000-of-00041"):
        load_wikipedia(tok, tmp_path / "nothing")
    with pytest.raises(BadInputError, match="max_length"):
        load_wikipedia(tok, WIKI_DIR, max_length=1)
    with pytest.raises(MissingDataError) as err:  # hub with HF_DATASETS_OFFLINE=1 (tests/conftest.py)
        load_wikipedia(tok)
    assert "\n" not in str(err.value)
