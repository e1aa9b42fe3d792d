"""Evidence data (docs/evaluation.md, "Evidence data"): the record, the sva / ra / qa loaders on fixtures of every
accepted format (tests/data/fixtures_text/evidence), the drops, the spaCy builder's span logic and its refusal, and
the character-span to token mapping under word-level, byte-level BPE and WordPiece tokenizers built here."""
import gzip
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from palrp_bench.data import evidence_parse as ep
from palrp_bench.data.evidence_common import (DROP_REASONS, Dropped, EvidencePool, EvidenceSample, collect_pool,
                                              first_word, format_qa_prompt, read_evidence_jsonl, render,
                                              save_evidence_jsonl, tokens_overlapping, word_span)
from palrp_bench.data.ra import load_ra, split_minimal_pair
from palrp_bench.data.registry import DATASETS, load_dataset
from palrp_bench.data.squad import iter_squad, load_qa, load_squad_attnlrp, paragraph_foils
from palrp_bench.data.sva import load_sva, other_number
from palrp_bench.errors import BadInputError, MissingDataError

FIXTURES = Path(__file__).resolve().parent / "fixtures_text" / "evidence"
SQUAD_JSON = FIXTURES / "dev-v2.0.json"


def _check_record(s: EvidenceSample):
    """What every kept sample guarantees: evidence inside its field; sva / ra sentences rebuild from the parts."""
    assert s.evidence and all(0 <= a < b <= len(s.evidence_text) for a, b in s.evidence)
    assert s.target and s.foil and s.target.lower() != s.foil.lower()
    assert s.meta["source"] and s.meta["evidence_source"]


# ------------------------------------------------------------------------------------------------ sva
def test_sva_linzen_tsv_uses_subj_index_and_inflects_the_foil():
    pool = load_sva(FIXTURES / "agr_50_mostcommon_10K.tsv")
    assert isinstance(pool, EvidencePool) and pool.source == "linzen_tsv"
    assert [(s.prefix, s.target, s.foil, s.evidence_words, s.suffix) for s in pool] == [
        ("the keys to the cabinet", "are", "is", ["keys"], " on the table ."),
        ("the author of the books about the wars", "lives", "live", ["author"], " in paris ."),
        ("the company , which employs dozens of workers ,", "has", "have", ["company"], " offices in ohio ."),
        ("the studies", "carry", "carries", ["studies"], " weight ."),
        ("the cat", "watches", "watch", ["cat"], " the birds .")]
    assert pool.dropped == {"empty_evidence": 1}  # "there are many reasons": the subject follows the verb
    for s in pool:
        _check_record(s)
        assert s.meta["evidence_source"] == "file:subj_index" and s.sample_id.startswith("sva-")
    assert pool[1].meta["n_attractors"] == 2 and pool[0].sentence == "the keys to the cabinet are on the table ."


def test_sva_linzen_gz_limit_and_registry(tmp_path):
    gz = tmp_path / "agr_50_mostcommon_10K.tsv.gz"
    gz.write_bytes(gzip.compress((FIXTURES / "agr_50_mostcommon_10K.tsv").read_bytes()))
    full = load_sva(FIXTURES / "agr_50_mostcommon_10K.tsv")
    assert [s.sample_id for s in load_sva(tmp_path)] == [s.sample_id for s in full]  # a folder holding the .gz
    assert [s.sample_id for s in load_dataset("sva", path=str(gz), limit=2)] == [s.sample_id for s in full[:2]]
    assert load_sva(gz, limit=0) == []
    with pytest.raises(BadInputError, match="unknown option"):
        load_dataset("sva", path=str(gz), options={"max_len": 3})


@pytest.mark.parametrize("verb, pos, other", [
    ("is", "VBZ", "are"), ("are", "VBP", "is"), ("has", "VBZ", "have"), ("goes", "VBZ", "go"),
    ("applies", "VBZ", "apply"), ("dies", "VBZ", "die"), ("watches", "VBZ", "watch"), ("passes", "VBZ", "pass"),
    ("runs", "VBZ", "run"), ("carry", "VBP", "carries"), ("play", "VBP", "plays"), ("fix", "VBP", "fixes"),
    ("run", "VBP", "runs")])
def test_other_number(verb, pos, other):
    assert other_number(verb, pos) == other


