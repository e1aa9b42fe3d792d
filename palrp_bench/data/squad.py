"""SQuAD v2 (Rajpurkar et al. 2018): the reading of its formats, and the ``qa`` task of the evidence benchmark
(docs/evaluation.md, "Evidence data").

**Reading** (:func:`iter_squad`, shared by every SQuAD v2 task): flat rows ``id, title, context, question,
answers{text, answer_start}`` in file order, from

* the official nested JSON (``train-v2.0.json`` / ``dev-v2.0.json``: ``data`` -> ``paragraphs`` -> ``qas``, with
  ``is_impossible``), a file or a folder holding it;
* the hub's flat rows (``rajpurkar/squad_v2``: ``squad_v2/{train,validation}-*.parquet``, JSON lines, CSV, a
  ``save_to_disk`` folder), or the hub itself when ``path`` is None.

``answerable_only`` keeps the questions with at least one answer (``is_impossible`` false).

**The qa task** (:func:`load_qa`): the answerable questions of the ``train`` split by default (the
decomposition-attribution paper's qa set has 40k samples; SQuAD v2's validation split holds only 5,928 answerable
questions, its train split 86,821), in a seeded random order (``numpy.random.default_rng(seed).permutation`` over
the kept samples in file order, ``seed`` = ``task.options.seed``, default :data:`QA_ORDER_SEED`), so the first
``limit`` form a uniform random sample; ``split=validation`` reads the validation split the same way. Saved
evidence records keep their file order (a selection already made). Each answerable question becomes an
:class:`~palrp_bench.data.evidence_common.EvidenceSample` with the paragraph as ``context``; evidence = the first
answer's span ``[answer_start, answer_start + len(text))`` in the context (a span whose text is not the answer is
dropped, ``evidence_mismatch``). The paper gives no prompt, foil or correctness rule; ours:

* prompt: ``"Context: {context}\\nQuestion: {question}\\nAnswer:"`` (evidence_common.format_qa_prompt); the
  answer's first word follows it.
* target: the first word of the first answer (:func:`~palrp_bench.data.evidence_common.first_word`: whitespace
  split, surrounding punctuation removed).
* foil: the first word of the answer of another answerable question on the same paragraph: the next one in
  file order (cyclically) whose first word differs from the target, case-insensitively (:func:`paragraph_foils`).
  It is a span of the same context that answers a different question, so the contrast asks what in the context
  makes the model prefer this answer over another candidate of the same text; it depends on the data only, never
  on a model. A paragraph with no such other answer gives no foil (dropped, ``no_foil``).
* correct: logit(first token of the target) > logit(first token of the foil) at the answer position (the task
  kind's ``correct_only``).

``sample_id`` = ``qa-{SQuAD id}``; ``meta``: ``title``, ``answer`` (the full first answer), ``foil_id`` (the question
whose answer gave the foil), ``split``, ``source``, ``evidence_source = "file:answer_start"``.

**The AttnLRP protocol's samples** (:func:`load_squad_attnlrp`, ``task.dataset=squad``; the task ``squad_attnlrp``,
AttnLRP paper appendix B.1: "4000 randomly selected validation dataset samples (fixed set for all baselines)"):
every question of the split, unanswerable ones included (B.1 draws from the validation samples, about half of
which SQuAD v2 marks unanswerable; the explained output, the model's first answer token, exists for every
question), or with ``answerable_only`` the answerable ones, in the order of a seeded permutation
(``numpy.random.default_rng(seed).permutation`` over those questions in file order, ``seed`` =
``task.options.seed``, recorded with the task in the manifest), so the first ``pool_size`` form a uniform random
sample and any prefix is itself one. Each becomes an :class:`~palrp_bench.data.evidence_common.EvidenceSample`
with no foil (the protocol explains the model's own first answer token); an answerable question has evidence =
the first answer's span (a span whose text is not the answer is dropped, ``evidence_mismatch``) and ``target`` =
the answer's first word, an unanswerable one no evidence and an empty target. ``meta["answers"]`` holds every
annotated answer (none for an unanswerable question: correctness, evaluation/tasks/seq2seq_qa.py),
``meta["answerable"]`` whether there is one, ``meta["order_seed"]`` the seed. ``sample_id`` = ``squad-{SQuAD id}``.

**Exact match** (:func:`squad_exact_match`): SQuAD's official answer normalisation (``evaluate-v2.0.py``:
lower case, punctuation removed, the articles ``a``, ``an``, ``the`` removed, whitespace collapsed), then equality
with any of the annotated answers.
"""
from __future__ import annotations

