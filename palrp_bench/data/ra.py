"""Reflexive anaphora (``ra``) for the evidence benchmark (docs/evaluation.md, "Evidence data").

BLiMP's ``anaphor_number_agreement`` paradigm (Warstadt et al. 2020): minimal pairs such as "Many teenagers were
helping themselves." / "... herself." differing only in the reflexive, which must agree in number with its
antecedent. target = the reflexive of the good sentence, foil = that of the bad one; ``prefix`` the words before
it, ``suffix`` what follows it (``"."``). Evidence = the antecedent, option ``evidence``
(:data:`~palrp_bench.data.evidence_parse.RA_EVIDENCE`): ``phrase`` (the default: the noun phrase holding the
antecedent, ``Many teenagers``, as the paper's fastcoref mentions) or ``head`` (its head word, ``teenagers``);
``meta["evidence_unit"]`` records which. Formats (read from a file, a folder, or the hub ``nyu-mll/blimp`` config
``anaphor_number_agreement`` when ``path`` is None):

* **BLiMP JSON lines** (``anaphor_number_agreement.jsonl``): ``sentence_good``, ``sentence_bad``,
  ``one_prefix_prefix``, ``one_prefix_word_good``, ``one_prefix_word_bad``, ``UID``, ``pairID``. No evidence:
  spaCy's parse finds it (data/evidence_parse.py, extra ``evidence``).
* **The hub parquet** (``anaphor_number_agreement/train-*.parquet``): the same without the ``one_prefix_*``
  fields; prefix, target and foil come from the pair (the one whitespace-separated word where they differ,
  trailing punctuation moved to the suffix). Evidence from the parse.
* **BLiMP with targets** (the CSV of Ferrando et al. 2023, ``blimp_with_targets/anaphor_number_agreement.csv``):
  the JSON-lines fields plus ``target`` (the antecedent's head word, ``NA`` when their parse found none) and
  ``target_phrase``; evidence = the first whole-word occurrence of ``target_phrase`` in the prefix (``phrase``;
  ``meta["evidence_source"] = "file:target_phrase"``), or of ``target`` inside it (``head``; ``"file:target"``).
* **Saved evidence records** (``.jsonl`` written by ``save_evidence_jsonl``).

``sample_id`` = ``ra-{UID}-{pairID}`` (``ra-{hash of the good sentence}`` without them). Option ``paradigm`` reads
another BLiMP paradigm of the same shape (e.g. ``anaphor_gender_agreement``).
"""
from __future__ import annotations

import math
import string
from collections.abc import Iterator
from pathlib import Path

from ..errors import BadInputError, PalrpError
from .evidence_common import (EVIDENCE_JSONL_FIELDS, EvidencePool, EvidenceSample, check_limit,
                              collect_pool, content_sample_id, is_evidence_jsonl, peek_records, read_evidence_jsonl,
                              word_span)
from .evidence_parse import RA_EVIDENCE, SPACY_MODEL, NeedsParse, check_parser, resolve_parses
from .registry import Option, register_dataset
from .text_common import hub_records, load_hub_dataset

HF_NAME = "nyu-mll/blimp"
PARADIGM = "anaphor_number_agreement"
#: Required fields of every BLiMP format.
BLIMP_COLUMNS: tuple[str, ...] = ("sentence_good", "sentence_bad")
#: Optional fields read when present.
BLIMP_OPTIONAL: tuple[str, ...] = ("one_prefix_prefix", "one_prefix_word_good", "one_prefix_word_bad", "UID", "pairID",
                                   "target", "target_phrase")

__all__ = ["load_ra", "split_minimal_pair", "needs_parser", "HF_NAME", "PARADIGM"]


def _how_to_get(paradigm: str) -> str:
    return (f"download BLiMP's {paradigm}.jsonl (or {HF_NAME} {paradigm}/train-*.parquet) and pass path=<file or "
            "folder>, or run once with network access")


