"""IMDB movie reviews for the sentiment task of Tables 1-2 (docs/protocol.md section 2, "IMDB").

Two sources:

* ``kaggle_csv`` (the official one): the Kaggle "IMDB Dataset of 50K Movie Reviews" CSV (columns ``review``,
  ``sentiment``). Labels ``positive -> 0``, ``negative -> 1``. Rows are split as
  ``sklearn.model_selection.train_test_split(df, test_size=0.3, random_state=42)`` (re-implemented here with
  numpy so sklearn is not a runtime dependency; a test pins it to sklearn) and the evaluation uses the first
  5000 rows of the test part in that split's (shuffled) order. ``sample_id`` = ``imdb-{split}-{position:05d}``,
  the position in that order (``meta["csv_row"]`` keeps the CSV row).
* ``hf``: the Hugging Face ``stanfordnlp/imdb`` dataset (or a local copy: its parquet files / a
  ``save_to_disk`` folder). Its labels (``0 = neg, 1 = pos``) are mapped to the same convention as above
  (``positive -> 0``). Its splits are sorted by label, so rows are visited in the order of
  ``numpy.random.RandomState(42).permutation`` (our choice; the official code never used this source).
  ``sample_id`` = ``imdb-hf-{split}-{row:05d}`` with the dataset's own row index.

Tokenisation as the official loader: tokenizer special tokens (BOS), truncation to ``max_length = 512``
tokens including BOS, right padding to ``max_length`` with the EOS id (``pad = eos``). Reviews are tokenised when
first used (a run of 48 samples tokenises about 48 of the 5000), many per tokenizer call
(:class:`~palrp_bench.data.text_common.TextPool`); the texts are checked when loaded. ``meta`` carries
``n_tokens`` (the attention-mask length, i.e. real tokens incl. BOS), ``n_pad``, ``truncated`` and the text.
With ``pad_to_max=False`` the official ``--no-padding`` variant is approximated: no padding, but still
truncated to ``max_length`` (the official code did not truncate in that mode).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from ..errors import BadInputError, MissingDataError
from ..findings import Findings
from .base import TextSample
from .text_common import (TextPool, check_max_length, check_text, check_tokenizer, check_unique_ids,
                          default_data_dir, encode_batch_with_bos, first_record, hub_records, iter_local_records,
                          load_hub_dataset, pad_right)
from .registry import Option, register_dataset

#: Label index -> sentiment name (official mapping: positive -> 0, negative -> 1).
IMDB_LABELS: tuple[str, ...] = ("positive", "negative")
#: The official split: test fraction and random state of ``train_test_split``.
OFFICIAL_TEST_SIZE = 0.3
OFFICIAL_RANDOM_STATE = 42
#: The official evaluation visits the first 5000 test rows; the official finetuning used the first 5000 train rows.
OFFICIAL_LIMIT = 5000
IMDB_MAX_LENGTH = 512
KAGGLE_CSV_NAME = "IMDB Dataset.csv"
KAGGLE_URL = "https://www.kaggle.com/datasets/lakshmi25npathi/imdb-dataset-of-50k-movie-reviews"
HF_NAME = "stanfordnlp/imdb"
#: Seed of the row order used for the label-sorted Hugging Face splits.
HF_ORDER_SEED = 42

ImdbSource = Literal["kaggle_csv", "hf"]

__all__ = ["IMDB_LABELS", "ImdbSplits", "load_imdb", "imdb_splits", "official_split_indices",
           "default_kaggle_csv_path", "write_kaggle_csv", "write_hub_layout"]


@dataclass
class _Row:
    sample_id: str
    text: str
    label: int
    meta: dict


@dataclass
class ImdbSplits:
    """Rows for finetuning: ``train`` and ``validation`` (see :func:`imdb_splits` for what the latter is)."""

    train: list[TextSample]
    validation: list[TextSample]
    validation_kind: str


def default_kaggle_csv_path() -> Path:
    """Where the Kaggle CSV is looked for when no path is given: ``$PALRP_DATA_DIR/imdb/IMDB Dataset.csv``."""
    return default_data_dir() / "imdb" / KAGGLE_CSV_NAME


def official_split_indices(n_rows: int, test_size: float = OFFICIAL_TEST_SIZE,
                           random_state: int = OFFICIAL_RANDOM_STATE) -> tuple[np.ndarray, np.ndarray]:
    """Row indices ``(train, test)`` of ``train_test_split(range(n_rows), test_size, random_state)``.

    sklearn's ShuffleSplit: ``n_test = ceil(test_size * n)``, one ``RandomState(random_state).permutation(n)``,
    test = its first ``n_test`` entries, train = the rest, both in permutation order.
    """
    if n_rows < 2:
        raise BadInputError(f"the IMDB table has {n_rows} rows", "use the full Kaggle CSV (50,000 rows)")
    n_test = math.ceil(test_size * n_rows)
    permutation = np.random.RandomState(random_state).permutation(n_rows)
    return permutation[n_test:], permutation[:n_test]


def _kaggle_how_to_get(path: Path) -> str:
    return (f"download '{KAGGLE_CSV_NAME}' from {KAGGLE_URL} and pass path=<file> "
            f"(or put it at {path})")


def _read_kaggle_csv(path: str | Path | None):
    import pandas as pd

    csv = Path(path).expanduser() if path is not None else default_kaggle_csv_path()
    if csv.is_dir():
        csv = csv / KAGGLE_CSV_NAME
    if not csv.is_file():
        raise MissingDataError(f"IMDB CSV not found at {csv}", _kaggle_how_to_get(csv))
    try:
        frame = pd.read_csv(csv)
    except (OSError, ValueError) as exc:
        raise MissingDataError(f"cannot read IMDB CSV {csv} ({type(exc).__name__})",
                               _kaggle_how_to_get(csv)) from None
    missing = [c for c in ("review", "sentiment") if c not in frame.columns]
    if missing:
        raise BadInputError(f"IMDB CSV {csv} lacks the columns {missing}",
                            f"use the Kaggle file '{KAGGLE_CSV_NAME}' (columns review, sentiment)")
    unknown = sorted(set(map(str, frame["sentiment"])) - set(IMDB_LABELS))
    if unknown:
        raise BadInputError(f"IMDB CSV {csv} has sentiment values {unknown[:3]}",
                            "sentiment must be 'positive' or 'negative' as in the Kaggle file")
    return frame


def _kaggle_rows(frame, indices: np.ndarray, split: str) -> list[_Row]:
    reviews = frame["review"].to_numpy()
    sentiments = frame["sentiment"].to_numpy()
    return [_Row(sample_id=f"imdb-{split}-{position:05d}", text=str(reviews[row]),
                 label=IMDB_LABELS.index(str(sentiments[row])),
                 meta={"source": "kaggle_csv", "split": split, "position": position, "csv_row": int(row)})
            for position, row in enumerate(indices)]


def _hf_how_to_get() -> str:
    return (f"download the {HF_NAME} parquet files (plain_text/{{train,test}}-*.parquet) and pass path=<folder>, "
            "or use source='kaggle_csv'")


def _hf_split_rows(path: str | Path | None, split: str) -> list[_Row]:
    how = _hf_how_to_get()
    if path is None:
        dataset = load_hub_dataset(HF_NAME, split=split, what="IMDB", how_to_get=how)
        records = list(hub_records(dataset.select_columns(["text", "label"]), name=HF_NAME, how_to_get=how))
    else:
        records = list(iter_local_records(path, split, ("text", "label"), what="IMDB (Hugging Face format)",
                                          how_to_get=how))
    rows = []
    order = np.random.RandomState(HF_ORDER_SEED).permutation(len(records))
    for position, row in enumerate(order):
        record = records[row]
        hf_label = int(record["label"])
        if hf_label not in (0, 1):
            raise BadInputError(f"IMDB {split} row {row} has label {hf_label}",
                                "use the labelled 'train' or 'test' split (0 = neg, 1 = pos)")
        rows.append(_Row(sample_id=f"imdb-hf-{split}-{int(row):05d}", text=str(record["text"]),
                         label=IMDB_LABELS.index("positive" if hf_label == 1 else "negative"),
                         meta={"source": "hf", "split": split, "position": position, "hf_row": int(row),
                               "hf_label": hf_label}))
    return rows


def _check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise BadInputError(f"unknown IMDB split {split!r}", "use 'train' or 'test' (imdb_splits() carves a "
                                                              "validation split)")


def _check_source(source: str) -> None:
    if source not in ("kaggle_csv", "hf"):
        raise BadInputError(f"unknown IMDB source {source!r}", "use 'kaggle_csv' (official) or 'hf'")


def _check_limit(limit: int | None, name: str = "limit") -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadInputError(f"{name} must be a non-negative int or None, got {limit!r}", f"e.g. {name}=5000")


def _tokenise(rows: list[_Row], tokenizer: Any, max_length: int, pad_to_max: bool) -> TextPool:
    """The rows as a :class:`TextPool`: texts checked now, tokenised when first used, many per tokenizer call."""
    pad_id = tokenizer.eos_token_id
    if pad_id is None:
        raise BadInputError(f"tokenizer {type(tokenizer).__name__} has no EOS token",
                            "set tokenizer.eos_token (IMDB pads with EOS, docs/protocol.md section 2)")
    for row in rows:
        check_text(row.text, row.sample_id)

    def build(positions: list[int]) -> list[TextSample]:
        chosen = [rows[p] for p in positions]
        encoded = encode_batch_with_bos(tokenizer, [r.text for r in chosen], max_length=max_length,
                                        whats=[r.sample_id for r in chosen])
        samples = []
        for row, (ids, truncated) in zip(chosen, encoded):
            n_tokens = len(ids)
            ids, n_pad = pad_right(ids, max_length, pad_id) if pad_to_max else (ids, 0)
            meta = dict(row.meta, n_tokens=n_tokens, n_pad=n_pad, truncated=truncated, text=row.text,
                        label_name=IMDB_LABELS[row.label])
            samples.append(TextSample(sample_id=row.sample_id, input_ids=ids, label=row.label, meta=meta))
        return samples

    pool = TextPool([r.sample_id for r in rows], build)
    check_unique_ids(pool, "IMDB")
    return pool


def _ordered_rows(source: str, path: str | Path | None, split: str, frame=None) -> list[_Row]:
    """All rows of ``split`` in evaluation order (the official split order for the CSV)."""
    if source == "hf":
        return _hf_split_rows(path, split)
    frame = _read_kaggle_csv(path) if frame is None else frame
    train, test = official_split_indices(len(frame))
    return _kaggle_rows(frame, train if split == "train" else test, split)


def load_imdb(source: ImdbSource = "kaggle_csv", path: str | Path | None = None, split: str = "test",
              limit: int | None = OFFICIAL_LIMIT, *, tokenizer: Any, max_length: int = IMDB_MAX_LENGTH,
              pad_to_max: bool = True) -> TextPool:
    """The first ``limit`` IMDB rows of ``split`` in evaluation order, tokenised (docs/protocol.md section 2) when
    first used: a :class:`~palrp_bench.data.text_common.TextPool` (``list(...)`` tokenises them all).

    Defaults are the official evaluation set: Kaggle CSV, test part of the 70/30 split, first 5000 rows,
    right-padded to 512 with EOS. ``label`` is 0 for positive, 1 for negative. ``path``: the CSV (or its
    folder) for ``kaggle_csv``; a folder with ``{split}-*.parquet`` (hub layout) / a ``save_to_disk`` folder /
    a parquet file for ``hf`` (``None``: the hub, or its cache when ``HF_DATASETS_OFFLINE=1``).
    """
    _check_source(source)
    _check_split(split)
    _check_limit(limit)
    check_tokenizer(tokenizer)
    check_max_length(max_length)
    rows = _ordered_rows(source, path, split)
    rows = rows if limit is None else rows[:limit]
    return _tokenise(rows, tokenizer, max_length, pad_to_max)


def imdb_splits(tokenizer: Any, *, source: ImdbSource = "kaggle_csv", path: str | Path | None = None,
                train_size: int = OFFICIAL_LIMIT, validation: Literal["train_holdout", "official_test"] =
                "train_holdout", validation_size: int | None = None, max_length: int = IMDB_MAX_LENGTH,
                pad_to_max: bool = True) -> ImdbSplits:
    """Training and model-selection rows for finetuning an IMDB classifier (docs/protocol.md section 2).

    ``train``: the first ``train_size`` rows of the train part (official recipe: 5000). ``validation``:

    * ``"train_holdout"`` (default, the clean choice): the ``validation_size`` (default 1000) train-part rows
      that follow the training rows, so model selection never sees the evaluation rows;
    * ``"official_test"``: the first ``validation_size`` (default 5000) test rows, the rows the official
      script selected its checkpoint on (which are also the evaluation rows).
    """
    _check_source(source)
    check_tokenizer(tokenizer)
    check_max_length(max_length)
    if isinstance(train_size, bool) or not isinstance(train_size, int) or train_size < 1:
        raise BadInputError(f"train_size must be a positive int, got {train_size!r}", "e.g. train_size=5000")
    _check_limit(validation_size, "validation_size")
    if validation not in ("train_holdout", "official_test"):
        raise BadInputError(f"unknown IMDB validation {validation!r}", "use 'train_holdout' or 'official_test'")
    frame = _read_kaggle_csv(path) if source == "kaggle_csv" else None
    train_rows = _ordered_rows(source, path, "train", frame)
    if validation == "train_holdout":
        size = 1000 if validation_size is None else validation_size
        validation_rows = train_rows[train_size:train_size + size]
    else:
        size = OFFICIAL_LIMIT if validation_size is None else validation_size
        validation_rows = _ordered_rows(source, path, "test", frame)[:size]
    if not validation_rows:
        raise BadInputError(f"no IMDB rows left for validation ({len(train_rows)} train rows, train_size="
                            f"{train_size})", "lower train_size or use validation='official_test'")
    return ImdbSplits(train=list(_tokenise(train_rows[:train_size], tokenizer, max_length, pad_to_max)),
                      validation=list(_tokenise(validation_rows, tokenizer, max_length, pad_to_max)),
                      validation_kind=validation)


# -------------------------------------------------------------------------------------------------- writers
def write_kaggle_csv(path: str | Path, reviews: Sequence[str], sentiments: Sequence[str]) -> None:
    """Reviews and their sentiments (``positive`` | ``negative``) as the Kaggle CSV this module reads (columns
    ``review``, ``sentiment``)."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"review": list(reviews), "sentiment": list(sentiments)}).to_csv(path, index=False)