import json
import re
import string
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import BadInputError, MissingDataError
from .evidence_common import (EVIDENCE_JSONL_FIELDS, Dropped, EvidencePool, EvidenceSample, check_limit,
                              collect_pool, first_word, is_evidence_jsonl, peek_records,
                              read_evidence_jsonl)
from .registry import Option, register_dataset
from .text_common import hub_records, load_hub_dataset

HF_NAME = "rajpurkar/squad_v2"
#: The hub's splits and the official file of each.
OFFICIAL_FILES: dict[str, str] = {"train": "train-v2.0.json", "validation": "dev-v2.0.json"}
#: Fields of a flat row.
SQUAD_COLUMNS: tuple[str, ...] = ("id", "title", "context", "question", "answers")
DEFAULT_SPLIT = "validation"
#: the split of the evidence benchmark's qa task (:func:`load_qa`) and the seed of its random order
QA_DEFAULT_SPLIT = "train"
QA_ORDER_SEED = 0
#: the seed of the AttnLRP protocol's random order of the answerable questions (:func:`load_squad_attnlrp`)
ATTNLRP_ORDER_SEED = 0

__all__ = ["iter_squad", "squad_answers", "paragraph_foils", "load_qa", "load_squad_attnlrp", "OFFICIAL_FILES",
           "ATTNLRP_ORDER_SEED", "QA_DEFAULT_SPLIT", "QA_ORDER_SEED", "normalize_answer", "squad_exact_match"]


def _how_to_get(split: str) -> str:
    return (f"download SQuAD v2 ({OFFICIAL_FILES.get(split, 'dev-v2.0.json')} or {HF_NAME} "
            f"squad_v2/{split}-*.parquet) and pass path=<file or folder>, or run once with network access")


def squad_answers(row: dict) -> tuple[list[str], list[int]]:
    """``(texts, starts)`` of a flat row's ``answers`` (``{"text": [...], "answer_start": [...]}``)."""
    answers = row.get("answers")
    if isinstance(answers, str):  # a CSV copy stores the struct as JSON
        answers = json.loads(answers)
    if not isinstance(answers, dict) or "text" not in answers or "answer_start" not in answers:
        raise BadInputError(f"SQuAD row {row.get('id')!r} has no answers{{text, answer_start}}",
                            "use the hub's flat rows or the official nested JSON")
    return [str(t) for t in answers["text"]], [int(s) for s in answers["answer_start"]]


def _nested_rows(data: dict) -> Iterator[dict]:
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                yield {"id": str(qa["id"]), "title": str(article.get("title", "")), "context": paragraph["context"],
                       "question": qa["question"],
                       "answers": {"text": [a["text"] for a in answers],
                                   "answer_start": [int(a["answer_start"]) for a in answers]}}


def _official_file(path: Path, split: str) -> Path | None:
    """The candidate official nested JSON for ``split``: ``path`` itself when it is a ``.json`` file, else the
    split's official file name found under the folder ``path``."""
    if path.is_file():
        return path if path.suffix == ".json" else None
    if path.is_dir() and split in OFFICIAL_FILES:
        found = sorted(path.rglob(OFFICIAL_FILES[split]))
        return found[0] if found else None
    return None