def test_sva_goldberg_tsv_needs_the_parser_and_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(ep, "load_parser", _refuse)
    with pytest.raises(MissingDataError) as err:
        load_sva(FIXTURES / "lgd_dataset.tsv")
    message = str(err.value)
    assert "\n" not in message and 'pip install -e ".[evidence]" && python -m spacy download en_core_web_sm' in message


def test_sva_goldberg_tsv_with_a_parse(monkeypatch):
    monkeypatch.setattr(ep, "parse", _fake_pipe)
    pool = load_sva(FIXTURES / "lgd_dataset.tsv")
    assert pool.source == "goldberg_tsv" and pool.dropped == {}
    assert [(s.prefix, s.target, s.foil, s.evidence_words) for s in pool][:3] == [
        ("the keys to the cabinet", "are", "is", ["keys"]),
        ("a 1770s map of philadelphia 's naval defenses", "shows", "show", ["map"]),
        ("the author of the books about the wars", "lives", "live", ["author"])]
    assert pool[3].evidence_words == ["genes"] and pool[0].suffix == " on the table ."
    assert pool[4].sample_id == pool[0].sample_id + "-1"  # the repeated row keeps a distinct, stable id
    for s in pool:
        _check_record(s)
        assert s.meta["evidence_source"] == "parser:spacy/en_core_web_sm" and s.meta["source"] == "goldberg_tsv"


def test_sva_other_formats_name_the_missing_fields(tmp_path):
    bad = tmp_path / "other.tsv"
    bad.write_text("sentence\torig_sentence\tverb_index\tverb_pos\nthe dog runs\tthe dog runs\t3\tVBZ\n")
    with pytest.raises(BadInputError, match=r"lacks the columns \['subj_index'\]"):
        load_sva(bad)
    bad.write_text("sentence\tverb\nthe dog runs\truns\n")
    with pytest.raises(BadInputError, match=r"neither Goldberg's TSV .* nor Linzen's .*'orig_sentence', 'verb_index'"):
        load_sva(bad)
    with pytest.raises(MissingDataError, match="lgd_dataset.tsv"):
        load_sva(None)
    with pytest.raises(MissingDataError, match="lgd_dataset.tsv"):
        load_sva(tmp_path / "missing.tsv")


# ------------------------------------------------------------------------------------------------ ra
RA_EXPECTED = [("Susan revealed", "herself", "themselves", ["Susan"]),
               ("Many teenagers were helping", "themselves", "herself", ["teenagers"]),
               ("A lot of girls had bothered", "themselves", "himself", ["lot"]),
               ("Renee hasn't hurt", "herself", "themselves", ["Renee"]),
               ("The Borgias scare", "themselves", "himself", ["Borgias"]),
               ("All senators listened to", "themselves", "itself", ["senators"])]


#: the phrase evidence of the same rows: the noun chunk of the parse (spaCy's English chunks stop "A lot of girls" at
#: "A lot"), Ferrando et al.'s target_phrase in their CSV
RA_PHRASES = [["Susan"], ["Many teenagers"], ["A lot"], ["Renee"], ["The Borgias"], ["All senators"]]
CSV_PHRASES = [["Susan"], ["Many teenagers"], ["A lot of girls"], ["Renee"], ["All senators"]]


@pytest.mark.parametrize("evidence", ["head", "phrase"])
def test_ra_blimp_with_targets_csv(evidence):
    pool = load_dataset("ra", path=str(FIXTURES / "blimp_with_targets" / "anaphor_number_agreement.csv"),
                        options={"evidence": evidence})
    expected = [e for e in RA_EXPECTED if e[3] != ["Borgias"]]  # its target is NA: dropped
    words = [e[3] for e in expected] if evidence == "head" else CSV_PHRASES
    assert [(s.prefix, s.target, s.foil, s.evidence_words) for s in pool] == [(*e[:3], w)
                                                                            for e, w in zip(expected, words)]
    assert pool.dropped == {"empty_evidence": 1}
    assert [s.sample_id for s in pool] == [f"ra-anaphor_number_agreement-{i}" for i in (0, 1, 2, 3, 5)]
    for s in pool:
        _check_record(s)
        assert s.suffix == "." and s.meta["evidence_unit"] == evidence
        assert s.meta["evidence_source"] == ("file:target" if evidence == "head" else "file:target_phrase")


