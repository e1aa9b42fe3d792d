"""Which samples of a task's pool are evaluated (docs/protocol.md section 2 selection rules), shard-independently.

* ``selection=all``: the pool in dataset order.
* ``selection=correct_only`` (MCQA): the correctly predicted samples, the first ``select_count`` of them.
* ``selection=until_correct`` (IMDB): every sample up to and including the ``select_count``-th correct one
  ("stop after 1000 correct predictions, all processed samples count").

The prediction-dependent rules need one plain forward per candidate. They run over the pool in dataset order in
chunks of a FIXED size (:data:`SELECTION_CHUNK`, independent of ``runner.batch_size`` and of sharding, aligned
at the start of the pool), so every shard of every run arrives at the same per-candidate flags. They stop as
soon as the list is known:

* without a cap, when the rule is satisfied (or the pool is exhausted);
* with ``runner.max_samples = N``, as soon as the first N entries of the full rule's list are known: for
  ``correct_only`` when ``min(N, select_count)`` candidates were correct; for ``until_correct`` after N
  candidates (the list is the pool prefix up to the ``select_count``-th correct one, so its first N entries are
  the first N candidates unless that one came earlier, which the flags seen so far show). The capped list is
  therefore always the first N of the uncapped one.

The flags (one bool per candidate, in pool order, with the candidates' sample ids) are cached in the user's cache
(:func:`palrp_bench.runner.user_cache.user_cache_dir` ``/selection/<key>.json``), shared by every run directory.
The key hashes what the flags depend on: the model by content (:func:`~palrp_bench.runner.user_cache.
model_fingerprint`), the data by content (:func:`~palrp_bench.runner.user_cache.data_fingerprint`), the task kind
and its causal setting, and the protocol. Neither the rule, ``select_count``, ``pool_size`` nor ``max_samples``
is part of the key: they are applied to the cached flags, so a later run with a larger cap or another count
extends the same entry instead of starting over. A cached entry whose sample ids differ from the pool's is
discarded. Concurrent workers take a file lock on the entry: one computes, the others then read it.

The job's status file (and through it ``manifest.json``) records which cache entry was used, how many flags it
already held and how many candidates were forwarded (:class:`SelectionRecord`).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..atomic_io import write_json_atomic
from ..data.registry import sample_ids_of
from ..errors import BadInputError
from ..schema import Selection
from .plan import Cell
from ..fingerprints import digest
from .user_cache import data_fingerprint, model_fingerprint, user_cache_dir

log = logging.getLogger(__name__)

#: candidates per prediction forward during selection (fixed: keeps the flags independent of batch size)
SELECTION_CHUNK = 8
#: seconds between saves of a growing cache entry (a killed selection resumes from the last save)
SAVE_EVERY_S = 10.0


@dataclass
class SelectionRecord:
    """How a cell's samples were selected (written into the job's status file, hence the manifest)."""

    rule: str
    count: int | None
    max_samples: int | None
    n_selected: int
    cache_entry: str | None = None
    cache_key: str | None = None
    flags_cached: int = 0
    candidates_forwarded: int = 0
    candidates_seen: int = 0
    n_correct: int = 0
    seconds: float = 0.0


def selection_key(cell: Cell) -> dict:
    """What the per-candidate flags depend on (module docstring); its :func:`digest` names the cache entry."""
    return {"model": model_fingerprint(cell.model), "data": data_fingerprint(cell.task),
            "task_kind": cell.task.kind, "causal": bool(cell.task.causal), "protocol": cell.protocol,
            "chunk": SELECTION_CHUNK}


def _apply_rule(flags: list[bool], rule: Selection, count: int | None) -> tuple[list[int], bool]:
    """Indices selected from the first ``len(flags)`` candidates, and whether the rule is already satisfied."""
    if rule == Selection.correct_only:
        chosen = [i for i, ok in enumerate(flags) if ok]
        if count is not None and len(chosen) >= count:
            return chosen[:count], True
        return chosen, False
    # until_correct
    n_correct = 0
    for i, ok in enumerate(flags):
        n_correct += bool(ok)
        if count is not None and n_correct >= count:
            return list(range(i + 1)), True
    return list(range(len(flags))), False


def _known(flags: list[bool], rule: Selection, count: int | None, cap: int | None) -> tuple[list[int], bool]:
    """``(selected indices capped at cap, whether they are final)`` from the flags of a pool prefix: final when
    the rule is satisfied, or when the first ``cap`` entries of the full list are already determined."""
    chosen, done = _apply_rule(flags, rule, count)
    if cap is not None and not done:
        done = len(chosen) >= cap if rule == Selection.correct_only else len(flags) >= cap
    return (chosen if cap is None else chosen[:cap]), done


class _CacheEntry:
    """One selection cache file: ``{"key": ..., "sample_ids": [...], "flags": [...]}`` for a pool prefix."""

    def __init__(self, path: Path, key: dict):
        self.path, self.key = path, key

    @contextmanager
    def locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self, ids: list[str]) -> list[bool]:
        """The cached flags of the pool prefix, cut to a whole number of chunks unless they cover the pool (the
        next chunk then starts where a fresh run would start it); [] when absent or for another pool."""
        if not self.path.exists():
            return []
        try:
            stored = json.loads(self.path.read_text())
            cached_ids, flags = list(stored["sample_ids"]), [bool(f) for f in stored["flags"]]
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("selection cache %s is unreadable; recomputing it", self.path)
            return []
        n = min(len(flags), len(cached_ids), len(ids))
        if cached_ids[:n] != ids[:n]:
            log.warning("selection cache %s was made for other samples (the data changed); recomputing it",
                        self.path)
            return []
        if n < len(ids):
            n -= n % SELECTION_CHUNK
        return flags[:n]

    def write(self, ids: list[str], flags: list[bool]) -> None:
        if self.path.exists():  # keep a longer prefix another run computed
            try:
                stored = json.loads(self.path.read_text())
                if len(stored["flags"]) > len(flags) and stored["sample_ids"][:len(flags)] == ids[:len(flags)]:
                    return
            except (OSError, ValueError, KeyError, TypeError):
                pass
        write_json_atomic(self.path, {"key": self.key, "sample_ids": ids[:len(flags)], "flags": flags,
                                      "updated": time.strftime("%Y-%m-%dT%H:%M:%S")})


def cache_file_name(cell: Cell, key: dict | None = None) -> str:
    """The file name of the cell's cache entry (in the user cache's ``selection/``, or the run directory's)."""
    return f"{cell.model.name}__{cell.task.name}__{digest(selection_key(cell) if key is None else key)}.json"