def _squad_rows(path: str | Path | None, split: str) -> tuple[Iterable[dict], str]:
    """All flat rows of ``split`` (answerable or not) and the format read: ``squad_hub``, ``squad_json`` (the
    official nested JSON) or ``squad_rows`` (a local copy of the flat rows)."""
    how = _how_to_get(split)
    if path is None:
        dataset = load_hub_dataset(HF_NAME, None, split=split, what="SQuAD v2", how_to_get=how)
        return hub_records(dataset, name=HF_NAME, how_to_get=how), "squad_hub"
    local = Path(path).expanduser()
    other = next((name for name, file in OFFICIAL_FILES.items() if name != split and local.name == file), None)
    if local.is_file() and other is not None:
        raise BadInputError(f"{local} is SQuAD v2's {other} file, but the task reads split={split}",
                            f"set task.options.split={other}, or pass {OFFICIAL_FILES[split]}")
    official = _official_file(local, split)
    if official is not None:
        try:
            data = json.loads(official.read_text(encoding="utf-8"))
        except json.JSONDecodeError:  # JSON lines under a .json name: flat rows
            data = None
        if isinstance(data, dict) and "data" in data:
            return _nested_rows(data), "squad_json"
        local = official
    if local.is_dir() and (local / "squad_v2").is_dir():
        local = local / "squad_v2"
    present, rows = peek_records(local, split, SQUAD_COLUMNS + EVIDENCE_JSONL_FIELDS, what="SQuAD v2",
                                 how_to_get=how)
    if is_evidence_jsonl(dict.fromkeys(present)):
        raise BadInputError(f"{local} holds saved evidence records, not SQuAD rows",
                            "read it with the qa dataset (load_qa)")
    missing = [c for c in SQUAD_COLUMNS if c not in present and c != "title"]
    if missing:
        raise BadInputError(f"SQuAD v2 file {local} lacks the fields {missing} (has {sorted(present)})",
                            f"use the official nested JSON (data -> paragraphs -> qas) or the hub's flat rows "
                            f"{list(SQUAD_COLUMNS)}")
    return rows, "squad_rows"


def iter_squad(path: str | Path | None = None, split: str = DEFAULT_SPLIT, *,
               answerable_only: bool = True) -> Iterator[dict]:
    """SQuAD v2 flat rows of ``split`` in file order (module docstring); ``answerable_only`` drops questions
    without an answer. Saved evidence records are not SQuAD rows: use :func:`load_qa` for those."""
    rows, _ = _squad_rows(path, split)
    for row in rows:
        if answerable_only and not squad_answers(row)[0]:
            continue
        yield row


def paragraph_foils(first_words: Sequence[str]) -> list[int | None]:
    """For each question of a paragraph (its answer's first word, in file order), the index of the question whose
    answer gives its foil: the next one, cyclically, whose first word differs case-insensitively; None if none."""
    out: list[int | None] = []
    n = len(first_words)
    for j, word in enumerate(first_words):
        out.append(next((k % n for k in range(j + 1, j + n) if first_words[k % n].lower() != word.lower()), None))
    return out


def _span_holds_answer(context: str, answer: str, start: int) -> bool:
    """The first answer's text is where ``answer_start`` says (else the sample is dropped, ``evidence_mismatch``)."""
    return bool(answer.strip()) and context[start:start + len(answer)] == answer


def _paragraphs(rows: Iterable[dict]) -> Iterator[list[dict]]:
    """Consecutive rows with the same title and context (one paragraph of the official file)."""
    block: list[dict] = []
    for row in rows:
        if block and (row["context"] != block[0]["context"] or row.get("title") != block[0].get("title")):
            yield block
            block = []
        block.append(row)
    if block:
        yield block


def _qa_candidates(rows: Iterable[dict], split: str, source: str) -> Iterator[EvidenceSample | Dropped]:
    for block in _paragraphs(rows):
        answers = [squad_answers(row) for row in block]
        words = [first_word(texts[0]) for texts, _ in answers]
        foils = paragraph_foils(words)
        for row, (texts, starts), word, foil in zip(block, answers, words, foils):
            sample_id = f"qa-{row['id']}"
            context, answer, start = str(row["context"]), texts[0], starts[0]
            if not _span_holds_answer(context, answer, start):
                yield Dropped(sample_id, "evidence_mismatch")
                continue
            meta = {"source": source, "evidence_source": "file:answer_start", "split": split,
                    "title": str(row.get("title") or ""), "answer": answer,
                    "foil_id": None if foil is None else str(block[foil]["id"])}
            yield EvidenceSample(sample_id=sample_id, task="qa", target=word,
                                 foil="" if foil is None else words[foil], evidence=((start, start + len(answer)),),
                                 context=context, question=str(row["question"]), meta=meta)


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BadInputError(f"seed must be a non-negative int, got {seed!r}", "set task.options.seed, e.g. 0")
    return int(seed)