@pytest.mark.parametrize("evidence", ["head", "phrase"])
@pytest.mark.parametrize("layout", ["jsonl", "folder", "hub_parquet"])
def test_ra_blimp_jsonl_and_hub_parquet_with_a_parse(monkeypatch, layout, evidence):
    monkeypatch.setattr(ep, "parse", _fake_pipe)
    path = {"jsonl": FIXTURES / "anaphor_number_agreement.jsonl", "folder": FIXTURES,
            "hub_parquet": FIXTURES / "blimp"}[layout]
    pool = load_dataset("ra", path=str(path), options={"evidence": evidence})
    words = [e[3] for e in RA_EXPECTED] if evidence == "head" else RA_PHRASES
    assert [(s.prefix, s.target, s.foil, s.evidence_words) for s in pool] == [(*e[:3], w)
                                                                            for e, w in zip(RA_EXPECTED, words)]
    assert [s.sentence for s in pool] == [r["sentence_good"] for r in _blimp_rows()]
    assert all(s.meta["evidence_source"] == "parser:spacy/en_core_web_sm" for s in pool)


def test_ra_defaults_to_the_phrase_and_maps_it_to_every_token_of_the_phrase(monkeypatch):
    """The default ra evidence is the antecedent's noun phrase; through the evidence task's tokenisation every token
    of the phrase is evidence (word-level, byte-level BPE and WordPiece tokenizers)."""
    from palrp_bench.evaluation.tasks.evidence import prepare_evidence

    monkeypatch.setattr(ep, "parse", _fake_pipe)
    pool = load_dataset("ra", path=str(FIXTURES / "anaphor_number_agreement.jsonl"))
    assert [s.evidence_words for s in pool] == RA_PHRASES and pool[1].meta["evidence_unit"] == "phrase"
    for build in (_word_level, _byte_bpe, _wordpiece):
        tok = build()
        head = "masked" if tok.mask_token else "causal"
        sample = replace(pool[1], target="are", foil="table")   # words the tiny tokenizers know (the mapping is tested)
        (prepared,), dropped = prepare_evidence([sample], tok, head, None)
        text = render(sample, head, tok.mask_token).text
        offsets = tok(text, return_offsets_mapping=True)["offset_mapping"]
        marked = [(a, b) for (a, b), e in zip(offsets, prepared.evidence) if e]
        words = [(a, b) for a, b in offsets if b > a and a < len("Many teenagers")]
        assert len(marked) >= 2 and marked == words, build.__name__          # every token of the phrase, no other
        assert text[marked[0][0]:marked[-1][1]].strip().lower() == "many teenagers", build.__name__
    with pytest.raises(BadInputError, match="unknown ra evidence"):
        load_dataset("ra", path=str(FIXTURES / "anaphor_number_agreement.jsonl"), options={"evidence": "word"})


def test_ra_hub_parquet_has_no_one_prefix_fields():
    columns = pq.read_schema(FIXTURES / "blimp" / "anaphor_number_agreement" / "train-00000-of-00001.parquet").names
    assert "sentence_good" in columns and not any(c.startswith("one_prefix") for c in columns)


def test_split_minimal_pair():
    assert split_minimal_pair("Girls talked to themselves.", "Girls talked to itself.") == (
        "Girls talked to", "themselves", "itself", ".")
    assert split_minimal_pair("The men hurt themselves again.", "The men hurt himself again.") == (
        "The men hurt", "themselves", "himself", " again.")
    assert split_minimal_pair("A b c.", "A x y.") is None and split_minimal_pair("A b.", "A b c.") is None


def test_ra_errors(tmp_path):
    bad = tmp_path / "anaphor_number_agreement.jsonl"
    bad.write_text(json.dumps({"good": "Susan revealed herself.", "bad": "Susan revealed themselves."}) + "\n")
    with pytest.raises(BadInputError, match=r"lacks the fields \['sentence_good', 'sentence_bad'\]"):
        load_ra(bad)
    bad.write_text(json.dumps({"sentence_good": "Susan saw herself.", "sentence_bad": "Mary hurt themselves."}) + "\n")
    with pytest.raises(BadInputError, match="differ in more than one word"):
        load_ra(bad, spacy_model="none")
    with pytest.raises(MissingDataError) as err:  # the hub, offline (tests/conftest.py)
        load_ra(None)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------------ qa
def test_squad_reading_both_formats_answerable_only():
    nested = list(iter_squad(SQUAD_JSON))
    flat = list(iter_squad(FIXTURES / "squad_v2", "validation"))
    assert nested == flat and len(nested) == 9
    assert len(list(iter_squad(SQUAD_JSON, answerable_only=False))) == 12
    assert [r["id"] for r in iter_squad(FIXTURES, "validation")] == [r["id"] for r in nested]  # folder: official name


