"""The needle in a haystack's samples (data/needle.py, docs/evidence.md "Needle in a haystack"): depth placement in
tokens by its rule, exact lengths, the value and key masks exactly the needle's tokens, for a word-level tokenizer and
a byte-level BPE that splits the space before a number off (LLaMA-3's way); the corpus formats and their one-line
errors; the grid's options."""
import json
import logging
import math

import pandas as pd
import pytest

from palrp_bench.data import needle as nd
from palrp_bench.data.evidence_common import read_evidence_jsonl, render, save_evidence_jsonl
from palrp_bench.data.registry import dataset_spec, load_dataset
from palrp_bench.errors import BadInputError, MissingDataError
from palrp_bench.evaluation.tasks.evidence import evaluation_masks, prepare_evidence, word_token

#: a corpus of four-token sentences ("The farmer walked ." ...): sentences start at every fourth token
SENTENCES = " ".join(f"The {p} {v.split()[0]}." for p, v in zip(nd.FILLER_PEOPLE * 40, nd.FILLER_VERBS * 40))
#: a corpus without punctuation: every token starts a word
WORDS = " ".join(nd.FILLER_PLACES * 200)


@pytest.fixture(scope="module")
def word_level():
    return nd.build_needle_tokenizer()


@pytest.fixture(scope="module")
def byte_bpe():
    """A byte-level BPE whose pre-tokenizer isolates runs of up to three digits (LLaMA-3's rule), so " 4829" is
    the tokens " ", "482", "9"."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}{1,3}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|begin|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = list(__import__("itertools").islice(nd.filler_documents(0), 50))
    texts += [nd.QUESTION_TEMPLATE.format(key=k) for k in nd.NEEDLE_KEYS] + ["The special magic number for is"] * 20
    backend.train_from_iterator(texts, trainer)
    from tokenizers import processors

    backend.post_processor = processors.TemplateProcessing(single="<|begin|> $A", special_tokens=[
        ("<|begin|>", backend.token_to_id("<|begin|>"))])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|begin|>", eos_token="<|begin|>")


def _samples(tokenizer, corpus, **options):
    grid = dict(lengths=[96, 160], depths=[0.0, 0.1, 0.25, 0.5, 0.77, 0.9, 1.0], n=2, value_digits=7)
    grid.update(options)
    return nd.make_needle_samples(tokenizer, [corpus], **grid)


@pytest.mark.parametrize("align,corpus", [("word", WORDS), ("sentence", SENTENCES)])
def test_depth_is_placed_in_tokens_by_the_rule(word_level, align, corpus):
    samples = _samples(word_level, corpus, align=align)
    assert len(samples) == 2 * 7 * 2
    for s in samples:
        m = s.meta
        h, k = m["haystack_tokens"], m["depth_tokens"]
        assert m["n_tokens"] == m["length"] and len(word_level(render(s, "causal").text)["input_ids"]) == m["length"]
        assert m["needle_token"] == 1 + k  # BOS, then k haystack tokens
        nominal = math.floor(m["depth"] * h + 0.5)
        if m["depth"] in (0.0, 1.0):
            assert k == nominal
        elif align == "word":
            assert k == nominal  # every token starts a word
        else:  # the sentence nominal falls in: sentences of four tokens from the window's start (a multiple of 4)
            assert k == 4 * (nominal // 4)
        ids = word_level(render(s, "causal").text)["input_ids"]
        tokens = word_level.convert_ids_to_tokens(ids)
        assert tokens[m["needle_token"]:m["needle_token"] + 5] == ["The", "special", "magic", "number", "for"]


def test_the_masks_are_the_value_and_the_key_exactly(word_level):
    s = _samples(word_level, SENTENCES, lengths=[128], depths=[0.5], n=1)[0]
    (p,), dropped = prepare_evidence([s], word_level, "causal", None)
    assert dropped == {} and p.retrieval
    tokens = word_level.convert_ids_to_tokens(p.input_ids)
    needle = s.meta["needle_token"]
    value = [i for i, e in enumerate(p.evidence) if e]
    assert value == list(range(needle + 7, needle + 14))  # "The special magic number for KEY is" then 7 digits
    assert "".join(tokens[i] for i in value) == s.meta["value"]
    masks = evaluation_masks(p)
    assert set(masks) == {"default", "with_special", "with_question", "key"}
    valid, key = masks["key"]
    assert valid == masks["default"][0] and [i for i, e in enumerate(key) if e] == [needle + 5]
    assert tokens[needle + 5] == s.meta["key"] and tokens.count(s.meta["key"]) == 3  # needle and twice in the question
    default = [i for i, v in enumerate(masks["default"][0]) if v]
    assert default == list(range(1, 1 + s.meta["haystack_tokens"] + 15))  # the context: haystack and needle
    assert masks["with_question"][0] == [True] * 0 + [False] + [True] * (len(p) - 1)
    assert p.position == len(p) - 1 and tokens[-1] == "is" and p.target_id == word_level.convert_tokens_to_ids(
        s.meta["value"][0])


def test_a_bpe_ends_the_prompt_with_the_space_the_number_needs(byte_bpe):
    assert byte_bpe.convert_ids_to_tokens(byte_bpe(" 4829173", add_special_tokens=False)["input_ids"])[0] == "Ġ"
    samples = _samples(byte_bpe, "\n\n".join([SENTENCES] * 3), lengths=[150, 300], depths=[0.0, 0.3, 1.0], n=2)
    for s in samples:
        assert s.meta["n_tokens"] == s.meta["length"] and s.question.endswith(" is ")
        (p,), dropped = prepare_evidence([s], byte_bpe, "causal", None)
        assert dropped == {}
        tokens = byte_bpe.convert_ids_to_tokens(p.input_ids)
        assert len(p) == s.meta["length"] and tokens[-1] == "Ġ"  # the value's first token comes next
        assert p.target_id == word_token(byte_bpe, s.target, single=False)
        assert p.target_id == byte_bpe(s.meta["value"], add_special_tokens=False)["input_ids"][0]
        value = byte_bpe.decode([i for i, e in zip(p.input_ids, p.evidence) if e])
        assert value == s.meta["value"]  # the digits' tokens, not the space before them
        key = [t for t, e in zip(p.input_ids, evaluation_masks(p)["key"][1]) if e]
        assert byte_bpe.decode(key).strip() == s.meta["key"]
        assert byte_bpe.decode(p.input_ids[s.meta["needle_token"]:]).lstrip().startswith("The special magic")


def test_the_grid_keeps_each_needle_and_haystack_across_lengths_and_depths(word_level):
    samples = _samples(word_level, SENTENCES)
    ids = [s.sample_id for s in samples]
    assert len(set(ids)) == len(ids) and ids[:3] == ["needle-s0-L96-d0-000", "needle-s0-L96-d10-000",
                                                     "needle-s0-L96-d25-000"]
    for r in (0, 1):
        mine = [s for s in samples if s.meta["replicate"] == r]
        assert len({(s.meta["key"], s.meta["value"], s.target, s.foil) for s in mine}) == 1
        first = {s.meta["length"]: s.context.split(" The special")[0] for s in mine if s.meta["depth"] == 1.0}
        assert first[160].startswith(first[96])  # the shorter haystack is the longer one's beginning
    assert samples[0].foil[0] != samples[0].target[0] and len(samples[0].foil) == 7
    assert len(_samples(word_level, SENTENCES, limit=5)) == 5


def test_evidence_records_with_extra_masks_round_trip(tmp_path, word_level):
    samples = _samples(word_level, SENTENCES, lengths=[96], depths=[0.5], n=2)
    path = save_evidence_jsonl(samples, tmp_path / "needles.jsonl")
    back = list(read_evidence_jsonl((json.loads(line) for line in path.read_text().splitlines()), "needle", "f"))
    assert [b.to_json() for b in back] == [s.to_json() for s in samples]


# ------------------------------------------------------------------------------------------------ corpora
def _write(path, fmt, texts, field="text"):
    if fmt == "txt":
        path.write_text("\n\n".join(texts))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps({"id": i, field: t}) + "\n" for i, t in enumerate(texts)))
    elif fmt == "parquet":
        pd.DataFrame({"id": range(len(texts)), field: texts}).to_parquet(path)
    return path


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "parquet"])
def test_every_corpus_format_gives_the_same_haystack(tmp_path, word_level, fmt):
    docs = [SENTENCES[:600], SENTENCES[600:1500], SENTENCES[1500:]]
    path = _write(tmp_path / f"corpus.{fmt}", fmt, docs)
    assert list(nd.corpus_documents(path)) == (["\n\n".join(docs)] if fmt == "txt" else docs)
    options = {"lengths": [96], "depths": [0.5], "n": 2, "value_digits": 5}
    pool = load_dataset("needle", path=str(path), options=options, tokenizer=word_level)
    reference = nd.make_needle_samples(word_level, docs, lengths=[96], depths=[0.5], n=2, value_digits=5,
                                       source=fmt)
    assert [s.context for s in pool] == [s.context for s in reference]
    assert pool.source == str(path) and pool[0].meta["source"] == fmt


def test_the_hub_layout_of_wikipedia_is_a_corpus(word_level):
    """The shards of ``wikimedia/wikipedia`` (the loader tests' fixture): every article's text, shard by shard."""
    from pathlib import Path

    folder = Path(__file__).resolve().parent / "fixtures_text" / "wikipedia"
    texts = pd.concat(pd.read_parquet(f) for f in sorted(folder.rglob("*.parquet")))["text"].tolist()
    assert list(nd.corpus_documents(folder)) == texts
    (s,) = load_dataset("needle", path=str(folder), options={"lengths": [96], "depths": [1.0], "n": 1},
                        tokenizer=word_level)
    assert s.meta["n_tokens"] == 96 and s.context.startswith(texts[0][:20])


def test_a_folder_is_every_corpus_file_in_order_and_text_field_picks_the_column(tmp_path):
    _write(tmp_path / "b.jsonl", "jsonl", ["second"], field="body")
    _write(tmp_path / "a.txt", "txt", ["first"])
    (tmp_path / "notes.md").write_text("ignored")
    assert list(nd.corpus_documents(tmp_path, "body")) == ["first", "second"]


@pytest.mark.parametrize("make,error,needle", [
    (lambda p: p / "missing.txt", MissingDataError, "does not exist"),
    (lambda p: (p / "c.md").write_text("x") and p / "c.md", BadInputError, "is a .md file, not one of"),
    (lambda p: _write(p / "c.jsonl", "jsonl", ["x"], field="body"), BadInputError, "lacks the columns ['text']"),
    (lambda p: (p / "c.jsonl").write_text('{"text": 3}\n') and p / "c.jsonl", BadInputError, "holds int, not text"),
    (lambda p: (p / "c.txt").write_bytes(b"\xff\xfe\x00a") and p / "c.txt", BadInputError, "is not UTF-8 text"),
    (lambda p: (p / "empty").mkdir() or p / "empty", MissingDataError, "holds no .txt/"),
])
def test_bad_corpora_are_one_line_errors(tmp_path, word_level, make, error, needle):
    path = make(tmp_path)
    with pytest.raises(error) as caught:
        load_dataset("needle", path=str(path), options={"lengths": [64], "depths": [0.5], "n": 1},
                     tokenizer=word_level)
    assert needle in caught.value.problem and "\n" not in str(caught.value) and caught.value.fix
    if "lacks the columns" in needle:
        assert "task.options.text_field" in caught.value.fix


def test_a_corpus_without_text_and_a_short_one(tmp_path, word_level, caplog):
    with pytest.raises(BadInputError, match="holds no text"):
        load_dataset("needle", path=str(_write(tmp_path / "e.txt", "txt", ["  "])), options={"lengths": [64]},
                     tokenizer=word_level)
    short = _write(tmp_path / "s.txt", "txt", ["The farmer walked. The sailor waited."])
    with caplog.at_level(logging.WARNING):
        pool = load_dataset("needle", path=str(short), options={"lengths": [64], "depths": [0.5], "n": 2},
                            tokenizer=word_level)
    assert "fewer than the" in caplog.text and "it is repeated" in caplog.text
    assert [s.meta["n_tokens"] for s in pool] == [64, 64]


@pytest.mark.parametrize("options,needle", [
    ({"lengths": [0, 64]}, "task.options.lengths must be a list of positive token counts"),
    ({"lengths": 64}, "must be list or tuple"),
    ({"depths": [0.5, 1.5]}, "task.options.depths must be a list of fractions in [0, 1]"),
    ({"depths": [0.5, 0.5]}, "repeat a value"),
    ({"n": 0}, "task.options.n must be an int in [1, inf]"),
    ({"align": "token"}, "task.options.align must be one of"),
])
def test_bad_grid_options_are_one_line_errors(word_level, options, needle):
    with pytest.raises(BadInputError) as caught:
        load_dataset("needle", options=options, tokenizer=word_level)
    assert needle in caught.value.problem and "\n" not in str(caught.value)


def test_a_length_without_room_for_a_haystack_is_refused(word_level):
    with pytest.raises(BadInputError, match="needle length 20 leaves no haystack") as caught:
        load_dataset("needle", options={"lengths": [20]}, tokenizer=word_level)
    assert "task.options.lengths of at least" in caught.value.fix


def test_the_spec_prices_the_grid():
    spec = dataset_spec("needle")
    options = spec.resolve_options({"lengths": [4096, 32768], "n": 3})
    assert spec.pool(options) == 2 * 11 * 3 and spec.mean_tokens(options) == (4096 + 32768) / 2
    assert spec.longest(options) == 32768
    assert spec.pool(spec.resolve_options({"lengths": [-1]})) is None  # the preflight reports it (requirements)


def test_the_filler_has_no_digit_and_no_word_of_the_needle():
    import itertools

    text = " ".join(itertools.islice(nd.filler_documents(3), 200)).split()
    assert not any(c.isdigit() for w in text for c in w)
    assert not {"is", "special", "magic", "number", *nd.NEEDLE_KEYS} & set(w.strip(".") for w in text)
    assert set(w.strip(".") for w in text) <= set(nd.NEEDLE_VOCAB)