def load_qa(path: str | Path | None = None, split: str = QA_DEFAULT_SPLIT, limit: int | None = None,
            seed: int = QA_ORDER_SEED) -> EvidencePool:
    """The first ``limit`` kept qa samples of SQuAD v2 ``split`` in the seeded random order (module docstring), drops
    counted over the whole split (:class:`~palrp_bench.data.evidence_common.EvidencePool`); ``path`` may also be
    saved evidence records (read in file order)."""
    check_limit(limit)
    if split not in OFFICIAL_FILES:
        raise BadInputError(f"unknown SQuAD v2 split {split!r}", f"use one of {sorted(OFFICIAL_FILES)}")
    seed = _check_seed(seed)
    if path is not None:
        local = Path(path).expanduser()
        if local.is_file() and local.suffix == ".jsonl":
            present, records = peek_records(local, "", EVIDENCE_JSONL_FIELDS + SQUAD_COLUMNS, what="qa",
                                            how_to_get=_how_to_get(split))
            if is_evidence_jsonl(dict.fromkeys(present)):
                return collect_pool(read_evidence_jsonl(records, "qa", f"qa file {local}"), limit,
                                    what=f"qa file {local}", source="evidence_jsonl")
    rows, source = _squad_rows(path, split)
    answerable = (row for row in rows if squad_answers(row)[0])
    pool = collect_pool(_qa_candidates(answerable, split, source), None, what="SQuAD v2", source=source)
    order = np.random.default_rng(seed).permutation(len(pool))[:limit]
    for i in order:
        pool[int(i)].meta["order_seed"] = seed
    return EvidencePool([pool[int(i)] for i in order], pool.dropped, source)


#: answerable questions of each split (the qa pool before ``task.pool_size``), and all questions
ANSWERABLE: dict[str, int] = {"validation": 5928, "train": 86821}
QUESTIONS: dict[str, int] = {"validation": 11873, "train": 130319}
#: where the official SQuAD v2 files are published
SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset/"
#: mean real tokens of a qa prompt under LLaMA tokenizers (the decomposition-attribution paper: at least 193, plus
#: the question); of the AttnLRP protocol's prompt under Flan-T5's tokenizer, and of its context alone (an estimate:
#: paragraphs of about 120 words and questions of about 10 at about 1.4 SentencePiece tokens per word, plus the
#: prompt's 7 tokens and EOS)
QA_PROMPT_TOKENS, SQUAD_PROMPT_TOKENS, SQUAD_CONTEXT_TOKENS = 210, 200, 180
_SPLIT = Option("split", DEFAULT_SPLIT, "validation or train")


def _check_qa(task, options, findings) -> None:
    """The file read up to its first kept sample."""
    load_qa(task.path, split=options["split"], limit=1, seed=options["seed"])


@register_dataset("qa", options=(Option("split", QA_DEFAULT_SPLIT, "train or validation"),
                                 Option("seed", QA_ORDER_SEED, "seed of the random order")), hub=HF_NAME,
                  local_copy="<squad> (train-v2.0.json, or a folder holding squad_v2/train-*.parquet; "
                             "task.options.split=validation: dev-v2.0.json)",
                  pool_size=lambda options: ANSWERABLE.get(options["split"]), tokens=QA_PROMPT_TOKENS,
                  check=_check_qa)
