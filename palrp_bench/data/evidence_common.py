"""The model-independent records of the evidence benchmark (docs/evaluation.md, "Evidence data").

One :class:`EvidenceSample` per test item of the three tasks of the decomposition-attribution paper: subject-verb
agreement (``sva``), reflexive anaphora (``ra``) and extractive question answering (``qa``), and of the needle in a
haystack (``needle``, data/needle.py: a key-value sentence in a long text, the value asked for). A record holds text,
the annotated evidence as character spans, and the two words whose logits are contrasted (``target`` the correct
one, ``foil`` the wrong one); it knows nothing of tokenizers or models. The task adapter turns a record into the
text one model head reads with :func:`render` (causal LMs: the sentence up to the predicted word, or the qa prompt;
masked LMs: the sentence with the mask token in place of the word) and maps the character spans to tokens through
the fast tokenizer's offsets (:func:`tokens_overlapping`).

Loaders return an :class:`EvidencePool`: the kept samples in dataset order, plus ``dropped`` (reason -> count) for
the samples removed at load (no evidence, target equal to foil, no foil, evidence not where the file says), which
the adapter logs and writes to the manifest. Annotated records can be saved as JSON lines
(:func:`save_evidence_jsonl`) and read back by every evidence loader, so a parse (data/evidence_parse.py) runs once.
"""
from __future__ import annotations

import itertools
import json
import re
import string
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInputError
from .sample_ids import stable_hash
from .text_common import iter_local_records

__all__ = ["EVIDENCE_TASKS", "RETRIEVAL_TASKS", "NEEDLE_QUESTION_LEAD", "QA_CONTEXT_LEAD", "QA_QUESTION_LEAD",
           "QA_ANSWER_LEAD", "EvidenceSample",
           "RenderedEvidence", "render", "format_qa_prompt", "tokens_overlapping", "EvidencePool", "Dropped",
           "DROP_REASONS", "collect_pool", "check_limit", "first_word", "word_span",
           "content_sample_id", "save_evidence_jsonl", "read_evidence_jsonl", "peek_records", "is_evidence_jsonl", "EVIDENCE_JSONL_FIELDS"]

#: The tasks (``EvidenceSample.task``).
EVIDENCE_TASKS: tuple[str, ...] = ("sva", "ra", "qa", "needle")
#: Tasks answered correctly only when the target's first token is the model's arg-max at the read-out position (a
#: needle is retrieved or not); the others when the target's logit exceeds the foil's.
RETRIEVAL_TASKS: tuple[str, ...] = ("needle",)

#: The qa prompt, ``{QA_CONTEXT_LEAD}{context}{QA_QUESTION_LEAD}{question}{QA_ANSWER_LEAD}``: "Context: ...\n
#: Question: ...\nAnswer:" (our choice; the paper gives none). A causal LM predicts the answer's first word next.
QA_CONTEXT_LEAD = "Context: "
QA_QUESTION_LEAD = "\nQuestion: "
QA_ANSWER_LEAD = "\nAnswer:"
#: The needle's causal text is ``{context}{NEEDLE_QUESTION_LEAD}{question}``: the haystack with the needle, a blank
#: line, the question and the answer's lead (data/needle.py); the answer's first token comes next.
NEEDLE_QUESTION_LEAD = "\n\n"

#: Why a sample was dropped at load (the keys of ``EvidencePool.dropped``).
DROP_REASONS: dict[str, str] = {
    "empty_evidence": "no evidence (the file marks none, or the parser found no subject before the predicted word)",
    "same_target_foil": "the target and the foil are the same word (compared case-insensitively)",
    "no_foil": "qa: no other question on the paragraph has an answer starting with another word",
    "evidence_mismatch": "the evidence the file gives is not in the text (e.g. the answer is not at answer_start)",
}


