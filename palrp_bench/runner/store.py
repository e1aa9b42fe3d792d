"""Resumable, kill-safe result storage of one shard, and the per-sample explanation cache.

docs/design.md section 6, "Resume": a restarted job skips samples already stored; a killed job never leaves a torn row.

* :class:`ShardStore` appends ONE JSON line per completed sample (all of its result rows at once, with the
  metrics they cover) and calls ``fsync`` before the next sample starts. A line is complete iff it
  ends with ``\\n`` (the last byte written), so a process killed mid-write leaves at most an unterminated tail,
  which the next :meth:`ShardStore.open` truncates away (that sample is then recomputed, once). A sample's
  record is thus either fully stored or absent: no torn rows, no half-written samples, no duplicates. A later
  run that adds a metric to a cell appends a second record for the new metric only.
* Only one process may write a shard's file at a time (an exclusive ``flock`` on ``<file>.lock``); a second
  process on the same shard stops with a clear message instead of interleaving lines.
* :class:`ExplanationCache` keeps each sample's explanation (``.npz``, written to a temporary name then
  renamed, so it is never read half-written) for reuse by later metrics and by the report's heatmaps.
* :class:`BackgroundWriter` does both on a thread of its own, so a job computes the next batch while the last one
  is compressed, written and ``fsync``-ed; closing it writes everything handed to it, also when the job fails.
"""
from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import queue
import threading
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from ..atomic_io import replacing
from ..errors import BadInputError
from ..rundir import explanation_file, read_explanation

log = logging.getLogger(__name__)

STORE_GLOB = "shard-*.jsonl"


def store_name(shard: int, n_shards: int) -> str:
    """File name of a shard's store, e.g. ``shard-003-of-008.jsonl``."""
    return f"shard-{shard:03d}-of-{n_shards:03d}.jsonl"


def _encode_value(value: float | int | None):
    """JSON has no NaN/inf: store them as strings so a non-finite result is kept, not lost."""
    if value is None:
        return None
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _decode_value(value) -> float:
    if value is None:
        return math.nan
    return float(value)  # float("nan"), float("inf") parse the string forms


def encode_record(sample_id: str, order: int, rows: Iterable[tuple], info: dict | None = None,
                  metrics: Iterable[str] = ()) -> dict:
    """The JSON record of one sample evaluated under ``metrics`` (the cell's metric configs it covers):
    ``rows`` are ``(metric, variant, step, value)`` tuples."""
    return {
        "sample_id": sample_id,
        "order": int(order),
        "metrics": sorted(metrics),
        "rows": [[str(m), str(v), _encode_value(s), _encode_value(x)] for m, v, s, x in rows],
        "info": info or {},
    }


def decode_rows(record: dict) -> list[tuple[str, str, float, float]]:
    """``(metric, variant, step, value)`` rows of a stored record (NaN step = a scalar metric)."""
    return [(m, v, _decode_value(s), _decode_value(x)) for m, v, s, x in record["rows"]]


