"""Shared text helpers: BOS handling, batched tokenising, lazy pools, padding, local formats and the never-hanging
hub access."""
import time
from pathlib import Path

import pytest

from palrp_bench.data import text_common as tc
from palrp_bench.data.synthetic_text import VOCAB, build_tiny_tokenizer
from palrp_bench.errors import BadInputError, MissingDataError


def tokenizer_without_bos_post_processor():
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"\w+|[^\w\s]|\n"), behavior="removed", invert=True)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def test_encode_keeps_the_tokenizer_bos_and_truncates_including_it():
    tok = build_tiny_tokenizer()
    ids, cut = tc.encode_with_bos(tok, "the film was superb", max_length=None, what="x")
    assert ids == [VOCAB[w] for w in ("<s>", "the", "film", "was", "superb")] and not cut
    ids, cut = tc.encode_with_bos(tok, "the film was superb", max_length=3, what="x")
    assert ids == [VOCAB["<s>"], VOCAB["the"], VOCAB["film"]] and cut
    ids, cut = tc.encode_with_bos(tok, "the film", max_length=3, what="x")
    assert len(ids) == 3 and not cut


def test_encode_prepends_bos_when_the_tokenizer_does_not():
    tok = tokenizer_without_bos_post_processor()
    assert tok("the film")["input_ids"] == [VOCAB["the"], VOCAB["film"]]
    ids, cut = tc.encode_with_bos(tok, "the film was superb", max_length=3, what="x")
    assert ids == [VOCAB["<s>"], VOCAB["the"], VOCAB["film"]] and cut


def test_truncation_is_the_tokenizers_own():
    """A tokenizer appending EOS keeps it when truncating (official loaders used the tokenizer's truncation)."""
    from tokenizers import processors

    tok = tokenizer_without_bos_post_processor()
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", VOCAB["<s>"]), ("</s>", VOCAB["</s>"])])
    ids, cut = tc.encode_with_bos(tok, "the film was superb", max_length=4, what="x")
    assert ids == [VOCAB["<s>"], VOCAB["the"], VOCAB["film"], VOCAB["</s>"]] and cut


def test_encode_rejects_empty_text_and_tokenizers_without_bos():
    tok = build_tiny_tokenizer()
    with pytest.raises(BadInputError, match="row-7 has an empty text"):
        tc.encode_with_bos(tok, "  \n ", max_length=8, what="row-7")
    tok.bos_token = None
    with pytest.raises(BadInputError, match="no BOS"):
        tc.check_tokenizer(tok)


def test_pad_right_and_attention_mask():
    from palrp_bench.data.base import TextSample

    ids, n_pad = tc.pad_right([1, 5, 6], 6, 2)
    assert ids == [1, 5, 6, 2, 2, 2] and n_pad == 3
    assert tc.attention_mask(TextSample("s", ids, meta={"n_tokens": 3})) == [1, 1, 1, 0, 0, 0]
    with pytest.raises(BadInputError, match="longer than"):
        tc.pad_right([1, 2, 3], 2, 2)


def test_saved_single_dataset_and_json_columns(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"id": ["a", "b"], "text": ["x y", "z"], "extra": [1, 2]}).save_to_disk(
        str(tmp_path / "saved"))
    rows = list(tc.iter_local_records(tmp_path / "saved", "train", ("id", "text"), what="t", how_to_get="h"))
    assert rows == [{"id": "a", "text": "x y"}, {"id": "b", "text": "z"}]
    (tmp_path / "cols.json").write_text('{"id": ["a", "b"], "text": ["x", "y"]}')
    rows = list(tc.iter_local_records(tmp_path / "cols.json", "train", ("id", "text"), what="t", how_to_get="h"))
    assert rows == [{"id": "a", "text": "x"}, {"id": "b", "text": "y"}]


def test_unreachable_hub_fails_fast_with_a_one_line_fix(monkeypatch):
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused at once
    assert not tc.hub_offline("dataset")
    start = time.perf_counter()
    assert not tc.hub_reachable()
    with pytest.raises(MissingDataError) as err:
        tc.load_hub_dataset("allenai/ai2_arc", "ARC-Easy", what="ARC", how_to_get="pass path=<folder>")
    assert time.perf_counter() - start < 2 * tc.HUB_PROBE_TIMEOUT + 1
    message = str(err.value)
    assert "\n" not in message and "pass path=<folder>" in message and "HF_DATASETS_OFFLINE=1" in message