def split_minimal_pair(good: str, bad: str) -> tuple[str, str, str, str] | None:
    """``(prefix, target, foil, suffix)`` of a minimal pair differing in one whitespace-separated word (its trailing
    punctuation, the same in both, goes to the suffix), or None when the pair differs elsewhere."""
    g, b = good.split(" "), bad.split(" ")
    if len(g) != len(b):
        return None
    diffs = [i for i, (x, y) in enumerate(zip(g, b)) if x != y]
    if len(diffs) != 1:
        return None
    i = diffs[0]
    target, foil = g[i].rstrip(string.punctuation), b[i].rstrip(string.punctuation)
    tail = g[i][len(target):]
    if b[i][len(foil):] != tail or not target or not foil:
        return None
    return " ".join(g[:i]), target, foil, tail + "".join(" " + w for w in g[i + 1:])


def _text(value) -> str | None:
    """A file's text cell, or None for a missing one (NaN from pandas, ``NA``, empty)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    value = str(value)
    return None if value.strip() in ("", "NA") else value


def _blimp(records: Iterator[dict], what: str, evidence: str) -> Iterator:
    seen: dict[str, int] = {}
    for row, record in enumerate(records):
        good, bad = str(record["sentence_good"]), str(record["sentence_bad"])
        prefix, word_good, word_bad = (_text(record.get(k)) for k in
                                       ("one_prefix_prefix", "one_prefix_word_good", "one_prefix_word_bad"))
        if prefix and word_good and word_bad and good.startswith(f"{prefix} {word_good}"):
            parts = (prefix, word_good, word_bad, good[len(prefix) + 1 + len(word_good):])
        else:
            parts = split_minimal_pair(good, bad)
            if parts is None:
                raise BadInputError(f"{what} row {row + 1}: the good and bad sentences differ in more than one word",
                                    "BLiMP anaphor pairs differ only in the reflexive; fix or drop that row")
        prefix, target, foil, suffix = parts
        uid, pair = record.get("UID"), record.get("pairID")
        sample_id = (f"ra-{uid}-{pair}" if _text(uid) is not None and _text(pair) is not None
                     else content_sample_id("ra", good, seen=seen))
        meta = {"source": "blimp", "row": row, "evidence_unit": evidence}
        if _text(uid):
            meta["uid"] = str(uid)
        sample = EvidenceSample(sample_id=sample_id, task="ra", target=target, foil=foil, evidence=(), prefix=prefix,
                                suffix=suffix, meta=meta)
        if "target" in record:  # Ferrando et al.'s annotated CSV
            meta["source"] = "blimp_with_targets"
            meta["evidence_source"] = "file:target_phrase" if evidence == "phrase" else "file:target"
            head, phrase = _text(record.get("target")), _text(record.get("target_phrase"))
            within = word_span(prefix, phrase) if phrase else None
            if evidence == "phrase":
                span = within
            else:
                span = word_span(prefix, head, within) if head else None
                if span is None and head and within is not None:
                    span = word_span(prefix, head)
            sample.evidence = (span,) if span is not None else ()
            yield sample
        else:
            yield NeedsParse(sample, f"{prefix} {target}{suffix}", len(prefix) + 1, "ra")


def _local(path: Path, paradigm: str) -> Path:
    """The file or folder to read: ``{paradigm}.jsonl`` / ``.csv`` inside a folder, else the hub layout."""
    if path.is_dir():
        for name in (f"{paradigm}.jsonl", f"{paradigm}.csv"):
            found = sorted(path.rglob(name))
            if found:
                return found[0]
        if (path / paradigm).is_dir():
            return path / paradigm
    return path


def needs_parser(path: str | Path | None, paradigm: str = PARADIGM) -> bool:
    """Whether the ra data at ``path`` marks no antecedent, so that loading it needs spaCy's parse: the hub
    (``path`` None), BLiMP's JSON lines and parquet; False for the CSV with ``target`` columns, saved evidence
    records and anything unreadable (the loader says what is wrong)."""
    if path is None:
        return True
    try:
        present, _ = peek_records(_local(Path(path).expanduser(), paradigm), "train",
                                  BLIMP_COLUMNS + BLIMP_OPTIONAL + EVIDENCE_JSONL_FIELDS, what=f"BLiMP {paradigm}",
                                  how_to_get=_how_to_get(paradigm))
    except (OSError, ValueError, PalrpError):
        return False
    return bool(present) and not is_evidence_jsonl(dict.fromkeys(present)) and "target" not in present


def load_ra(path: str | Path | None = None, limit: int | None = None, paradigm: str = PARADIGM,
            spacy_model: str = SPACY_MODEL, evidence: str = RA_EVIDENCE[0]) -> EvidencePool:
    """The first ``limit`` kept ra samples (module docstring) with the drops counted
    (:class:`~palrp_bench.data.evidence_common.EvidencePool`); ``evidence``: ``phrase`` or ``head``."""
    check_limit(limit)
    if evidence not in RA_EVIDENCE:
        raise BadInputError(f"unknown ra evidence {evidence!r}", f"set task.options.evidence to one of {RA_EVIDENCE}")
    what = f"BLiMP {paradigm}"
    records, source = _records(path, paradigm)
    if source == "evidence_jsonl":
        return collect_pool(read_evidence_jsonl(records, "ra", what), limit, what=what, source=source)
    return collect_pool(resolve_parses(_blimp(records, what, evidence), spacy_model, ra_evidence=evidence), limit,
                        what=what, source=source)


def _records(path: str | Path | None, paradigm: str) -> tuple[Iterator[dict], str]:
    """The records of the hub or a local copy, lazily, and what they are (``blimp_hub``, ``evidence_jsonl`` or the
    local file's name); a copy without BLiMP's fields is a one-line error."""
    how = _how_to_get(paradigm)
    what = f"BLiMP {paradigm}"
    if path is None:
        dataset = load_hub_dataset(HF_NAME, paradigm, split="train", what=what, how_to_get=how)
        return hub_records(dataset, name=HF_NAME, how_to_get=how), "blimp_hub"
    local = _local(Path(path).expanduser(), paradigm)
    present, records = peek_records(local, "train", BLIMP_COLUMNS + BLIMP_OPTIONAL + EVIDENCE_JSONL_FIELDS,
                                    what=what, how_to_get=how)
    if is_evidence_jsonl(dict.fromkeys(present)):
        return records, "evidence_jsonl"
    missing = [c for c in BLIMP_COLUMNS if c not in present]
    if missing:
        raise BadInputError(f"{what} file {path} lacks the fields {missing} (has {sorted(present)})",
                            f"use BLiMP's JSON lines / parquet (fields {list(BLIMP_COLUMNS + BLIMP_OPTIONAL[:5])}) "
                            f"or saved evidence records")
    return records, str(local.name)


#: pairs of BLiMP's anaphor_number_agreement
BLIMP_PAIRS = 1000
#: mean real tokens of an ra input: prefixes of 2-6 words (the paper: a mean of at least 4 tokens; a masked LM reads
#: the whole sentence, about 7)
MEAN_TOKENS = 7


def _check_copy(task, options, findings) -> None:
    """The head of a local copy: BLiMP's fields (or saved evidence records) and one readable record."""
    records, _ = _records(task.path, options["paradigm"])
    if next(iter(records), None) is None:
        raise BadInputError(f"BLiMP {options['paradigm']} at {task.path} holds no records",
                            _how_to_get(options["paradigm"]))


def _parser(task, options, findings) -> None:
    if needs_parser(task.path, options["paradigm"]):
        where = task.path if task.path is not None else f"the hub's {HF_NAME}"
        check_parser(task, options["spacy_model"], where, findings)


@register_dataset(
    "ra", options=(Option("evidence", RA_EVIDENCE[0], f"the antecedent as evidence: one of {RA_EVIDENCE}"),
                   Option("paradigm", PARADIGM, "the BLiMP paradigm"),
                   Option("spacy_model", SPACY_MODEL, "spaCy pipeline finding the antecedent in unannotated data")),
    hub=HF_NAME, local_copy=f"<blimp> ({PARADIGM}.jsonl, or a folder holding {PARADIGM}/train-*.parquet)",
    pool_size=BLIMP_PAIRS, tokens=MEAN_TOKENS, check=_check_copy, requirements=_parser)
def _ra_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=ra``: options ``evidence`` (``phrase``, the default, or ``head``), ``paradigm`` (default
    anaphor_number_agreement), ``spacy_model``."""
    return load_ra(path, limit=limit, paradigm=str(options["paradigm"]), spacy_model=str(options["spacy_model"]),
                   evidence=str(options["evidence"]))