def read_records(path: Path) -> list[dict]:
    """Every complete record of a store file (an unterminated tail from a killed writer is ignored)."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    records = []
    for lineno, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s:%d: skipping an unreadable line", path, lineno)
    return records


def iter_cell_records(cell_dir: Path) -> Iterator[tuple[Path, dict]]:
    """All records of every shard store of a cell directory (any sharding, any earlier run). A sample can have
    several records when later runs added metrics to it."""
    for path in sorted(Path(cell_dir).glob(STORE_GLOB)):
        for record in read_records(path):
            yield path, record


def record_metrics(record: dict) -> list[str]:
    """The metrics a stored record covers (stores written before the key was renamed call it ``protocols``)."""
    return list(record.get("metrics", record.get("protocols", ())))


def stored_metrics(cell_dir: Path) -> dict[str, set[str]]:
    """For every stored sample id, the metrics already stored for it (union over all records)."""
    done: dict[str, set[str]] = {}
    for _, record in iter_cell_records(cell_dir):
        done.setdefault(record["sample_id"], set()).update(record_metrics(record))
    return done


class ShardStore:
    """Append-only JSONL store of one shard (see the module docstring). Use as a context manager."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock_file = None
        self._file = None

    def __enter__(self) -> "ShardStore":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        """Take the shard's lock, drop an unterminated tail left by a killed writer, open for appending."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.path.with_suffix(".lock"), "w")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            self._lock_file = None
            raise BadInputError(f"shard store {self.path} is in use by another running process",
                                "wait for it to finish, or stop it before restarting this shard") from None
        self._truncate_torn_tail()
        self._file = open(self.path, "ab")

    def _truncate_torn_tail(self) -> None:
        if not self.path.exists():
            return
        size = self.path.stat().st_size
        if size == 0:
            return
        with open(self.path, "rb+") as f:
            # scan backwards for the last newline; everything after it is a torn record
            block = 1 << 16
            pos = size
            last_newline = -1
            while pos > 0 and last_newline < 0:
                start = max(0, pos - block)
                f.seek(start)
                chunk = f.read(pos - start)
                idx = chunk.rfind(b"\n")
                if idx >= 0:
                    last_newline = start + idx
                pos = start
            keep = last_newline + 1
            if keep < size:
                log.warning("%s: dropping %d bytes of an interrupted write (that sample is recomputed)",
                            self.path, size - keep)
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())

    def append(self, record: dict) -> None:
        """Write one sample's record as a single line and make it durable (flush + fsync)."""
        if self._file is None:
            raise RuntimeError("ShardStore.append before open()")
        line = json.dumps(record, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None


class ExplanationCache:
    """Per-sample explanation arrays of one cell (``<cell_dir>/explanations/<id>.npz``,
    :func:`palrp_bench.rundir.explanation_file`)."""

    def __init__(self, cell_dir: Path):
        self.cell_dir = Path(cell_dir)

    def path_for(self, sample_id: str) -> Path:
        return explanation_file(self.cell_dir, sample_id)

    def save(self, sample_id: str, arrays: dict[str, np.ndarray]) -> None:
        """Store ``arrays`` atomically (temporary file + rename)."""
        with replacing(self.path_for(sample_id)) as tmp, open(tmp, "wb") as f:
            np.savez_compressed(f, sample_id=np.array(sample_id), **arrays)

    def load(self, sample_id: str) -> dict[str, np.ndarray] | None:
        """The cached arrays of ``sample_id``, or None."""
        return read_explanation(self.path_for(sample_id))


class BackgroundWriter:
    """Writes results into a :class:`ShardStore` (and their explanations into an :class:`ExplanationCache`) on a
    thread of its own, in the order they were handed over: per sample the explanation first, then its record, as
    a job writing them itself would. :meth:`put` returns at once unless ``max_pending`` hand-overs wait already;
    :meth:`close` writes every one handed over (also after the job failed: what was computed is kept) and re-raises
    a write error. After a write error nothing more is written, and the next :meth:`put` raises it."""

    def __init__(self, store: ShardStore, cache: ExplanationCache | None = None, max_pending: int = 4):
        self.store, self.cache = store, cache
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, max_pending))
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write, name="palrp-store-writer", daemon=True)
        self._thread.start()

    def put(self, items: list[tuple[str, dict | None, dict]]) -> None:
        """Hand over ``(sample_id, explanation arrays or None, record)`` of some samples."""
        self._raise()
        self._queue.put(list(items))

    def _write(self) -> None:
        while True:
            items = self._queue.get()
            if items is None:
                return
            if self._error is not None:
                continue
            try:
                for sample_id, explanation, record in items:
                    if self.cache is not None and explanation is not None:
                        self.cache.save(sample_id, explanation)
                    self.store.append(record)
            except BaseException as err:  # noqa: BLE001 - handed to the job's thread
                self._error = err

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self, raise_error: bool = True) -> None:
        """Write what was handed over, stop the thread; re-raise a write error unless ``raise_error`` is False (the
        job is failing already and its own error matters more)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if raise_error:
            self._raise()