def _in_file_order(pool):
    ids = [r["id"] for r in iter_squad(SQUAD_JSON)]
    return sorted(pool, key=lambda s: ids.index(s.sample_id[3:]))


def test_qa_samples_prompt_foil_and_drops():
    pool = load_qa(SQUAD_JSON, split="validation")
    assert pool.source == "squad_json" and pool.dropped == {"no_foil": 3}  # "their ..." twice, a lone question
    in_file = _in_file_order(pool)
    assert [(s.target, s.foil) for s in in_file] == [("France", "10th"), ("10th", "Denmark"), ("Denmark", "raiders"),
                                                     ("raiders", "France"), ("significant", "algorithm"),
                                                     ("algorithm", "significant")]
    order = np.random.default_rng(0).permutation(6)            # the seeded order over the kept samples
    assert [s.sample_id for s in pool] == [in_file[i].sample_id for i in order]
    assert all(s.meta["order_seed"] == 0 and s.meta["split"] == "validation" for s in pool)
    pool = in_file
    for s in pool:
        _check_record(s)
        assert s.evidence_words == [s.meta["answer"]]
        rendered = render(s, "causal")
        assert rendered.text == f"Context: {s.context}\nQuestion: {s.question}\nAnswer:"
        assert [rendered.text[a:b] for a, b in rendered.evidence] == s.evidence_words
        a, b = rendered.regions["context"]
        assert rendered.text[a:b] == s.context and rendered.text[slice(*rendered.regions["question"])] == s.question
    assert pool[1].evidence_words == ["10th and 11th centuries"] and pool[0].meta["foil_id"] == pool[1].sample_id[3:]
    flat = load_dataset("qa", path=str(FIXTURES / "squad_v2"), options={"split": "validation"})
    assert flat.source == "squad_rows" and [s.to_json() | {"meta": None} for s in _in_file_order(flat)] == [
        s.to_json() | {"meta": None} for s in pool]


def test_qa_reads_the_train_split_by_default_in_a_seeded_order(tmp_path):
    """The default split is train (the paper's 40k qa samples; validation has 5,928 answerable questions): the
    official train file, a folder holding it, or the hub's train rows; a limit takes a prefix of the seeded order,
    another seed another order; the validation file under split=train is a one-line error naming the fix."""
    train = tmp_path / "train-v2.0.json"
    train.write_text(SQUAD_JSON.read_text())
    pool = load_qa(train)
    assert len(pool) == 6 and all(s.meta["split"] == "train" for s in pool)
    assert [s.sample_id for s in load_dataset("qa", path=str(tmp_path), limit=3)] == pool.sample_ids[:3]
    other = load_dataset("qa", path=str(train), options={"seed": 1})
    assert sorted(other.sample_ids) == sorted(pool.sample_ids) and other.sample_ids != pool.sample_ids
    rows = tmp_path / "rows" / "squad_v2"
    rows.mkdir(parents=True)
    (rows / "train-00000-of-00001.parquet").write_bytes(
        (FIXTURES / "squad_v2" / "validation-00000-of-00001.parquet").read_bytes())
    assert load_qa(rows.parent).sample_ids == pool.sample_ids and load_qa(rows.parent).source == "squad_rows"
    with pytest.raises(BadInputError, match="dev-v2.0.json is SQuAD v2's validation file") as err:
        load_qa(SQUAD_JSON)
    assert "task.options.split=validation" in err.value.fix


def test_paragraph_foils_rule():
    assert paragraph_foils(["a", "b", "c"]) == [1, 2, 0]
    assert paragraph_foils(["the", "The", "x"]) == [2, 2, 0]
    assert paragraph_foils(["x"]) == [None] and paragraph_foils(["x", "X"]) == [None, None]


def _misplaced_first_answer(tmp_path) -> Path:
    """The SQuAD fixture with the first question's answer_start one character off."""
    data = json.loads(SQUAD_JSON.read_text())
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(data))
    return path


def test_qa_mismatched_answer_start_is_dropped(tmp_path):
    pool = load_qa(_misplaced_first_answer(tmp_path), split="validation")
    assert pool.dropped == {"no_foil": 3, "evidence_mismatch": 1} and len(pool) == 5