@dataclass
class EvidenceSample:
    """One annotated test item (module docstring). Every field is plain text or numbers (JSON-serialisable).

    * ``sample_id``: stable across runs and machines (the dataset's own id, or a content hash for files without
      one: :func:`content_sample_id`).
    * ``task``: ``sva`` | ``ra`` | ``qa``.
    * ``prefix`` (sva, ra): the sentence before the predicted word, without the space before it (``"The keys to
      the cabinet"``); what a causal LM reads.
    * ``suffix`` (sva, ra): the text after the predicted word exactly as in the sentence (``" on the table ."`` or
      ``"."``), so the sentence is ``prefix + " " + target + suffix`` and a masked LM reads
      ``prefix + " " + mask + suffix``.
    * ``context``, ``question`` (qa): the paragraph and the question (:func:`format_qa_prompt` builds the prompt);
      (needle) the haystack with the needle and the text after it, question and answer lead.
    * ``evidence``: character spans ``(start, end)`` (end exclusive, Python slicing) into ``prefix`` for sva / ra
      and into ``context`` for qa (:attr:`evidence_field`); sorted, non-empty, inside that text. sva: the subject
      of the verb (its head word); ra: the antecedent of the reflexive (the head word of the subject); qa: the first
      annotated answer; needle: the value.
    * ``extra_evidence``: more evaluation masks, name -> character spans into the same text, each scored over the
      ``default`` mask's tokens (needle: ``key``, the key in the needle; a name of
      :data:`palrp_bench.metrics.evidence.EVALUATION_MASKS`).
    * ``target``: the correct word (sva: the verb form in the sentence; ra: the reflexive in the sentence; qa: the
      answer's first word); ``foil``: the contrasted wrong word (sva: the other number of the verb; ra: a
      reflexive of the other number; qa: the first word of another question's answer on the same paragraph).
      The adapter explains ``logit(first token of target) - logit(first token of foil)``.
    * ``meta``: provenance: ``source`` (format read), ``evidence_source`` (``file:<column>``, ``parser:spacy/<model>``
      or ``template``), the row or dataset id, and per-format extras (``n_attractors``, ``title``, ...).
    """

    sample_id: str
    task: str
    target: str
    foil: str
    evidence: tuple[tuple[int, int], ...]
    prefix: str = ""
    suffix: str = ""
    context: str = ""
    question: str = ""
    extra_evidence: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def has_context(self) -> bool:
        """qa and needle: a context read before a question (else a sentence prefix)."""
        return self.task in ("qa", "needle")

    @property
    def evidence_field(self) -> str:
        """The field the evidence spans index: ``context`` for qa and needle, else ``prefix``."""
        return "context" if self.has_context else "prefix"

    @property
    def evidence_text(self) -> str:
        """The text the evidence spans index (:attr:`evidence_field`)."""
        return self.context if self.has_context else self.prefix

    @property
    def sentence(self) -> str:
        """sva / ra: the whole sentence with the target word in place."""
        return f"{self.prefix} {self.target}{self.suffix}"

    @property
    def evidence_words(self) -> list[str]:
        """The evidence as text, one string per span."""
        return [self.evidence_text[a:b] for a, b in self.evidence]

    def to_json(self) -> dict:
        """The record as a JSON object (:func:`save_evidence_jsonl`)."""
        return {"sample_id": self.sample_id, "task": self.task, "prefix": self.prefix, "suffix": self.suffix,
                "context": self.context, "question": self.question, "evidence": [list(s) for s in self.evidence],
                "extra_evidence": {k: [list(s) for s in v] for k, v in self.extra_evidence.items()},
                "target": self.target, "foil": self.foil, "meta": self.meta}


# ------------------------------------------------------------------------------------------------ rendering
@dataclass(frozen=True)
class RenderedEvidence:
    """The text one model head reads, with the evidence and the named regions as character spans into it.

    ``regions`` (end exclusive): sva / ra: ``sentence`` (all of ``text``), ``prefix``, and for masked LMs ``mask``
    (the mask token) and ``suffix``; qa and needle: ``context``, ``question``, and for masked LMs ``mask``. The
    default evaluation mask of the task kind keeps the tokens the text itself has (qa, needle: those of
    ``context``); ``with_question`` adds ``question``. ``extra_evidence``: the sample's, moved into ``text``."""

    text: str
    evidence: tuple[tuple[int, int], ...]
    regions: dict[str, tuple[int, int]]
    extra_evidence: dict[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)