def write_hub_layout(folder: str | Path, splits: dict[str, tuple[Sequence[str], Sequence[int]]]) -> None:
    """``split -> (texts, labels)`` (0 = neg, 1 = pos) as the hub's ``plain_text/{split}-00000-of-00001.parquet``
    (what ``source=hf`` reads from ``task.path``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(folder) / "plain_text"
    out.mkdir(parents=True, exist_ok=True)
    for split, (texts, labels) in splits.items():
        pq.write_table(pa.table({"text": list(texts), "label": [int(x) for x in labels]}),
                       out / f"{split}-00000-of-00001.parquet")


#: mean real tokens per review under LLaMA tokenizers: about 1,300 characters at ~4 characters per token, truncated
#: at 512
MEAN_REVIEW_TOKENS = 290
#: rows of the Kaggle CSV and of each split of the hub's copy (the pool of a split before ``task.pool_size``)
KAGGLE_ROWS = 50000
HF_SPLIT_ROWS = 25000


def _pool_size(options: dict) -> int:
    """The rows of ``split`` in evaluation order: the Kaggle file's 30 % test part (or the rest), the hub's split."""
    if options["source"] == "hf":
        return HF_SPLIT_ROWS
    n_test = math.ceil(OFFICIAL_TEST_SIZE * KAGGLE_ROWS)
    return n_test if options["split"] == "test" else KAGGLE_ROWS - n_test


def _check_copy(task, options: dict, findings: Findings) -> None:
    """The preflight's reading of ``task.path``: the Kaggle CSV's header and row count (its test part must hold the
    pool), or the head of the hub's parquet layout."""
    if options["source"] == "hf":  # a local copy in the hub's parquet layout
        how = f"a folder with plain_text/{options['split']}-*.parquet of {HF_NAME}"
        try:
            first_record(Path(task.path).expanduser(), options["split"], ("text", "label"),
                         what="IMDB (Hugging Face format)", how_to_get=how)
        except (MissingDataError, BadInputError) as err:
            findings.add(f"IMDB ({HF_NAME} layout) at {task.path} ({task.name}): {err.problem}",
                         findings.fix("task.path=<folder>") + f" ({how})")
        return
    import pandas as pd

    csv = Path(task.path).expanduser()
    if csv.is_dir():
        csv = csv / KAGGLE_CSV_NAME
    path_fix = findings.fix("task.path=<csv>") + f" (the Kaggle '{KAGGLE_CSV_NAME}': {KAGGLE_URL})"
    if not csv.is_file():
        findings.add(f"IMDB CSV {csv} ({task.name}): no such file", path_fix)
        return
    try:
        missing = [c for c in ("review", "sentiment") if c not in pd.read_csv(csv, nrows=0).columns]
        n_rows = None if missing else len(pd.read_csv(csv, usecols=["sentiment"]))
    except (OSError, ValueError, UnicodeDecodeError) as err:
        findings.add(f"IMDB CSV {csv} ({task.name}) cannot be read as the Kaggle file "
                     f"({str(err).splitlines()[0][:80]})", path_fix)
        return
    if missing:
        findings.add(f"IMDB CSV {csv} ({task.name}) lacks the columns {missing}", path_fix)
        return
    n_test = math.ceil(OFFICIAL_TEST_SIZE * n_rows)
    if task.pool_size is not None and n_test < task.pool_size:
        findings.add(f"IMDB CSV {csv} has {n_rows} rows: its test part ({n_test}) is smaller than the pool of "
                     f"{task.pool_size} ({task.name}; the Kaggle file has 50,000 rows)",
                     path_fix + f", or {findings.fix(f'task.pool_size={n_test}')}")


@register_dataset(
    "imdb",
    options=(Option("source", "kaggle_csv", "kaggle_csv (the official Kaggle CSV) or hf (stanfordnlp/imdb)"),
             Option("split", "test", "test or train"),
             Option("max_length", IMDB_MAX_LENGTH, "tokens per review, BOS included; reviews are padded to it")),
    hub=lambda options: HF_NAME if options["source"] == "hf" else None,
    local_copy="<csv>", pool_size=_pool_size, tokens=MEAN_REVIEW_TOKENS,
    padded_length=lambda options: options["max_length"],
    check=_check_copy)
def _imdb_dataset(path, limit, options, tokenizer) -> TextPool:
    """``task.dataset=imdb``: options ``source`` (kaggle_csv | hf), ``split``, ``max_length``."""
    return load_imdb(source=options["source"], path=path, split=options["split"], limit=limit, tokenizer=tokenizer,
                     max_length=int(options["max_length"]))
