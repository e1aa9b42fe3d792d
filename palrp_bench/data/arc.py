"""ARC-Easy multiple-choice QA for Table 3, left (docs/protocol.md section 2, "MCQA").

Questions of ``allenai/ai2_arc`` config ``ARC-Easy``: the train split then the test split, keeping only answer
keys ``A``-``D`` (numeric keys and ``E`` are dropped), each rendered with the official prompt::

    The following is multiple choice question (with answers).\\n\\n{question}\\nA. {a}\\nB. {b}\\nC. {c}\\nD. {d}
    \\n\\nPlease make sure to answer (A,B,C, or D)\\nAnswer is:

and tokenised with the tokenizer's special tokens (BOS first), no chat template, no truncation, no padding.
As in the official code, the options are all of the question's choices lettered ``A, B, C, ...`` in order, so
the few ARC-Easy questions with 3 or 5 choices get 3 or 5 option lines. ``label`` is the index of the answer
letter (``A -> 0``); ``meta["answer_letter"]`` the letter. ``sample_id`` = ``arc-easy-{ARC id}``.

The evaluation keeps only correctly answered questions, the first 1000 (:func:`select_correct`). A prediction
is read the official way (:func:`answer_letter_from_token`): the arg-max next token's string, its last
character if it is longer than one character, must be one of ``A``-``D`` (so ``"ĠB"`` and ``"▁B"`` read as
``B``, and so does any other token ending in ``B``).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import BadInputError
from .base import TextSample
from .text_common import (TextPool, check_tokenizer, check_unique_ids, encode_batch_with_bos, first_record,
                          hub_records, iter_local_records, load_hub_dataset)
from .registry import register_dataset

HF_NAME = "allenai/ai2_arc"
HF_CONFIG = "ARC-Easy"
#: Splits used, in this order (docs/protocol.md: train then test).
ARC_SPLITS: tuple[str, ...] = ("train", "test")
ANSWER_LETTERS: tuple[str, ...] = ("A", "B", "C", "D")
#: The fixed parts of the official prompt around the question and its options.
MCQA_PROMPT_HEAD = "The following is multiple choice question (with answers).\n\n"
MCQA_PROMPT_TAIL = "\n\nPlease make sure to answer (A,B,C, or D)\nAnswer is:"
#: How many correctly answered questions the evaluation keeps.
OFFICIAL_CORRECT_LIMIT = 1000
#: questions of ARC-Easy's train and test splits (2,251 + 2,376; those with 3 or 5 choices or numeric keys included)
ARC_EASY_SIZE = 4627
#: mean real tokens of the official prompt (header, question, four options, footer) under LLaMA tokenizers
MEAN_PROMPT_TOKENS = 90
#: Required columns; ``choices`` is optional only because the original AI2 JSONL nests it in ``question``.
_COLUMNS = ("id", "question", "answerKey")
_OPTIONAL = ("choices",)

__all__ = ["ANSWER_LETTERS", "format_mcqa_prompt", "load_arc_easy", "answer_letter_from_token",
           "predicted_letter", "select_correct", "write_hub_layout"]


def format_mcqa_prompt(question: str, choices: Sequence[str]) -> str:
    """The official MCQA prompt: header, question, one ``\\n{letter}. {choice}`` line per choice, footer."""
    options = "".join(f"\n{chr(ord('A') + i)}. {choice}" for i, choice in enumerate(choices))
    return f"{MCQA_PROMPT_HEAD}{question}{options}{MCQA_PROMPT_TAIL}"


def _how_to_get() -> str:
    return (f"download {HF_NAME} ({HF_CONFIG}/train-*.parquet and test-*.parquet) and pass path=<folder>, "
            "or run once with network access to fill the Hugging Face cache")


def _normalise(record: dict) -> tuple[str, str, list[str], str]:
    """``(id, question, choice texts, answer key)`` from the Hugging Face record (or the original AI2 JSONL
    record, whose question is ``{"stem": ..., "choices": [{"text", "label"}, ...]}``)."""
    question, choices = record["question"], record.get("choices")
    if isinstance(question, dict):
        choices = {"text": [c["text"] for c in question["choices"]]}
        question = question["stem"]
    if not isinstance(choices, dict) or "text" not in choices:
        raise BadInputError(f"ARC record {record.get('id')!r} has no choices.text",
                            "use the Hugging Face columns id/question/choices{text,label}/answerKey")
    return str(record["id"]), str(question), [str(t) for t in choices["text"]], str(record["answerKey"]).strip()


def _records(path: str | Path | None) -> list[tuple[str, dict]]:
    """``(split, record)`` pairs: the train split then the test split (a single file is one table, as is)."""
    how = _how_to_get()
    if path is None:
        dataset = load_hub_dataset(HF_NAME, HF_CONFIG, what="ARC-Easy", how_to_get=how)
        return [(split, record) for split in ARC_SPLITS
                for record in hub_records(dataset[split], name=HF_NAME, how_to_get=how)]
    return [(label, record) for label, table, split in _local_tables(path)
            for record in iter_local_records(table, split, _COLUMNS, what=f"ARC-Easy {split}".strip(),
                                             how_to_get=how, optional=_OPTIONAL)]


def _local_tables(path: str | Path) -> list[tuple[str, Path, str]]:
    """``(label, table, split)`` of a local copy: one table (a file or a saved single Dataset) taken as the whole
    ordered list, else the train and test splits of a folder (inside ``ARC-Easy/`` in the hub layout)."""
    path = Path(path).expanduser()
    if path.is_file() or (path / "state.json").is_file():
        return [("file", path, "")]
    if (path / HF_CONFIG).is_dir():
        path = path / HF_CONFIG
    return [(split, path, split) for split in ARC_SPLITS]


def _check_copy(task, options, findings) -> None:
    """The head of each table of a local copy: the columns ``id, question, answerKey`` and one readable record."""
    for _, table, split in _local_tables(task.path):
        _normalise(first_record(table, split, _COLUMNS, what=f"ARC-Easy {split}".strip(), how_to_get=_how_to_get(),
                                optional=_OPTIONAL))


def load_arc_easy(tokenizer: Any, path: str | Path | None = None, limit: int | None = None) -> TextPool:
    """ARC-Easy questions with answer key A-D, train then test, as official MCQA prompts (docs/protocol.md section 2),
    tokenised when first used (a :class:`~palrp_bench.data.text_common.TextPool`).

    ``path``: a folder with ``train-*.parquet`` and ``test-*.parquet`` (or ``.jsonl``), possibly inside an
    ``ARC-Easy/`` subfolder (the hub layout), a ``save_to_disk`` folder, or one file taken as the complete,
    ordered question list. ``None``: the hub (or its cache with ``HF_DATASETS_OFFLINE=1``). ``limit`` keeps the
    first questions (``None``: all, as the evaluation needs them until 1000 are answered correctly).
    """
    check_tokenizer(tokenizer)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadInputError(f"limit must be a non-negative int or None, got {limit!r}", "e.g. limit=None")
    questions = []
    for split, record in _records(path):
        if limit is not None and len(questions) >= limit:
            break
        arc_id, question, choices, key = _normalise(record)
        if key not in ANSWER_LETTERS:
            continue
        questions.append((f"arc-easy-{arc_id}", split, question, choices, key, format_mcqa_prompt(question, choices)))

    def build(positions: list[int]) -> list[TextSample]:
        chosen = [questions[p] for p in positions]
        encoded = encode_batch_with_bos(tokenizer, [q[5] for q in chosen], max_length=None,
                                        whats=[q[0] for q in chosen])
        return [TextSample(sample_id=sample_id, input_ids=ids, label=ANSWER_LETTERS.index(key),
                           meta={"answer_letter": key, "question": question, "choices": choices,
                                 "n_choices": len(choices), "source_split": split, "prompt": prompt,
                                 "n_tokens": len(ids), "n_pad": 0})
                for (sample_id, split, question, choices, key, prompt), (ids, _) in zip(chosen, encoded)]

    pool = TextPool([q[0] for q in questions], build)
    check_unique_ids(pool, "ARC-Easy")
    return pool


def answer_letter_from_token(token: str | None) -> str | None:
    """The answer letter a generated token stands for, the official way, or None.

    A token string longer than one character is reduced to its last character; the result counts if it is
    one of ``A``-``D`` (``"A"``, ``"ĠA"``, ``"▁A"`` -> ``"A"``; ``"Ġis"`` -> None).
    """
    if not token:
        return None
    letter = token[-1] if len(token) > 1 else token
    return letter if letter in ANSWER_LETTERS else None


def predicted_letter(tokenizer: Any, token_id: int) -> str | None:
    """:func:`answer_letter_from_token` of ``tokenizer.convert_ids_to_tokens(token_id)``."""
    return answer_letter_from_token(tokenizer.convert_ids_to_tokens(int(token_id)))


def select_correct(samples: Sequence[TextSample], predicted_letters: Iterable[str | None],
                   limit: int = OFFICIAL_CORRECT_LIMIT) -> list[TextSample]:
    """The first ``limit`` samples whose predicted letter equals ``meta["answer_letter"]`` (docs/protocol.md section 2).

    ``predicted_letters`` is aligned with ``samples`` (use :func:`predicted_letter` on the arg-max token; None
    for "not an answer letter"). It may be a lazy iterable: it is consumed only until ``limit`` samples are
    kept, so a generator running the model stops as early as the official loop did.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise BadInputError(f"limit must be a non-negative int, got {limit!r}", "e.g. limit=1000")
    if hasattr(predicted_letters, "__len__") and len(predicted_letters) != len(samples):  # type: ignore[arg-type]
        raise BadInputError(f"{len(predicted_letters)} predictions for {len(samples)} samples",  # type: ignore
                            "pass one predicted letter (or None) per sample, in order")
    kept: list[TextSample] = []
    if limit == 0:
        return kept
    for sample, letter in zip(samples, predicted_letters):
        if "answer_letter" not in sample.meta:
            raise BadInputError(f"sample {sample.sample_id} has no meta['answer_letter']",
                                "pass samples from load_arc_easy() or make_synthetic_mcqa()")
        if letter is not None and letter == sample.meta["answer_letter"]:
            kept.append(sample)
            if len(kept) == limit:
                break
    return kept


def write_hub_layout(folder: str | Path, splits: dict[str, list[dict]]) -> None:
    """``split -> records`` (columns ``id``, ``question``, ``choices{text, label}``, ``answerKey``) as the hub's
    ``ARC-Easy/{split}-00000-of-00001.parquet`` (what ``task.path`` takes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(folder) / HF_CONFIG
    out.mkdir(parents=True, exist_ok=True)
    for split, records in splits.items():
        pq.write_table(pa.Table.from_pylist(list(records)), out / f"{split}-00000-of-00001.parquet")


@register_dataset(
    "arc", hub=HF_NAME, local_copy="<arc> (a folder holding ARC-Easy/train-*.parquet and test-*.parquet)",
    pool_size=ARC_EASY_SIZE, tokens=MEAN_PROMPT_TOKENS, check=_check_copy)
def _arc_dataset(path, limit, options, tokenizer) -> TextPool:
    """``task.dataset=arc``: ARC-Easy with the official prompt (no options)."""
    return load_arc_easy(tokenizer, path=path, limit=limit)