def format_qa_prompt(context: str, question: str) -> str:
    """The qa prompt (:data:`QA_CONTEXT_LEAD` ...): ``"Context: {context}\\nQuestion: {question}\\nAnswer:"``."""
    return f"{QA_CONTEXT_LEAD}{context}{QA_QUESTION_LEAD}{question}{QA_ANSWER_LEAD}"


def render(sample: EvidenceSample, head: str, mask_token: str | None = None) -> RenderedEvidence:
    """What a ``causal`` or ``masked`` head reads for ``sample`` (:class:`RenderedEvidence`).

    causal: sva / ra the prefix; qa the prompt of :func:`format_qa_prompt` (the answer follows it); needle the context,
    :data:`NEEDLE_QUESTION_LEAD` and the question. masked (needs ``mask_token``, e.g. ``tokenizer.mask_token``):
    sva / ra ``prefix + " " + mask + suffix``; qa and needle the causal text followed by ``" " + mask``."""
    if head not in ("causal", "masked"):
        raise BadInputError(f"unknown model head {head!r} for an evidence sample", "use head='causal' or 'masked'")
    if head == "masked" and not mask_token:
        raise BadInputError("a masked LM needs its mask token to render an evidence sample",
                            "pass mask_token=tokenizer.mask_token")
    if sample.has_context:
        if sample.task == "qa":
            start, lead = len(QA_CONTEXT_LEAD), QA_QUESTION_LEAD
            text = format_qa_prompt(sample.context, sample.question)
        else:
            start, lead = 0, NEEDLE_QUESTION_LEAD
            text = f"{sample.context}{lead}{sample.question}"
        q_start = start + len(sample.context) + len(lead)
        regions = {"context": (start, start + len(sample.context)),
                   "question": (q_start, q_start + len(sample.question))}
        if head == "masked":
            regions["mask"] = (len(text) + 1, len(text) + 1 + len(mask_token))
            text = f"{text} {mask_token}"

        def moved(spans):
            return tuple((a + start, b + start) for a, b in spans)

        return RenderedEvidence(text, moved(sample.evidence), regions,
                                {name: moved(spans) for name, spans in sample.extra_evidence.items()})
    n = len(sample.prefix)
    if head == "causal":
        return RenderedEvidence(sample.prefix, tuple(sample.evidence), {"sentence": (0, n), "prefix": (0, n)},
                                dict(sample.extra_evidence))
    text = f"{sample.prefix} {mask_token}{sample.suffix}"
    regions = {"sentence": (0, len(text)), "prefix": (0, n), "mask": (n + 1, n + 1 + len(mask_token)),
               "suffix": (n + 1 + len(mask_token), len(text))}
    return RenderedEvidence(text, tuple(sample.evidence), regions, dict(sample.extra_evidence))


def tokens_overlapping(offsets: Sequence[Sequence[int]], spans: Iterable[Sequence[int]]) -> list[bool]:
    """Per token, whether its character range overlaps one of ``spans`` (a fast tokenizer's
    ``offset_mapping``; spans end exclusive). A token ``[s, e)`` overlaps ``[a, b)`` iff ``s < b`` and ``a < e``;
    tokens with an empty range (BOS, [CLS], [SEP], padding: ``(0, 0)``) overlap nothing. A byte-level BPE token
    whose range includes the space before a word (``" keys"``) therefore counts for that word."""
    spans = [(int(a), int(b)) for a, b in spans]
    out = []
    for s, e in offsets:
        s, e = int(s), int(e)
        out.append(e > s and any(s < b and a < e for a, b in spans))
    return out


# ------------------------------------------------------------------------------------------------ words
_PUNCT = string.punctuation + "\u201c\u201d\u2018\u2019\u2014\u2013"