def test_qa_errors(tmp_path):
    bad = tmp_path / "validation.jsonl"
    bad.write_text(json.dumps({"id": "1", "context": "x", "question": "y"}) + "\n")
    with pytest.raises(BadInputError, match=r"lacks the fields \['answers'\]"):
        load_qa(bad, split="validation")
    with pytest.raises(BadInputError, match="seed must be"):
        load_qa(SQUAD_JSON, split="validation", seed=-1)
    with pytest.raises(BadInputError, match="split"):
        load_qa(SQUAD_JSON, split="test")
    with pytest.raises(BadInputError, match="unknown option"):
        load_dataset("qa", path=str(SQUAD_JSON), options={"prompt": "x"})
    with pytest.raises(MissingDataError) as err:
        load_qa(None)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------------ saved records
@pytest.mark.parametrize("task", ["sva", "ra", "qa"])
def test_saved_records_round_trip(tmp_path, task):
    pool = {"sva": lambda: load_sva(FIXTURES / "agr_50_mostcommon_10K.tsv"),
            "ra": lambda: load_ra(FIXTURES / "blimp_with_targets" / "anaphor_number_agreement.csv"),
            "qa": lambda: load_qa(SQUAD_JSON, split="validation")}[task]()
    path = save_evidence_jsonl(pool, tmp_path / f"{task}.jsonl")
    again = load_dataset(task, path=str(path), limit=3)
    assert [s.to_json() for s in again] == [s.to_json() for s in pool[:3]] and again.source == "evidence_jsonl"
    other = "qa" if task != "qa" else "sva"
    with pytest.raises(BadInputError, match=f"not {other!r}"):
        list(read_evidence_jsonl([json.loads(line) for line in path.read_text().splitlines()], other, "file"))


# ------------------------------------------------------------------------------------------------ the record
def test_collect_pool_drops_and_counts():
    def sample(i, **kw):
        base = dict(sample_id=f"s{i}", task="ra", target="himself", foil="themselves", evidence=((0, 4),),
                    prefix="John hurt", suffix=".")
        return EvidenceSample(**(base | kw))

    pool = collect_pool([sample(0), sample(1, evidence=()), sample(2, foil="Himself"), Dropped("s3", "no_foil"),
                         sample(4, evidence=((5, 40),)), sample(5, prefix=""), sample(6)], limit=None, what="t",
                        source="test")
    assert pool.sample_ids == ["s0", "s6"] and pool.n_dropped == 5
    assert pool.dropped == {"empty_evidence": 2, "same_target_foil": 1, "no_foil": 1, "evidence_mismatch": 1}
    assert set(pool.dropped) <= set(DROP_REASONS)
    first = collect_pool([sample(1, evidence=()), sample(0), sample(2)], limit=1, what="t", source="")
    assert first.sample_ids == ["s0"] and first.dropped == {"empty_evidence": 1}  # reading stops at the limit
    with pytest.raises(BadInputError, match="twice"):
        collect_pool([sample(0), sample(0)], limit=None, what="t", source="")


def test_render_masked_and_causal():
    s = EvidenceSample(sample_id="x", task="sva", target="are", foil="is", evidence=((4, 8),),
                       prefix="The keys to the cabinet", suffix=" on the table.")
    causal = render(s, "causal")
    assert causal.text == "The keys to the cabinet" and causal.evidence == ((4, 8),)
    masked = render(s, "masked", mask_token="[MASK]")
    assert masked.text == "The keys to the cabinet [MASK] on the table."
    assert masked.text[slice(*masked.regions["mask"])] == "[MASK]"
    assert masked.text[slice(*masked.regions["suffix"])] == " on the table."
    with pytest.raises(BadInputError, match="mask token"):
        render(s, "masked")
    qa = EvidenceSample(sample_id="q", task="qa", target="Rome", foil="Oslo", evidence=((22, 26),),
                        context="Tom lives in Oslo and Rome.", question="Where?")
    rendered = render(qa, "masked", mask_token="<mask>")
    assert rendered.text == format_qa_prompt(qa.context, qa.question) + " <mask>"
    assert [rendered.text[a:b] for a, b in rendered.evidence] == ["Rome"]


def test_words():
    assert first_word('"Lost" in space') == "Lost" and first_word("1,000 years") == "1,000"
    assert first_word("  ") == "" and first_word("$ 5") == "$"
    assert word_span("the keys to the keys", "keys") == (4, 8)
    assert word_span("the keys to the keys", "keys", (9, 20)) == (16, 20) and word_span("keyser", "key") is None


