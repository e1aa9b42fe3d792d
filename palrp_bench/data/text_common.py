"""Helpers shared by the text loaders (IMDB, ARC-Easy, Wikipedia, the synthetic text suite).

* Tokenising exactly as the official code did (docs/protocol.md section 2): the tokenizer's own special tokens
  (``add_special_tokens=True``, so BOS first for LLaMA tokenizers) and the tokenizer's own truncation to
  ``max_length`` *including* BOS; IMDB then right-pads with the EOS id (``pad = eos``).
* Reading local copies of the datasets in their published formats (Hugging Face parquet shards, JSON lines,
  CSV, ``datasets.save_to_disk`` folders), so every loader works offline.
* Reaching the Hugging Face hub without hanging: offline mode (``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``)
  is honoured, an unreachable hub is detected with one short probe instead of the library's minute of retries,
  and every failure becomes a one-line :class:`~palrp_bench.errors.MissingDataError` that says how to get the data.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import BadInputError, MissingDataError
from ..hub import HUB_PROBE_TIMEOUT, hub_endpoint, hub_offline, hub_reachable  # noqa: F401 (re-exported)
from .base import TextSample

#: Environment variable naming the folder where dataset files live when a loader gets no ``path``.
DATA_DIR_ENV = "PALRP_DATA_DIR"
#: File suffixes read as tables (a split's rows).
TABLE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv")
#: Seconds to wait for the hub probe before declaring it unreachable.

__all__ = [
    "DATA_DIR_ENV", "default_data_dir", "one_line", "check_tokenizer", "check_max_length", "encode_with_bos",
    "pad_right", "attention_mask", "check_unique_ids", "find_split_files", "iter_local_records",
    "hub_offline", "hub_reachable", "load_hub_dataset", "hub_records", "real_token_count",
]


def default_data_dir() -> Path:
    """Folder holding manually downloaded dataset files: ``$PALRP_DATA_DIR``, else ``~/palrp_data``."""
    return Path(os.environ.get(DATA_DIR_ENV) or "~/palrp_data").expanduser()


def one_line(text: Any, limit: int = 200) -> str:
    """``text`` squeezed onto one line (error messages must be one line)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------------- tokenising
def check_tokenizer(tokenizer: Any) -> None:
    """Raise :class:`BadInputError` unless ``tokenizer`` is a Hugging Face tokenizer object with a BOS token."""
    if tokenizer is None or not callable(tokenizer) or not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise BadInputError(f"tokenizer must be a transformers tokenizer object, got {type(tokenizer).__name__}",
                            "pass e.g. AutoTokenizer.from_pretrained(<model>) or load_tiny_tokenizer()")
    if getattr(tokenizer, "bos_token_id", None) is None:
        raise BadInputError(f"tokenizer {type(tokenizer).__name__} has no BOS token",
                            "set tokenizer.bos_token (docs/protocol.md section 2 feeds BOS first)")


def check_max_length(max_length: int | None, *, allow_none: bool = False) -> None:
    """``max_length`` must be an int >= 2 (BOS plus one token), or None when ``allow_none``."""
    if max_length is None and allow_none:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise BadInputError(f"max_length must be an int >= 2, got {max_length!r}", "use e.g. max_length=512")