def first_word(text: str) -> str:
    """The first whitespace-separated word of ``text`` with the punctuation around it removed (``'"Lost" in'`` ->
    ``Lost``; ``1,000 years`` -> ``1,000``); the bare word when only punctuation is left; ``""`` for no word."""
    words = text.split()
    if not words:
        return ""
    return words[0].strip(_PUNCT) or words[0]


def word_span(text: str, word: str, within: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """The character span of the first whole-word occurrence of ``word`` in ``text`` (inside ``within`` if given),
    or None. "Whole word": not preceded or followed by a letter, digit or underscore."""
    if not word:
        return None
    lo, hi = within if within is not None else (0, len(text))
    match = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)").search(text, lo, hi)
    return (match.start(), match.end()) if match else None


def content_sample_id(prefix: str, *parts: str, seen: dict[str, int]) -> str:
    """``{prefix}-{16 hex digits}``: the stable hash (data/sample_ids.py) of ``parts``, for files without an id
    column; the n-th repeat of the same content in a file gets ``-{n}`` appended (``seen`` counts them)."""
    base = f"{prefix}-{stable_hash(chr(31).join(parts)):016x}"
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


# ------------------------------------------------------------------------------------------------ pools
@dataclass(frozen=True)
class Dropped:
    """A candidate row removed at load, with its reason (a key of :data:`DROP_REASONS`)."""

    sample_id: str
    reason: str


class EvidencePool(list):
    """The kept samples in dataset order (a list: a loader's :class:`EvidenceSample`, or the evidence task's
    prepared ones), plus ``dropped``: reason -> number of candidate rows removed at load (:data:`DROP_REASONS` and
    the task's reasons; only reasons that occurred), ``source``: what was read."""

    def __init__(self, samples: Iterable[EvidenceSample] = (), dropped: dict[str, int] | None = None,
                 source: str = ""):
        super().__init__(samples)
        self.dropped: dict[str, int] = dict(dropped or {})
        self.source = source

    @property
    def sample_ids(self) -> list[str]:
        return [s.sample_id for s in self]

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values())

    def __repr__(self) -> str:
        return f"EvidencePool({len(self)} samples, dropped {self.dropped}, source {self.source!r})"


def check_limit(limit) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadInputError(f"limit must be a non-negative int or None, got {limit!r}", "e.g. limit=1000")


def _check_sample(sample: EvidenceSample) -> str | None:
    """The drop reason of a candidate, or None to keep it; malformed records are a :class:`BadInputError`."""
    if sample.task not in EVIDENCE_TASKS:
        raise BadInputError(f"evidence sample {sample.sample_id} has task {sample.task!r}",
                            f"use one of {EVIDENCE_TASKS}")
    if sample.has_context:
        if not sample.context.strip() or not sample.question.strip():
            raise BadInputError(f"{sample.task} sample {sample.sample_id} has an empty context or question",
                                "drop that row from the data file or fix it")
    elif not sample.prefix.strip():
        return "empty_evidence"  # nothing before the predicted word: the subject cannot be there
    if not sample.target.strip():
        raise BadInputError(f"evidence sample {sample.sample_id} has an empty target word",
                            "drop that row from the data file or fix it")
    if not sample.foil.strip():
        return "no_foil"
    if not sample.evidence:
        return "empty_evidence"
    n = len(sample.evidence_text)
    for a, b in itertools.chain(sample.evidence, *sample.extra_evidence.values()):
        if not 0 <= a < b <= n:
            return "evidence_mismatch"
    if sample.target.strip().lower() == sample.foil.strip().lower():
        return "same_target_foil"
    return None


