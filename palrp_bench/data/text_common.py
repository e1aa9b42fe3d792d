"""Helpers shared by the text loaders (IMDB, ARC-Easy, Wikipedia, the synthetic text suite).

* Tokenising exactly as the official code did (docs/protocol.md section 2): the tokenizer's own special tokens
  (``add_special_tokens=True``, so BOS first for LLaMA tokenizers) and the tokenizer's own truncation to
  ``max_length`` *including* BOS; IMDB then right-pads with the EOS id (``pad = eos``). Many texts go to the
  tokenizer in one call (:func:`encode_batch_with_bos`: what a fast tokenizer is fast at), with the same ids as
  one call per text.
* Tokenising only what a run uses: a :class:`TextPool` knows its sample ids (sharding, selection, resume need
  nothing else) and tokenises a sample when it is first touched, a batch or a selection chunk per tokenizer call.
* Reading local copies of the datasets in their published formats (Hugging Face parquet shards, JSON lines,
  CSV, ``datasets.save_to_disk`` folders), so every loader works offline.
* Reaching the Hugging Face hub without hanging: offline mode (``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``)
  is honoured, an unreachable hub is detected with one short probe instead of the library's minute of retries,
  and every failure becomes a one-line :class:`~palrp_bench.errors.MissingDataError` that says how to get the data.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
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
    "encode_batch_with_bos", "check_text", "TextPool", "pad_right", "attention_mask", "check_unique_ids", "find_split_files", "iter_local_records",
    "hub_offline", "hub_reachable", "load_hub_dataset", "hub_records", "real_token_count", "first_record",
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


def check_text(text: Any, what: str) -> str:
    """``text`` if it is a non-empty string, else a one-line :class:`BadInputError` naming the sample ``what``."""
    if not isinstance(text, str) or not text.strip():
        raise BadInputError(f"{what} has an empty text", "drop that row from the data file or fix it")
    return text


def encode_with_bos(tokenizer: Any, text: str, *, max_length: int | None, what: str) -> tuple[list[int], bool]:
    """Token ids of ``text`` with BOS first, at most ``max_length`` long (BOS included); and whether it was cut.

    Uses the tokenizer's own special tokens and truncation (``tokenizer(text, add_special_tokens=True,
    truncation=True, max_length=max_length)``), as the official loaders did. A tokenizer that does not add BOS
    by itself gets it prepended (docs/protocol.md section 2: BOS is always part of the input). ``what`` names the
    sample in error messages. One text of :func:`encode_batch_with_bos`.
    """
    return encode_batch_with_bos(tokenizer, [text], max_length=max_length, whats=[what])[0]


def encode_batch_with_bos(tokenizer: Any, texts: Sequence[str], *, max_length: int | None,
                          whats: Sequence[str]) -> list[tuple[list[int], bool]]:
    """:func:`encode_with_bos` of every text, in at most two calls of the tokenizer on the whole list: all texts
    untruncated, then the ones longer than ``max_length`` again with the tokenizer's truncation. A tokenizer
    encodes each text of a list as it encodes it alone (no padding is asked for), so the ids are those of one
    call per text."""
    texts = [check_text(text, what) for text, what in zip(texts, whats, strict=True)]
    if not texts:
        return []
    bos = tokenizer.bos_token_id

    def with_bos(ids) -> list[int]:
        ids = list(ids)
        return ids if ids and ids[0] == bos else [bos] + ids

    out: list[tuple[list[int], bool] | None] = []
    long = []
    for i, ids in enumerate(tokenizer(texts, add_special_tokens=True)["input_ids"]):
        ids = with_bos(ids)
        if max_length is None or len(ids) <= max_length:
            out.append((ids, False))
        else:
            out.append(None)
            long.append(i)
    if long:
        cut = tokenizer([texts[i] for i in long], add_special_tokens=True, truncation=True,
                        max_length=max_length)["input_ids"]
        for i, ids in zip(long, cut):
            out[i] = (with_bos(ids)[:max_length], True)
    return out  # type: ignore[return-value]


#: samples per tokenizer call when a :class:`TextPool` is iterated
TOKENIZE_CHUNK = 256


class TextPool(Sequence):
    """A text data set in dataset order whose samples are tokenised when first touched (module docstring).

    ``sample_ids`` and ``len`` need no tokenizer. ``pool[i]`` tokenises sample ``i`` (once: samples are kept);
    ``pool[a:b]`` is a pool of those samples sharing what is tokenised; iterating and :meth:`load_many` tokenise
    :data:`TOKENIZE_CHUNK` samples per call. ``build(positions)`` returns the :class:`TextSample` of those dataset
    positions, tokenised together (e.g. with :func:`encode_batch_with_bos`)."""

    def __init__(self, sample_ids: Sequence[str], build: Callable[[list[int]], list[TextSample]]):
        self._ids = list(sample_ids)
        self._build = build
        self._done: dict[int, TextSample] = {}
        self._positions: range = range(len(self._ids))

    @property
    def sample_ids(self) -> list[str]:
        return [self._ids[p] for p in self._positions]

    @property
    def n_tokenised(self) -> int:
        """Samples of the whole data set tokenised so far."""
        return len(self._done)

    def __len__(self) -> int:
        return len(self._positions)

    def _tokenise(self, positions: Sequence[int]) -> None:
        missing = [p for p in positions if p not in self._done]
        for start in range(0, len(missing), TOKENIZE_CHUNK):
            chunk = missing[start:start + TOKENIZE_CHUNK]
            self._done.update(zip(chunk, self._build(chunk), strict=True))

    def load_many(self, indices: Sequence[int]) -> list[TextSample]:
        """The samples at ``indices`` (of this pool or view), tokenised together where not done yet
        (:data:`TOKENIZE_CHUNK` per tokenizer call); the loaders of :mod:`palrp_bench.runner.loader` call it."""
        positions = [self._positions[i] for i in indices]
        self._tokenise(positions)
        return [self._done[p] for p in positions]

    def __getitem__(self, index):
        if isinstance(index, slice):
            view = object.__new__(TextPool)
            view._ids, view._build, view._done = self._ids, self._build, self._done
            view._positions = self._positions[index]
            return view
        position = self._positions[index]
        self._tokenise([position])
        return self._done[position]

    def __iter__(self) -> Iterator[TextSample]:
        for start in range(0, len(self._positions), TOKENIZE_CHUNK):
            block = self._positions[start:start + TOKENIZE_CHUNK]
            self._tokenise(block)
            yield from (self._done[p] for p in block)

    def __eq__(self, other) -> bool:
        """Equal to a list (or pool) of the same samples, as the list this replaces was."""
        if not isinstance(other, (TextPool, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TextPool({len(self)} samples, {self.n_tokenised} tokenised)"


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


def check_unique_ids(samples: Iterable[TextSample] | TextPool, what: str) -> None:
    """Sample ids drive sharding and resume (docs/design.md): duplicates in a data file are an error (a
    :class:`TextPool` is checked without tokenising it)."""
    seen: set[str] = set()
    ids = samples.sample_ids if isinstance(samples, TextPool) else (s.sample_id for s in samples)
    for sample_id in ids:
        if sample_id in seen:
            raise BadInputError(f"{what} contains the id {sample_id!r} twice",
                                "remove the duplicate row from the data file")
        seen.add(sample_id)


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
    if path.is_file() and path.suffix not in TABLE_SUFFIXES:
        raise BadInputError(f"{what} file {path} is not a table file ({', '.join(TABLE_SUFFIXES)})",
                            f"pass the published format (docs/data.md); {how_to_get}")
    if path.is_file() or _is_saved_dataset(path):
        return [path]
    files = sorted(p for p in path.rglob("*")
                   if p.is_file() and p.suffix in TABLE_SUFFIXES and _matches_split(p, split))
    if not files:
        raise MissingDataError(f"no {split!r} split file ({'/'.join(TABLE_SUFFIXES)}) for {what} under {path}",
                               how_to_get)
    return files


def _json_line(file: Path, number: int, line: str) -> dict:
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise BadInputError(f"{file} line {number} is not JSON ({err.msg})",
                            'write one JSON record per line (JSON lines), e.g. {"id": 1, "text": "..."}') from None


def _read_json_records(file: Path) -> Iterator[dict]:
    if file.suffix == ".jsonl":
        with file.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    yield _json_line(file, number, line)
        return
    text = file.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:  # JSON lines stored under a .json name (as `Dataset.to_json` writes them)
        yield from (_json_line(file, number, line) for number, line in enumerate(text.splitlines(), 1)
                    if line.strip())
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


def first_record(path: str | Path, split: str, columns: Sequence[str], *, what: str, how_to_get: str,
                 optional: Sequence[str] = ()) -> dict:
    """The first record of ``split`` in a local copy, read as :func:`iter_local_records` reads it (the preflight's
    check of a file's head: the format, the columns, one parsed record); a copy without records is a one-line
    :class:`BadInputError`."""
    first = next(iter_local_records(path, split, columns, what=what, how_to_get=how_to_get, optional=optional), None)
    if first is None:
        raise BadInputError(f"{what} at {path} holds no records", how_to_get)
    return first


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