def encode_with_bos(tokenizer: Any, text: str, *, max_length: int | None, what: str) -> tuple[list[int], bool]:
    """Token ids of ``text`` with BOS first, at most ``max_length`` long (BOS included); and whether it was cut.

    Uses the tokenizer's own special tokens and truncation (``tokenizer(text, add_special_tokens=True,
    truncation=True, max_length=max_length)``), as the official loaders did. A tokenizer that does not add BOS
    by itself gets it prepended (docs/protocol.md section 2: BOS is always part of the input). ``what`` names the
    sample in error messages.
    """
    if not isinstance(text, str) or not text.strip():
        raise BadInputError(f"{what} has an empty text", "drop that row from the data file or fix it")
    bos = tokenizer.bos_token_id
    full = list(tokenizer(text, add_special_tokens=True)["input_ids"])
    if not full or full[0] != bos:
        full = [bos] + full
    if max_length is None or len(full) <= max_length:
        return full, False
    cut = list(tokenizer(text, add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"])
    if not cut or cut[0] != bos:
        cut = [bos] + cut
    return cut[:max_length], True


def pad_right(input_ids: Sequence[int], length: int, pad_id: int) -> tuple[list[int], int]:
    """``input_ids`` right-padded with ``pad_id`` to ``length``; returns ``(ids, n_pad)``."""
    n_pad = length - len(input_ids)
    if n_pad < 0:
        raise BadInputError(f"sequence of {len(input_ids)} tokens is longer than the padded length {length}",
                            "raise max_length or truncate first")
    return list(input_ids) + [int(pad_id)] * n_pad, n_pad


def real_token_count(sample: TextSample) -> int:
    """Real tokens of a (right-padded) sample, BOS included: ``meta["n_tokens"]``, else all of ``input_ids``."""
    return int(sample.meta.get("n_tokens", len(sample.input_ids)))


def attention_mask(sample: TextSample) -> list[int]:
    """The ``[1] * n_tokens + [0] * n_pad`` mask of a (right-padded) sample (:func:`real_token_count`)."""
    n_tokens = real_token_count(sample)
    return [1] * n_tokens + [0] * (len(sample.input_ids) - n_tokens)


def check_unique_ids(samples: Iterable[TextSample], what: str) -> None:
    """Sample ids drive sharding and resume (docs/design.md): duplicates in a data file are an error."""
    seen: set[str] = set()
    for sample in samples:
        if sample.sample_id in seen:
            raise BadInputError(f"{what} contains the id {sample.sample_id!r} twice",
                                "remove the duplicate row from the data file")
        seen.add(sample.sample_id)


# ----------------------------------------------------------------------------------------------- local files
def _is_saved_dataset(path: Path) -> bool:
    """A folder written by ``datasets`` ``save_to_disk`` (a Dataset or a DatasetDict)."""
    return path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file())


def _matches_split(file: Path, split: str) -> bool:
    name = file.name
    return any(name.startswith(split + sep) for sep in ("-", ".", "_"))


def find_split_files(path: Path, split: str, *, what: str, how_to_get: str) -> list[Path]:
    """The files holding ``split`` under ``path``, in order.

    ``path`` may be one table file (used as is), a ``save_to_disk`` folder (returned as is), or a folder
    searched recursively for ``{split}-*.parquet`` / ``{split}.jsonl`` / ``{split}_*.csv``-style names
    (the Hugging Face hub layout, e.g. ``ARC-Easy/train-00000-of-00001.parquet``), sorted by path.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise MissingDataError(f"{what} not found at {path}", how_to_get)
    if path.is_file() or _is_saved_dataset(path):
        return [path]
    files = sorted(p for p in path.rglob("*")
                   if p.is_file() and p.suffix in TABLE_SUFFIXES and _matches_split(p, split))
    if not files:
        raise MissingDataError(f"no {split!r} split file ({'/'.join(TABLE_SUFFIXES)}) for {what} under {path}",
                               how_to_get)
    return files


def _read_json_records(file: Path) -> Iterator[dict]:
    if file.suffix == ".jsonl":
        with file.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)
        return
    text = file.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:  # JSON lines stored under a .json name (as `Dataset.to_json` writes them)
        yield from (json.loads(line) for line in text.splitlines() if line.strip())
        return
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        keys = list(data)
        yield from (dict(zip(keys, row)) for row in zip(*(data[k] for k in keys)))
    elif isinstance(data, list):
        yield from data
    else:
        raise BadInputError(f"{file} is neither a list of records nor a dict of columns",
                            "write it as JSON lines, one record per line")


def _iter_file_records(file: Path, split: str, columns: Sequence[str]) -> Iterator[dict]:
    if _is_saved_dataset(file):
        import datasets

        loaded = datasets.load_from_disk(str(file))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise MissingDataError(f"{file} has no {split!r} split (has {sorted(loaded)})",
                                       "save the split under that name")
            loaded = loaded[split]
        yield from loaded.select_columns(list(columns))
        return
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(str(file))
        for batch in parquet.iter_batches(batch_size=256, columns=list(columns)):
            yield from batch.to_pylist()
        return
    if file.suffix == ".csv":
        import pandas as pd

        yield from pd.read_csv(file, usecols=list(columns)).to_dict("records")
        return
    yield from _read_json_records(file)


def _columns_to_read(file: Path, columns: Sequence[str], optional: Sequence[str], what: str) -> list[str]:
    """``columns`` plus the ``optional`` ones the file has; fails early, with the list, if a required one is
    missing (cheap: schema / header / first record only)."""
    if _is_saved_dataset(file):
        import datasets

        loaded = datasets.load_from_disk(str(file))
        features = next(iter(loaded.values())).features if isinstance(loaded, datasets.DatasetDict) else \
            loaded.features
        present = set(features)
    elif file.suffix == ".parquet":
        import pyarrow.parquet as pq

        present = set(pq.ParquetFile(str(file)).schema_arrow.names)
    elif file.suffix == ".csv":
        import pandas as pd

        present = set(pd.read_csv(file, nrows=0).columns)
    else:
        first = next(iter(_read_json_records(file)), None)
        present = set(first) if isinstance(first, dict) else set()
    missing = [c for c in columns if c not in present]
    if missing:
        raise BadInputError(f"{what} file {file} lacks the columns {missing} (has {sorted(present)})",
                            f"use the published format with columns {list(columns) + list(optional)}")
    return list(columns) + [c for c in optional if c in present]


def iter_local_records(path: str | Path, split: str, columns: Sequence[str], *, what: str, how_to_get: str,
                       optional: Sequence[str] = ()) -> Iterator[dict]:
    """Records (dicts with ``columns`` and whichever ``optional`` columns exist) of ``split`` from a local copy,
    lazily and in file order. Parquet files are streamed batch by batch, so reading the first rows of a large
    shard is cheap."""
    files = find_split_files(Path(path), split, what=what, how_to_get=how_to_get)
    for file in files:
        wanted = _columns_to_read(file, columns, optional, what)
        try:
            yield from _iter_file_records(file, split, wanted)
        except (OSError, ValueError, KeyError) as exc:
            if isinstance(exc, (BadInputError, MissingDataError)):
                raise
            raise MissingDataError(f"cannot read {what} file {file}: {one_line(exc)}",
                                   f"re-download it; {how_to_get}") from None


# ----------------------------------------------------------------------------------------------- the hub
def load_hub_dataset(name: str, config: str | None = None, *, split: str | None = None, streaming: bool = False,
                     what: str, how_to_get: str):
    """``datasets.load_dataset(name, config, split=..., streaming=...)`` that never hangs on a dead network.

    In offline mode only the local cache is used. Otherwise the hub is probed once first; if it does not
    answer, or loading fails for any network/file reason, a one-line :class:`MissingDataError` is raised
    whose fix names ``how_to_get`` (e.g. "download X and pass path=...").
    """
    offline = hub_offline("dataset")
    if not offline and not hub_reachable():
        raise MissingDataError(f"cannot reach the Hugging Face hub ({hub_endpoint()}) to load {name}",
                               f"{how_to_get}; or set HF_DATASETS_OFFLINE=1 to use a cached copy")
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    try:
        return datasets.load_dataset(name, config, split=split, streaming=streaming)
    except (ConnectionError, OSError, DatasetNotFoundError, ValueError) as exc:
        where = "from the local cache (offline mode)" if offline else "from the hub"
        raise MissingDataError(f"cannot load {what} ({name}) {where}: {one_line(exc, 120)}", how_to_get) from None


def hub_records(rows: Iterable[dict], *, name: str, how_to_get: str) -> Iterator[dict]:
    """Iterate a (possibly streaming) hub dataset, turning network failures mid-stream into MissingDataError."""
    try:
        yield from rows
    except (ConnectionError, OSError) as exc:
        raise MissingDataError(f"lost the connection while reading {name}: {one_line(exc, 120)}",
                               how_to_get) from None