def collect_pool(candidates: Iterable[EvidenceSample | Dropped], limit: int | None, *, what: str,
                 source: str) -> EvidencePool:
    """The first ``limit`` kept samples of ``candidates`` (all when None), counting the drops met on the way
    (candidates already :class:`Dropped` and samples failing the checks: no foil, no evidence, evidence outside its
    text, target equal to foil). Sample ids must be unique (sharding and resume key on them)."""
    check_limit(limit)
    kept: list[EvidenceSample] = []
    dropped: dict[str, int] = {}
    seen: set[str] = set()
    if limit == 0:
        return EvidencePool([], {}, source)
    for candidate in candidates:
        reason = candidate.reason if isinstance(candidate, Dropped) else _check_sample(candidate)
        if candidate.sample_id in seen:
            raise BadInputError(f"{what} contains the id {candidate.sample_id!r} twice",
                                "remove the duplicate row from the data file")
        seen.add(candidate.sample_id)
        if reason is not None:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        candidate.evidence = tuple(sorted((int(a), int(b)) for a, b in candidate.evidence))
        kept.append(candidate)
        if limit is not None and len(kept) >= limit:
            break
    return EvidencePool(kept, dropped, source)


# ------------------------------------------------------------------------------------------------ JSON lines
#: The fields of a saved evidence record (one JSON object per line).
EVIDENCE_JSONL_FIELDS: tuple[str, ...] = ("sample_id", "task", "prefix", "suffix", "context", "question",
                                          "evidence", "extra_evidence", "target", "foil", "meta")


def save_evidence_jsonl(samples: Iterable[EvidenceSample], path: str | Path) -> Path:
    """Write annotated records as JSON lines (fields :data:`EVIDENCE_JSONL_FIELDS`), readable by every evidence
    loader (``task.path=<file>``): e.g. a file annotated once by the spaCy parser."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for sample in samples:
            handle.write(json.dumps(sample.to_json(), ensure_ascii=False) + "\n")
    return path


def is_evidence_jsonl(record: dict) -> bool:
    """Whether a record is a saved evidence record (has ``task``, ``evidence``, ``target`` and ``foil``)."""
    return all(k in record for k in ("task", "evidence", "target", "foil"))


def peek_records(path: str | Path, split: str, fields: Sequence[str], *, what: str,
                 how_to_get: str) -> tuple[set[str], Iterator[dict]]:
    """The fields present in a local table (those of ``fields``; JSON lines give every field of the first record)
    and its records, the first one included, lazily (``iter_local_records`` of data/text_common.py)."""
    records = iter_local_records(path, split, (), what=what, how_to_get=how_to_get, optional=fields)
    first = next(records, None)
    if first is None:
        return set(), iter(())
    return set(first), itertools.chain([first], records)


def read_evidence_jsonl(records: Iterable[dict], task: str, what: str) -> Iterator[EvidenceSample]:
    """:class:`EvidenceSample` of saved records (:func:`save_evidence_jsonl`) of ``task``; a record of another task
    or without the required fields is a one-line :class:`BadInputError`."""
    required = ("sample_id", "task", "evidence", "target", "foil") + (
        ("context", "question") if task in ("qa", "needle") else ("prefix", "suffix"))
    for record in records:
        missing = [k for k in required if k not in record]
        if missing:
            raise BadInputError(f"{what} record lacks the fields {missing}",
                                f"write it with save_evidence_jsonl (fields {list(EVIDENCE_JSONL_FIELDS)})")
        if record["task"] != task:
            raise BadInputError(f"{what} holds a {record['task']!r} record ({record['sample_id']}), not {task!r}",
                                f"pass a file of {task} records")
        meta = dict(record.get("meta") or {})
        meta.setdefault("source", "evidence_jsonl")
        yield EvidenceSample(sample_id=str(record["sample_id"]), task=task, target=str(record["target"]),
                             foil=str(record["foil"]),
                             evidence=tuple((int(a), int(b)) for a, b in record["evidence"]),
                             extra_evidence={str(k): tuple((int(a), int(b)) for a, b in v)
                                             for k, v in (record.get("extra_evidence") or {}).items()},
                             prefix=str(record.get("prefix") or ""), suffix=str(record.get("suffix") or ""),
                             context=str(record.get("context") or ""), question=str(record.get("question") or ""),
                             meta=meta)