# ------------------------------------------------------------------------------------------------ tokens
def _word_level():
    from palrp_bench.data.synthetic_evidence import build_evidence_tokenizer

    return build_evidence_tokenizer()


def _byte_bpe():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(["The keys to the cabinet are on the table.", "Context: Tom lives in Rome."] * 20,
                                trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def _wordpiece():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=120, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    backend.train_from_iterator(["the keys to the cabinet are on the table", "tom lives in rome"] * 20, trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", backend.token_to_id("[CLS]")),
                                                 ("[SEP]", backend.token_to_id("[SEP]"))])
    return PreTrainedTokenizerFast(tokenizer_object=backend, cls_token="[CLS]", sep_token="[SEP]",
                                   mask_token="[MASK]", unk_token="[UNK]", pad_token="[PAD]")


@pytest.mark.parametrize("build", [_word_level, _byte_bpe, _wordpiece])
def test_spans_map_to_the_tokens_of_the_word(build):
    tok = build()
    s = EvidenceSample(sample_id="x", task="sva", target="are", foil="is", evidence=((4, 8),),
                       prefix="The keys to the cabinet", suffix=" on the table.")
    head, mask = ("masked", tok.mask_token) if tok.mask_token else ("causal", None)
    rendered = render(s, head, mask_token=mask)
    enc = tok(rendered.text, return_offsets_mapping=True)
    marked = tokens_overlapping(enc["offset_mapping"], rendered.evidence)
    pieces = [tok.convert_ids_to_tokens(i) for i, m in zip(enc["input_ids"], marked) if m]
    assert pieces and "".join(p.replace("Ġ", "").replace("##", "") for p in pieces).lower() == "keys"
    special = [t in tok.all_special_ids for t in enc["input_ids"]]
    assert not any(m and sp for m, sp in zip(marked, special))
    in_mask = tokens_overlapping(enc["offset_mapping"], [rendered.regions["mask"]]) if mask else None
    if mask:
        assert [tok.convert_ids_to_tokens(i) for i, m in zip(enc["input_ids"], in_mask) if m] == [mask]


def test_tokens_overlapping_edges():
    assert tokens_overlapping([(0, 0), (0, 3), (3, 8), (8, 9)], [(4, 8)]) == [False, False, True, False]
    assert tokens_overlapping([(0, 2), (2, 4)], []) == [False, False]


# ------------------------------------------------------------------------------------------------ the parser
class _Tok(SimpleNamespace):
    pass


class _Doc(list):
    """A hand-made spaCy doc: its tokens, and ``noun_chunks`` spans (``start``, ``end`` token indices, end exclusive;
    ``start_char``, ``end_char``)."""

    noun_chunks: list


def _doc(words, deps, heads, text=None, chunks=()):
    """A hand-made parse (spaCy's token attributes): ``heads`` are indices, the root points at itself; ``chunks``
    the noun chunks as ``(start, end)`` token ranges."""
    text = text if text is not None else " ".join(words)
    tokens, pos = _Doc(), 0
    for i, (w, d) in enumerate(zip(words, deps)):
        pos = text.index(w, pos)
        tokens.append(_Tok(i=i, idx=pos, text=w, dep_=d))
        pos += len(w)
    for t, h in zip(tokens, heads):
        t.head = tokens[h]
    for t in tokens:
        t.children = [c for c in tokens if c.head is t and c is not t]
    tokens.noun_chunks = [SimpleNamespace(start=a, end=b, start_char=tokens[a].idx,
                                          end_char=tokens[b - 1].idx + len(tokens[b - 1].text)) for a, b in chunks]
    return tokens


