"""Subject-verb agreement (``sva``) for the evidence benchmark (docs/evaluation.md, "Evidence data").

The paper uses Goldberg (2019)'s data, derived from Linzen et al. (2016): Wikipedia sentences whose present-tense
verb agrees with its subject, the verb to be predicted. Three formats, told apart by their first line:

* **Goldberg's TSV** (``lgd_dataset.tsv``; no header, 5 tab-separated fields): number of attractors, the
  sentence, the sentence with the verb replaced by ``***mask***``, the correct verb, the verb of the other number.
  ``prefix`` / ``suffix`` are the masked sentence around ``***mask***``; target = the correct verb, foil = the
  other one. It marks no subject: the evidence comes from spaCy's parse (data/evidence_parse.py, extra
  ``evidence``). ``sample_id`` = ``sva-{hash of the masked sentence and the verb}`` (data/sample_ids.py; a repeated
  row gets ``-1``, ``-2``, ...).
* **Linzen's TSV** (``agr_50_mostcommon_10K.tsv``, optionally ``.gz``; a header row): ``orig_sentence`` (the
  lower-cased, space-tokenised sentence), ``verb_index`` and ``subj_index`` (1-based word positions), ``verb_pos``
  (``VBZ`` singular, ``VBP`` plural), ``n_diff_intervening``. Evidence = the word at ``subj_index`` (the file's
  own annotation); target = the word at ``verb_index``; foil = its other number by the rules of
  :func:`other_number` (the file has no inflection column; Goldberg's TSV has its vocabulary-based one). Rows whose
  subject is not before the verb are dropped (``empty_evidence``). ``sample_id`` as above.
* **Saved evidence records** (``.jsonl`` written by ``save_evidence_jsonl``; e.g. Goldberg's TSV annotated once).

``meta``: ``source`` (``goldberg_tsv`` | ``linzen_tsv`` | ``evidence_jsonl``), ``evidence_source``
(``file:subj_index`` or ``parser:spacy/<model>``), ``row`` (0-based data row), ``n_attractors``.
"""
from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from pathlib import Path

from ..errors import BadInputError, MissingDataError
from .evidence_common import (EVIDENCE_JSONL_FIELDS, EvidencePool, EvidenceSample, check_limit,
                              collect_pool, content_sample_id, read_evidence_jsonl)
from .evidence_parse import SPACY_MODEL, NeedsParse, check_parser, resolve_parses
from .registry import Option, register_dataset
from .text_common import first_record, iter_local_records

MASK = "***mask***"
GOLDBERG_FILE = "lgd_dataset.tsv"
LINZEN_FILE = "agr_50_mostcommon_10K.tsv"
#: Columns of Linzen's TSV that the loader reads.
LINZEN_COLUMNS: tuple[str, ...] = ("orig_sentence", "verb_index", "subj_index", "verb_pos")
#: Present-tense verbs whose other number the suffix rules get wrong.
_IRREGULAR = {"is": "are", "are": "is", "has": "have", "have": "has", "does": "do", "do": "does", "goes": "go",
              "go": "goes", "was": "were", "were": "was"}

__all__ = ["load_sva", "other_number", "needs_parser", "MASK", "SOURCES"]


#: where the two files come from
SOURCES = (f"Goldberg (2019)'s {GOLDBERG_FILE}: github.com/yoavg/bert-syntax; Linzen et al. (2016)'s "
           f"{LINZEN_FILE}.gz: tallinzen.net/media/rnn_agreement/{LINZEN_FILE}.gz")


def _how_to_get() -> str:
    return (f"download Goldberg's {GOLDBERG_FILE} (the bert-syntax repository of Goldberg 2019) or Linzen et al.'s "
            f"{LINZEN_FILE}.gz and pass path=<file>")


def needs_parser(path: str | Path | None) -> bool:
    """Whether the sva file at ``path`` marks no subject, so that loading it needs spaCy's parse (Goldberg's TSV);
    False for Linzen's TSV, saved evidence records and anything unreadable (the loader says what is wrong)."""
    try:
        file = _resolve(path)
        if file.suffix in (".jsonl", ".json"):
            return False
        with _open_text(file) as handle:
            fields = handle.readline().rstrip("\r\n").split("\t")
    except (OSError, UnicodeDecodeError, MissingDataError):
        return False
    return len(fields) == 5 and MASK in fields[2]