def test_offline_mode_skips_the_probe_and_reports_the_cache(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(tc, "hub_reachable", lambda *a, **k: pytest.fail("probe must not run offline"))
    with pytest.raises(MissingDataError, match="local cache"):
        tc.load_hub_dataset("palrp-bench/definitely-not-cached", what="X", how_to_get="pass path=...")


# --------------------------------------------------------------------- batched tokenising, tokenising what is used
def _one_call_per_text(tok, text, max_length):
    """The per-text path as it was before batching (the reference): one tokenizer call per text, a second with
    the tokenizer's truncation when too long, BOS prepended where the tokenizer adds none."""
    bos = tok.bos_token_id
    full = list(tok(text, add_special_tokens=True)["input_ids"])
    full = full if full and full[0] == bos else [bos] + full
    if max_length is None or len(full) <= max_length:
        return full, False
    cut = list(tok(text, add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"])
    cut = cut if cut and cut[0] == bos else [bos] + cut
    return cut[:max_length], True


def _texts():
    """The IMDB fixture's reviews and the embedded synthetic reviews and MCQA prompts (a word-level tokenizer:
    lengths vary, some reviews are longer than the limits below)."""
    import pandas as pd

    from palrp_bench.data.synthetic_text import make_synthetic_classification, make_synthetic_mcqa

    csv = pd.read_csv(Path(__file__).parent / "fixtures_text" / "imdb" / "IMDB Dataset.csv")
    return (csv["review"].tolist() + [s.meta["text"] for s in make_synthetic_classification(60, seed=5)]
            + [s.meta["prompt"] for s in make_synthetic_mcqa(20, seed=5)])


@pytest.mark.parametrize("make", ["shipped", "no_bos", "appends_eos"])
def test_a_batch_of_texts_gets_the_ids_of_one_call_per_text(make):
    from tokenizers import processors

    tok = build_tiny_tokenizer() if make == "shipped" else tokenizer_without_bos_post_processor()
    if make == "appends_eos":
        tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", VOCAB["<s>"]), ("</s>", VOCAB["</s>"])])
    texts = _texts()
    lengths = [len(_one_call_per_text(tok, t, None)[0]) for t in texts]
    for max_length in (None, 8, sorted(lengths)[len(lengths) // 2], max(lengths)):
        batched = tc.encode_batch_with_bos(tok, texts, max_length=max_length, whats=[str(i) for i in texts])
        assert batched == [_one_call_per_text(tok, t, max_length) for t in texts]
        assert [tc.encode_with_bos(tok, t, max_length=max_length, what="x") for t in texts[:5]] == batched[:5]
    assert any(cut for _, cut in tc.encode_batch_with_bos(tok, texts, max_length=8, whats=texts))
    with pytest.raises(BadInputError, match="row-2 has an empty text"):
        tc.encode_batch_with_bos(tok, ["a film", " "], max_length=8, whats=["row-1", "row-2"])


def test_a_text_pool_tokenises_what_is_touched_in_batches():
    from palrp_bench.data.base import TextSample

    calls = []

    def build(positions):
        calls.append(list(positions))
        return [TextSample(f"s{p}", [1, p]) for p in positions]

    pool = tc.TextPool([f"s{i}" for i in range(600)], build)
    assert len(pool) == 600 and pool.sample_ids[:2] == ["s0", "s1"] and pool.n_tokenised == 0
    assert pool[7].input_ids == [1, 7] and pool[-1].sample_id == "s599" and calls == [[7], [599]]
    view = pool[10:20]
    assert view.sample_ids == [f"s{i}" for i in range(10, 20)] and pool.n_tokenised == 2
    assert [s.input_ids[1] for s in view] == list(range(10, 20)) and calls[-1] == list(range(10, 20))
    assert view[0] is pool[10] and len(calls) == 3  # tokenised once, shared by the view and the pool
    assert [s.sample_id for s in pool][:3] == ["s0", "s1", "s2"] and pool.n_tokenised == 600
    # chunks of TOKENIZE_CHUNK (256) positions, each one call for what it still lacks
    assert [len(c) for c in calls[3:]] == [256 - 11, 256, 600 - 2 * 256 - 1] and tc.TOKENIZE_CHUNK == 256
    with pytest.raises(IndexError):
        pool[600]
    with pytest.raises(BadInputError, match="contains the id 's1' twice"):
        tc.check_unique_ids(tc.TextPool(["s0", "s1", "s1"], build), "pool")