def _fake_parse(text):
    """Parses of the fixture sentences, as spaCy's English model gives them (subject, verb, reflexive)."""
    words = text.replace(".", " .").replace("n't", " n't").split()
    deps = ["dep"] * len(words)
    heads = list(range(len(words)))
    verb_words = {"are", "shows", "lives", "exist", "revealed", "helping", "bothered", "hurt", "scare", "listened"}
    subjects = {"keys", "map", "author", "genes", "Susan", "teenagers", "lot", "Renee", "Borgias", "senators"}
    verb = next(i for i, w in enumerate(words) if w in verb_words)
    for i, w in enumerate(words):
        if w in subjects and i < verb:
            deps[i], heads[i] = "nsubj", verb
        elif w in ("herself", "themselves", "himself", "itself"):
            prep = i - 1 if words[i - 1] == "to" else None
            deps[i], heads[i] = ("pobj", prep) if prep is not None else ("dobj", verb)
            if prep is not None:
                deps[prep], heads[prep] = "prep", verb
        elif i != verb and heads[i] == i:
            heads[i] = verb
    deps[verb] = "ROOT"
    # noun chunks as spaCy's English iterator forms them: a subject with the determiners / modifiers before it
    chunks = []
    for i, w in enumerate(words):
        if deps[i] == "nsubj":
            start = i - 1 if i > 0 and words[i - 1] in ("Many", "A", "The", "All") else i
            chunks.append((start, i + 1))
    return _doc(words, deps, heads, text=text, chunks=chunks)


def _fake_pipe(texts, model=ep.SPACY_MODEL, batch_size=256):
    return [_fake_parse(t) for t in texts]


def _blimp_rows():
    return [json.loads(line) for line in (FIXTURES / "anaphor_number_agreement.jsonl").read_text().splitlines()]


def _refuse(model=ep.SPACY_MODEL):
    raise MissingDataError("this evidence file has no evidence columns and spaCy (the parser that finds the subject) "
                           "is not installed", ep.SPACY_FIX)


def test_sva_subject_through_auxiliary_and_limits():
    # "the dogs are running": spaCy may hang "are" as aux of "running"; the subject is found on the head
    doc = _doc(["the", "dogs", "are", "running"], ["det", "nsubj", "aux", "ROOT"], [1, 3, 3, 3])
    assert ep.sva_subject_span(doc, 9, 8) == (4, 8)
    assert ep.sva_subject_span(doc, 9, 5) is None  # the subject ends after the prefix
    assert ep.sva_subject_span(doc, 3, 8) is None  # no token starts there
    lone = _doc(["run"], ["ROOT"], [0])
    assert ep.sva_subject_span(lone, 0, 0) is None


def test_ra_antecedent_goes_up_through_prepositions():
    doc = _doc(["Girls", "talked", "to", "themselves"], ["nsubj", "ROOT", "prep", "pobj"], [1, 1, 1, 2])
    assert ep.ra_antecedent_span(doc, 16, 15) == (0, 5)
    assert ep.ra_antecedent_span(doc, 16, 15, "phrase") == (0, 5)  # in no chunk: the head word
    orphan = _doc(["themselves"], ["ROOT"], [0])
    assert ep.ra_antecedent_span(orphan, 0, 0) is None


def test_ra_phrase_is_the_noun_chunk_holding_the_antecedent():
    words = ["The", "old", "kings", "near", "the", "tower", "hurt", "themselves"]
    doc = _doc(words, ["det", "amod", "nsubj", "prep", "det", "pobj", "ROOT", "dobj"], [2, 2, 6, 2, 5, 3, 6, 6],
               chunks=[(0, 3), (4, 6)])
    text = " ".join(words)
    reflexive = text.index("themselves")
    assert ep.ra_antecedent_span(doc, reflexive, reflexive - 1, "head") == (8, 13)             # "kings"
    assert ep.ra_antecedent_span(doc, reflexive, reflexive - 1, "phrase") == (0, 13)           # "The old kings"
    assert ep.ra_antecedent_span(doc, reflexive, 10, "phrase") is None                         # ends after the limit
    with pytest.raises(ValueError, match="unknown ra evidence"):
        ep.ra_antecedent_span(doc, reflexive, reflexive - 1, "sentence")


def test_load_parser_refuses_in_one_line_without_spacy_or_its_model():
    ep.load_parser.cache_clear()
    try:
        import spacy  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDataError) as err:
            ep.load_parser()
        assert "spaCy" in str(err.value) and "\n" not in str(err.value)
        assert str(err.value).endswith(ep.SPACY_FIX)
        return
    with pytest.raises(MissingDataError) as err:
        ep.load_parser("no_such_spacy_model_xyz")
    assert "no_such_spacy_model_xyz" in str(err.value) and "\n" not in str(err.value)