def other_number(verb: str, verb_pos: str) -> str:
    """The present-tense form of ``verb`` in the other number (``VBZ`` -> plural, ``VBP`` -> singular): the
    irregular ``is/are``, ``has/have``, ``does/do``, ``goes/go``; else English suffix rules: ``-ies`` after two
    more letters -> ``-y`` (``applies`` -> ``apply``, but ``dies`` -> ``die``), ``-es`` after s, x, z, ch, sh ->
    drop ``es``, else drop ``s``; and back: consonant + ``y`` -> ``ies``, s, x, z, ch, sh, o -> ``+es``, else
    ``+s``."""
    word = verb.lower()
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if verb_pos == "VBZ":
        if word.endswith("ies") and len(word) > 4:
            return word[:-3] + "y"
        if word.endswith(("sses", "xes", "zes", "ches", "shes")):
            return word[:-2]
        return word[:-1] if word.endswith("s") and len(word) > 1 else word
    if verb_pos == "VBP":
        if word.endswith("y") and len(word) > 1 and word[-2] not in "aeiou":
            return word[:-1] + "ies"
        if word.endswith(("s", "x", "z", "ch", "sh", "o")):
            return word + "es"
        return word + "s"
    raise BadInputError(f"verb_pos {verb_pos!r} is not VBZ or VBP", "sva rows need a present-tense verb")


def _open_text(path: Path):
    return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8") if path.suffix == ".gz" else \
        path.open(encoding="utf-8")


def _resolve(path: str | Path | None) -> Path:
    if path is None:
        raise MissingDataError("the sva data is not on the Hugging Face hub: it needs a local file", _how_to_get())
    path = Path(path).expanduser()
    if path.is_dir():
        for name in (GOLDBERG_FILE, LINZEN_FILE, LINZEN_FILE + ".gz"):
            if (path / name).is_file():
                return path / name
        raise MissingDataError(f"no {GOLDBERG_FILE} or {LINZEN_FILE}[.gz] in {path}", _how_to_get())
    if not path.is_file():
        raise MissingDataError(f"sva file not found at {path}", _how_to_get())
    return path


def _goldberg(lines: Iterator[str], spacy_model: str) -> Iterator:
    seen: dict[str, int] = {}
    for row, line in enumerate(lines):
        if not line.strip():
            continue
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != 5 or MASK not in fields[2]:
            raise BadInputError(f"Goldberg sva TSV row {row + 1} has {len(fields)} fields"
                                + ("" if len(fields) != 5 else f" and no {MASK}"),
                                f"each row needs 5 tab-separated fields: n_attractors, sentence, sentence with "
                                f"{MASK}, correct verb, other verb")
        n_attractors, _, masked, good, bad = fields
        before, _, suffix = masked.partition(MASK)
        prefix = before.rstrip()
        sample = EvidenceSample(
            sample_id=content_sample_id("sva", masked, good, seen=seen), task="sva", target=good.strip(),
            foil=bad.strip(), evidence=(), prefix=prefix, suffix=suffix,
            meta={"source": "goldberg_tsv", "row": row, "n_attractors": int(n_attractors)
                  if n_attractors.strip().isdigit() else n_attractors})
        yield NeedsParse(sample, f"{prefix} {sample.target}{suffix}", len(prefix) + 1, "sva")


def _linzen(handle, header: list[str]) -> Iterator[EvidenceSample]:
    missing = [c for c in LINZEN_COLUMNS if c not in header]
    if missing:
        raise BadInputError(f"Linzen sva TSV lacks the columns {missing} (has {header})",
                            f"use agr_50_mostcommon_10K.tsv with the columns {list(LINZEN_COLUMNS)}")
    seen: dict[str, int] = {}
    for row, record in enumerate(csv.DictReader(handle, fieldnames=header, delimiter="\t")):
        words = str(record["orig_sentence"]).split()
        try:
            v, s = int(record["verb_index"]) - 1, int(record["subj_index"]) - 1
        except (TypeError, ValueError):
            raise BadInputError(f"Linzen sva TSV row {row + 1} has a non-integer verb_index or subj_index",
                                "use the published file unchanged") from None
        if not 0 <= v < len(words):
            raise BadInputError(f"Linzen sva TSV row {row + 1}: verb_index {v + 1} is outside its "
                                f"{len(words)}-word sentence", "use the published file unchanged")
        prefix = " ".join(words[:v])
        suffix = "".join(" " + w for w in words[v + 1:])
        evidence = ()
        if 0 <= s < v:
            start = len(" ".join(words[:s])) + (1 if s > 0 else 0)
            evidence = ((start, start + len(words[s])),)
        masked = f"{prefix} {MASK}{suffix}"
        meta = {"source": "linzen_tsv", "evidence_source": "file:subj_index", "row": row,
                "verb_pos": record["verb_pos"]}
        for key in ("n_diff_intervening", "n_intervening"):
            if record.get(key) not in (None, ""):
                meta["n_attractors" if key == "n_diff_intervening" else key] = int(record[key])
        yield EvidenceSample(sample_id=content_sample_id("sva", masked, words[v], seen=seen), task="sva",
                             target=words[v], foil=other_number(words[v], str(record["verb_pos"])),
                             evidence=evidence, prefix=prefix, suffix=suffix, meta=meta)