def _cache_entry(cell: Cell, run_dir: Path) -> _CacheEntry:
    """The user-cache entry of the cell, or one inside the run directory when the user cache is not writable."""
    key = selection_key(cell)
    name = cache_file_name(cell, key)
    folder = user_cache_dir() / "selection"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(str(folder))
    except OSError as err:
        log.warning("user cache %s is not writable (%s); caching the selection in the run directory", folder, err)
        folder = Path(run_dir) / "selection"
    return _CacheEntry(folder / name, key)


def select_samples(pool: list, cell: Cell, adapter, bundle, ctx, run_dir: Path, max_samples: int | None, *,
                   quiet: bool = True) -> tuple[list, SelectionRecord]:
    """The evaluated samples of a cell in dataset order, at most ``max_samples`` (module docstring), and how
    they were found."""
    t0 = time.monotonic()
    task = cell.task
    if task.pool_size is not None:
        pool = pool[:task.pool_size]
    ids = sample_ids_of(pool)  # a lazy pool (text, images) knows its ids without loading a sample
    if len(set(ids)) != len(ids):
        raise BadInputError(f"dataset of task {task.name!r} has duplicate sample ids",
                            "every sample needs a unique, stable sample_id (fix the loader)")
    rule = task.selection
    record = SelectionRecord(rule.value, task.select_count, max_samples, 0)
    if rule == Selection.all:
        selected = pool if task.select_count is None else pool[:task.select_count]
        selected = selected if max_samples is None else selected[:max_samples]
        record.n_selected = len(selected)
        return selected, record
    entry = _cache_entry(cell, run_dir)
    record.cache_entry, record.cache_key = str(entry.path), digest(entry.key)
    with entry.locked():
        flags = entry.read(ids)
        record.flags_cached = len(flags)
        chosen, done = _known(flags, rule, task.select_count, max_samples)
        if not done and len(flags) < len(pool):
            bar = tqdm(total=len(pool), initial=len(flags), desc=f"selecting {cell.model.name}/{task.name}",
                       unit="candidate", disable=quiet, leave=False, dynamic_ncols=True)
            last_save = time.monotonic()
            try:
                while not done and len(flags) < len(pool):
                    chunk = pool[len(flags):len(flags) + SELECTION_CHUNK]
                    flags += [bool(f) for f in adapter.correct(bundle, chunk, ctx)]
                    record.candidates_forwarded += len(chunk)
                    chosen, done = _known(flags, rule, task.select_count, max_samples)
                    bar.update(len(chunk))
                    bar.set_postfix(correct=sum(flags), selected=len(chosen), refresh=False)
                    if time.monotonic() - last_save > SAVE_EVERY_S:
                        entry.write(ids, flags)
                        last_save = time.monotonic()
            finally:
                bar.close()
                if record.candidates_forwarded:
                    entry.write(ids, flags)
    if not done and task.select_count is not None:
        log.warning("task %s: only %d samples satisfy selection=%s (wanted %d); using them all",
                    task.name, len(chosen), rule.value, task.select_count)
    selected = [pool[i] for i in chosen]
    record.n_selected = len(selected)
    record.candidates_seen = len(flags)
    record.n_correct = int(sum(flags))
    record.seconds = round(time.monotonic() - t0, 3)
    return selected, record