def test_span_logic_on_a_real_spacy_doc():
    spacy = pytest.importorskip("spacy", reason="spaCy is optional (extra evidence)")
    from spacy.tokens import Doc

    vocab = spacy.blank("en").vocab
    doc = Doc(vocab, words=["The", "keys", "to", "the", "cabinet", "are", "old", "."],
              heads=[1, 5, 1, 4, 2, 5, 5, 5], deps=["det", "nsubj", "prep", "det", "pobj", "ROOT", "acomp", "punct"])
    assert ep.sva_subject_span(doc, 24, 23) == (4, 8)
    doc = Doc(vocab, words=["Girls", "talked", "to", "themselves", "."], heads=[1, 1, 1, 2, 1],
              deps=["nsubj", "ROOT", "prep", "pobj", "punct"])
    assert ep.ra_antecedent_span(doc, 16, 15) == (0, 5)
    # spaCy's own English noun-chunk iterator on a parse with POS tags: "Many teenagers"
    doc = Doc(vocab, words=["Many", "teenagers", "were", "helping", "themselves", "."], heads=[1, 3, 3, 3, 3, 3],
              deps=["amod", "nsubj", "aux", "ROOT", "dobj", "punct"], pos=["ADJ", "NOUN", "AUX", "VERB", "PRON", "PUNCT"])
    assert ep.ra_antecedent_span(doc, 28, 27, "phrase") == (0, 14)


def test_every_evidence_dataset_is_registered():
    assert {"sva", "ra", "qa", "squad", "synthetic_sva", "synthetic_ra", "synthetic_qa"} <= set(DATASETS.names())


def test_fixture_folder_is_complete():
    names = sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*") if p.is_file())
    assert names == ["agr_50_mostcommon_10K.tsv", "anaphor_number_agreement.jsonl",
                     "blimp/anaphor_number_agreement/train-00000-of-00001.parquet",
                     "blimp_with_targets/anaphor_number_agreement.csv", "dev-v2.0.json", "lgd_dataset.tsv",
                     "squad_v2/validation-00000-of-00001.parquet"]


# ------------------------------------------------------------------------------------------------ squad (AttnLRP)
def test_squad_attnlrp_order_is_a_seeded_permutation_of_every_question():
    nested = load_squad_attnlrp(SQUAD_JSON)
    flat = load_dataset("squad", path=str(FIXTURES / "squad_v2"), options={"seed": 0})
    assert [s.to_json() | {"meta": None} for s in nested] == [s.to_json() | {"meta": None} for s in flat]
    rows = list(iter_squad(SQUAD_JSON, answerable_only=False))
    order = np.random.default_rng(0).permutation(len(rows))
    assert len(rows) == 12 and [s.sample_id for s in nested] == [f"squad-{rows[i]['id']}" for i in order]
    unanswerable = [s for s in nested if not s.meta["answerable"]]
    assert len(unanswerable) == 3 and all(s.evidence == () and s.target == "" and s.meta["answers"] == []
                                          for s in unanswerable)
    for s in nested:
        assert s.foil == "" and s.meta["order_seed"] == 0
        if s.meta["answerable"]:
            assert s.evidence_words == [s.meta["answer"]] and s.meta["answer"] in s.meta["answers"]
    assert [s.sample_id for s in load_squad_attnlrp(SQUAD_JSON, limit=4)] == [s.sample_id for s in nested[:4]]
    other = [s.sample_id for s in load_squad_attnlrp(SQUAD_JSON, seed=1)]
    assert sorted(other) == sorted(s.sample_id for s in nested) and other != [s.sample_id for s in nested]


def test_squad_attnlrp_answerable_only_permutes_the_answerable_questions():
    pool = load_dataset("squad", path=str(SQUAD_JSON), options={"answerable_only": True})
    rows = list(iter_squad(SQUAD_JSON))
    order = np.random.default_rng(0).permutation(len(rows))
    assert len(rows) == 9 and [s.sample_id for s in pool] == [f"squad-{rows[i]['id']}" for i in order]
    assert all(s.meta["answerable"] and s.evidence for s in pool)
    with pytest.raises(BadInputError, match="answerable_only must be true or false"):
        load_squad_attnlrp(SQUAD_JSON, answerable_only="yes")


def test_squad_attnlrp_drops_a_misplaced_answer_and_refuses_bad_options(tmp_path):
    path = _misplaced_first_answer(tmp_path)
    pool = load_squad_attnlrp(path)
    assert pool.dropped == {"evidence_mismatch": 1} and len(pool) == 11
    with pytest.raises(BadInputError, match="unknown option"):
        load_dataset("squad", path=str(path), options={"n": 3})
    with pytest.raises(BadInputError, match="seed must be"):
        load_squad_attnlrp(path, seed=-1)