def load_sva(path: str | Path | None, limit: int | None = None, spacy_model: str = SPACY_MODEL) -> EvidencePool:
    """The first ``limit`` kept sva samples of a local file (module docstring), with the drops counted
    (:class:`~palrp_bench.data.evidence_common.EvidencePool`). ``spacy_model`` parses files without a subject
    column (Goldberg's TSV)."""
    check_limit(limit)
    file = _resolve(path)
    what = f"sva file {file}"
    if file.suffix in (".jsonl", ".json"):
        records = iter_local_records(file, "", ("sample_id", "task", "prefix", "suffix", "evidence", "target", "foil"),
                                     what="sva", how_to_get=_how_to_get(), optional=("meta",))
        return collect_pool(read_evidence_jsonl(records, "sva", what), limit, what=what, source="evidence_jsonl")
    with _open_text(file) as handle:
        first = handle.readline()
        fields = first.rstrip("\r\n").split("\t")
        if _tsv_format(fields, what) == "linzen_tsv":
            return collect_pool(_linzen(handle, fields), limit, what=what, source="linzen_tsv")
        lines = _chain(first, handle)
        return collect_pool(resolve_parses(_goldberg(lines, spacy_model), spacy_model), limit, what=what,
                            source="goldberg_tsv")


def _tsv_format(fields: list[str], what: str) -> str:
    """``linzen_tsv`` or ``goldberg_tsv`` from the first line's tab-separated fields, else a one-line error."""
    if "orig_sentence" in fields or "verb_index" in fields:
        return "linzen_tsv"
    if len(fields) == 5 and MASK in fields[2]:
        return "goldberg_tsv"
    raise BadInputError(f"{what} is neither Goldberg's TSV (5 tab-separated fields, the third with {MASK}) nor "
                        f"Linzen's (a header with {list(LINZEN_COLUMNS)}): its first line has {len(fields)} fields",
                        f"pass {GOLDBERG_FILE}, {LINZEN_FILE}[.gz] or saved evidence records "
                        f"({', '.join(EVIDENCE_JSONL_FIELDS)})")


def _chain(first: str, rest) -> Iterator[str]:
    yield first
    yield from rest


#: mean real tokens of an sva input: the prefix before the verb, about a dozen words (a masked LM reads the whole
#: sentence: about twice that)
MEAN_TOKENS = 20


def _check_file(task, options, findings) -> None:
    """The file's head: saved evidence records with their fields, or the first line of Goldberg's or Linzen's TSV
    (Linzen's columns included)."""
    file = _resolve(task.path)
    what = f"sva file {file}"
    if file.suffix in (".jsonl", ".json"):
        first_record(file, "", ("sample_id", "task", "prefix", "suffix", "evidence", "target", "foil"),
                     what="sva", how_to_get=_how_to_get())
        return
    with _open_text(file) as handle:
        fields = handle.readline().rstrip("\r\n").split("\t")
    if _tsv_format(fields, what) == "linzen_tsv":
        missing = [c for c in LINZEN_COLUMNS if c not in fields]
        if missing:
            raise BadInputError(f"Linzen sva TSV lacks the columns {missing} (has {fields})",
                                f"use agr_50_mostcommon_10K.tsv with the columns {list(LINZEN_COLUMNS)}")


def _parser(task, options, findings) -> None:
    if task.path is not None and needs_parser(task.path):
        check_parser(task, options["spacy_model"], task.path, findings)


@register_dataset(
    "sva", options=(Option("spacy_model", SPACY_MODEL, "spaCy pipeline parsing files without a subject column"),),
    needs_path=SOURCES, local_copy=f"<{GOLDBERG_FILE} or {LINZEN_FILE}.gz>", tokens=MEAN_TOKENS,
    check=_check_file, requirements=_parser)
def _sva_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=sva``: a local file (``task.path``); option ``spacy_model`` (files without a subject column)."""
    return load_sva(path, limit=limit, spacy_model=str(options["spacy_model"]))
