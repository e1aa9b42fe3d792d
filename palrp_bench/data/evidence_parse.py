"""Evidence for files that lack it: the subject found by spaCy's dependency parser (docs/evaluation.md,
"Evidence data"; optional extra ``evidence``).

Used by the ``sva`` and ``ra`` loaders when a file has no evidence columns (Goldberg's 5-column TSV, BLiMP's JSON
lines and the hub parquet). The whole sentence (with the correct word) is parsed by spaCy's own tokenizer; the
evidence is the character span of one parsed token:

* sva: the nominal subject (``nsubj`` / ``nsubjpass``) of the verb at the masked position; when spaCy attaches
  the verb as an auxiliary or copula (``aux``, ``auxpass``, ``cop``), the subject of its head. The head word, as
  Linzen et al.'s ``subj_index`` marks it.
* ra: the antecedent of the reflexive: going up from the reflexive through its heads (the verb it is the object
  of, the preposition in between), the first subject found. ``evidence="phrase"`` (the default of the ra task): the
  noun chunk holding it (spaCy's ``doc.noun_chunks``: ``Many teenagers``), the reading closest to the paper's
  fastcoref mentions, which are noun phrases; the head word alone when no chunk holds it. ``evidence="head"``: its
  head word (``teenagers``). The paper used a coreference model (fastcoref) here; the subject of the reflexive's
  clause is what that finds in BLiMP's one-clause sentences.

Only a subject that lies before the predicted word counts (the text a causal LM reads); otherwise the sample has
no evidence and the loader drops it (counted). ``meta["evidence_source"] = "parser:spacy/<model>"``.

spaCy is optional and its English model is not on PyPI: without them :func:`load_parser` raises one line saying
how to get both (:data:`SPACY_FIX`). The span logic (:func:`sva_subject_span`, :func:`ra_antecedent_span`) needs
only tokens with ``i``, ``idx``, ``text``, ``dep_``, ``head`` and ``children`` (compared by ``i``: spaCy makes a
new token object on every access) and, for phrases, ``noun_chunks`` spans with ``start``, ``end`` (token indices,
end exclusive), ``start_char`` and ``end_char``, so it is tested on hand-made parses.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ..errors import MissingDataError

__all__ = ["SPACY_MODEL", "SPACY_FIX", "SUBJECT_DEPS", "RA_EVIDENCE", "parser_missing", "check_parser", "load_parser",
           "parse", "sva_subject_span", "ra_antecedent_span", "noun_chunk_span", "parser_source", "NeedsParse",
           "resolve_parses"]

#: The spaCy pipeline used unless ``task.options.spacy_model`` names another.
SPACY_MODEL = "en_core_web_sm"
#: How to get spaCy and its English model (one line).
SPACY_FIX = 'pip install -e ".[evidence]" && python -m spacy download en_core_web_sm'
#: Dependency labels of a subject.
SUBJECT_DEPS: tuple[str, ...] = ("nsubj", "nsubjpass")
#: Labels with which spaCy may attach the agreeing verb to another verb (the subject then hangs on that one).
_AUXILIARY_DEPS = ("aux", "auxpass", "cop")
#: How far up from the reflexive the antecedent search goes.
_MAX_HEAD_STEPS = 8
#: What of the antecedent is ra evidence (``task.options.evidence``), the default first: its noun phrase, or its
#: head word.
RA_EVIDENCE: tuple[str, ...] = ("phrase", "head")


def parser_source(model: str) -> str:
    """The ``meta["evidence_source"]`` of parsed evidence."""
    return f"parser:spacy/{model}"


def parser_missing(model: str = SPACY_MODEL) -> str | None:
    """What of the parser is not installed (``spaCy`` or its model ``model``), found without importing spaCy (the
    preflight asks before any load); None when both are there."""
    from importlib.util import find_spec

    if find_spec("spacy") is None:
        return "spaCy"
    if find_spec(model) is None:
        return f"spaCy's English model {model}"
    return None


def check_parser(task, model: str, where: str, findings) -> None:
    """The preflight's problem when the data at ``where`` marks no evidence and the parser that finds it (spaCy
    with ``model``) is not installed (:class:`~palrp_bench.findings.Findings`)."""
    missing = parser_missing(model)
    if missing is not None:
        findings.add(f"{missing} ({task.name}): {where} marks no evidence, which spaCy's parse finds",
                     SPACY_FIX if model == SPACY_MODEL else
                     f'pip install -e ".[evidence]" && python -m spacy download {model}')


@lru_cache(maxsize=4)
def load_parser(model: str = SPACY_MODEL):
    """The spaCy pipeline ``model`` (cached), or a one-line :class:`MissingDataError` saying how to get spaCy and
    the model."""
    try:
        import spacy
    except ImportError:
        raise MissingDataError("this evidence file has no evidence columns and spaCy (the parser that finds the "
                               "subject) is not installed", SPACY_FIX) from None
    try:
        return spacy.load(model, exclude=["ner", "lemmatizer", "textcat"])
    except (OSError, ImportError, ValueError):
        raise MissingDataError(f"this evidence file has no evidence columns and spaCy's English model {model} "
                               "is not installed (it is not on PyPI)",
                               SPACY_FIX if model == SPACY_MODEL else
                               f'pip install -e ".[evidence]" && python -m spacy download {model}') from None


def parse(texts: Sequence[str], model: str = SPACY_MODEL, batch_size: int = 256) -> list[Any]:
    """spaCy docs of ``texts`` (one pipe call)."""
    nlp = load_parser(model)
    return list(nlp.pipe(list(texts), batch_size=batch_size))


def _token_at(doc, char: int):
    for token in doc:
        if token.idx == char:
            return token
    return None


def _subject_of(token):
    for child in token.children:
        if child.dep_ in SUBJECT_DEPS:
            return child
    return None


def _span(token, limit: int) -> tuple[int, int] | None:
    start, end = token.idx, token.idx + len(token.text)
    return (start, end) if end <= limit else None


def sva_subject_span(doc, verb_char: int, limit: int) -> tuple[int, int] | None:
    """The character span of the subject of the verb starting at ``verb_char`` (module docstring), or None when
    the verb is not a token of the parse, has no subject, or the subject ends after ``limit`` (the prefix)."""
    verb = _token_at(doc, verb_char)
    if verb is None:
        return None
    subject = _subject_of(verb)
    if subject is None and verb.dep_ in _AUXILIARY_DEPS and verb.head.i != verb.i:
        subject = _subject_of(verb.head)
    return _span(subject, limit) if subject is not None else None


def noun_chunk_span(doc, token, limit: int) -> tuple[int, int] | None:
    """The character span of the noun chunk of ``doc`` (``doc.noun_chunks``) that holds ``token``, else of the token
    alone; None when it ends after ``limit``."""
    for chunk in doc.noun_chunks:
        if chunk.start <= token.i < chunk.end:
            return (chunk.start_char, chunk.end_char) if chunk.end_char <= limit else None
    return _span(token, limit)


def ra_antecedent_span(doc, reflexive_char: int, limit: int, evidence: str = "head") -> tuple[int, int] | None:
    """The character span of the antecedent (the nearest subject up the heads) of the reflexive starting at
    ``reflexive_char``: its head word, or with ``evidence="phrase"`` the noun chunk holding it (module docstring);
    None when there is none before ``limit``."""
    if evidence not in RA_EVIDENCE:
        raise ValueError(f"unknown ra evidence {evidence!r}; expected one of {RA_EVIDENCE}")
    node = _token_at(doc, reflexive_char)
    if node is None:
        return None
    for _ in range(_MAX_HEAD_STEPS):
        head = node.head
        if head.i == node.i:  # the root is its own head
            return None
        subject = _subject_of(head)
        if subject is not None and subject.i != node.i:
            return noun_chunk_span(doc, subject, limit) if evidence == "phrase" else _span(subject, limit)
        node = head
    return None


# ------------------------------------------------------------------------------------------------ loaders
class NeedsParse:
    """A candidate whose evidence the parser must find: ``sample`` (evidence empty), the ``text`` to parse (the
    whole sentence), the character where the predicted word starts in it, and the ``task`` (sva | ra)."""

    __slots__ = ("sample", "text", "anchor", "task")

    def __init__(self, sample, text: str, anchor: int, task: str):
        self.sample, self.text, self.anchor, self.task = sample, text, anchor, task

    @property
    def sample_id(self) -> str:
        return self.sample.sample_id


#: candidates parsed per spaCy call while a loader reads
PARSE_CHUNK = 256


def resolve_parses(candidates, model: str = SPACY_MODEL, chunk: int = PARSE_CHUNK, ra_evidence: str = "head"):
    """``candidates`` in order, each :class:`NeedsParse` replaced by its sample with the parsed evidence (none when
    the parse finds no subject before the predicted word; ra: ``ra_evidence`` of :data:`RA_EVIDENCE`); parsed
    :data:`PARSE_CHUNK` at a time, lazily, so a loader that stops at ``limit`` parses at most one chunk more than it
    keeps. Other candidates pass unchanged."""
    block: list = []

    def flush():
        pending = [c for c in block if isinstance(c, NeedsParse)]
        if pending:
            docs = parse([c.text for c in pending], model)
            for candidate, doc in zip(pending, docs):
                limit = len(candidate.sample.prefix)
                span = (sva_subject_span(doc, candidate.anchor, limit) if candidate.task == "sva"
                        else ra_antecedent_span(doc, candidate.anchor, limit, ra_evidence))
                candidate.sample.evidence = (span,) if span is not None else ()
                candidate.sample.meta["evidence_source"] = parser_source(model)
        out = [c.sample if isinstance(c, NeedsParse) else c for c in block]
        block.clear()
        return out

    for candidate in candidates:
        block.append(candidate)
        if len(block) >= chunk:
            yield from flush()
    yield from flush()