def _qa_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=qa``: options ``split`` (``train``, the default, or ``validation``) and ``seed`` (the random
    order, default :data:`QA_ORDER_SEED`)."""
    return load_qa(path, split=str(options["split"]), limit=limit, seed=options["seed"])


def _check_flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise BadInputError(f"{name} must be true or false, got {value!r}", f"set task.options.{name}=true or false")
    return bool(value)


def load_squad_attnlrp(path: str | Path | None = None, split: str = DEFAULT_SPLIT, limit: int | None = None,
                       seed: int = ATTNLRP_ORDER_SEED, answerable_only: bool = False) -> EvidencePool:
    """The first ``limit`` questions of SQuAD v2 ``split`` (with ``answerable_only`` the answerable ones) in the
    seeded random order of the AttnLRP protocol (module docstring), drops counted."""
    check_limit(limit)
    if split not in OFFICIAL_FILES:
        raise BadInputError(f"unknown SQuAD v2 split {split!r}", f"use one of {sorted(OFFICIAL_FILES)}")
    seed = _check_seed(seed)
    answerable_only = _check_flag(answerable_only, "answerable_only")
    rows, source = _squad_rows(path, split)
    kept: list[EvidenceSample] = []
    dropped: dict[str, int] = {}
    for row in rows:
        texts, starts = squad_answers(row)
        if not texts and answerable_only:
            continue
        context = str(row["context"])
        meta = {"source": source, "split": split, "title": str(row.get("title") or ""), "answers": texts,
                "answerable": bool(texts), "order_seed": int(seed)}
        if not texts:
            kept.append(EvidenceSample(sample_id=f"squad-{row['id']}", task="qa", target="", foil="", evidence=(),
                                       context=context, question=str(row["question"]), meta=meta))
            continue
        answer, start = texts[0], starts[0]
        if not _span_holds_answer(context, answer, start):
            dropped["evidence_mismatch"] = dropped.get("evidence_mismatch", 0) + 1
            continue
        kept.append(EvidenceSample(
            sample_id=f"squad-{row['id']}", task="qa", target=first_word(answer) or answer, foil="",
            evidence=((start, start + len(answer)),), context=context, question=str(row["question"]),
            meta={**meta, "evidence_source": "file:answer_start", "answer": answer}))
    order = np.random.default_rng(int(seed)).permutation(len(kept))
    chosen = [kept[int(i)] for i in order[:limit]]
    return EvidencePool(chosen, dropped, source)


def _squad_pool(options) -> int | None:
    """Questions the AttnLRP protocol draws from: every question of the split, or its answerable ones."""
    return (ANSWERABLE if options["answerable_only"] else QUESTIONS).get(options["split"])


def _check_squad(task, options, findings) -> None:
    """A readable SQuAD v2 split with at least ``pool_size`` questions (the AttnLRP protocol draws its random sample
    from them; with ``answerable_only`` from the answerable ones)."""
    split = options["split"]
    official = OFFICIAL_FILES.get(split, "dev-v2.0.json")
    path_fix = (findings.fix(f"task.path=<{official}>")
                + f" (the official file, a folder holding it, or the hub's squad_v2/{split}-*.parquet; download "
                  f"{SQUAD_URL}{official})")
    try:
        pool = load_squad_attnlrp(task.path, split=split, seed=options["seed"],
                                  answerable_only=options["answerable_only"])
    except (MissingDataError, BadInputError) as err:
        findings.add(f"SQuAD v2 file {task.path} ({task.name}): {err.problem}", path_fix)
        return
    if task.pool_size is not None and len(pool) < task.pool_size:
        what = "answerable questions" if options["answerable_only"] else "questions"
        findings.add(f"{task.path} holds {len(pool):,} {what}, fewer than pool_size={task.pool_size:,} "
                     f"({task.name})", f"{path_fix}, or {findings.fix(f'task.pool_size={len(pool)}')}")


@register_dataset("squad", options=(_SPLIT, Option("seed", ATTNLRP_ORDER_SEED, "seed of the random order"),
                                    Option("answerable_only", False, "keep only the answerable questions")),
                  hub=HF_NAME, local_copy="<dev-v2.0.json>", pool_size=_squad_pool,
                  tokens=SQUAD_PROMPT_TOKENS, context_tokens=SQUAD_CONTEXT_TOKENS, check=_check_squad)
def _squad_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=squad``: options ``split`` (``validation``, the default, or ``train``), ``seed`` (the random
    order, default :data:`ATTNLRP_ORDER_SEED`) and ``answerable_only`` (default false: every question)."""
    return load_squad_attnlrp(path, split=str(options["split"]), limit=limit, seed=options["seed"],
                              answerable_only=options["answerable_only"])


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation (module docstring, "Exact match")."""
    text = "".join(ch for ch in str(text).lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, answers: Sequence[str]) -> bool:
    """Whether ``prediction`` equals one of ``answers`` after :func:`normalize_answer` (SQuAD's exact match)."""
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(a) for a in answers)
