"""Which samples of a task's pool are evaluated (PROTOCOL.md section 2 selection rules), shard-independently.

* ``selection=all``: the pool in dataset order.
* ``selection=correct_only`` (MCQA): the correctly predicted samples, the first ``select_count`` of them.
* ``selection=until_correct`` (IMDB): every sample up to and including the ``select_count``-th correct one
  ("stop after 1000 correct predictions, all processed samples count").

The prediction-dependent rules need one plain forward per candidate. They run over the pool in dataset order in
chunks of a FIXED size (:data:`SELECTION_CHUNK`, independent of ``runner.batch_size`` and of sharding) and
stop as soon as the rule is satisfied, so every shard of every run arrives at the same list. The list is cached
in ``<run_dir>/selection/`` (atomic write), so it is computed once per model and task, not once per method or
shard. ``runner.max_samples`` then keeps the first N of the list.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from ..errors import BadInputError
from ..schema import Selection
from .plan import Cell, _plain

log = logging.getLogger(__name__)

#: candidates per prediction forward during selection (fixed: keeps the list independent of batch size)
SELECTION_CHUNK = 8


def _selection_key(cell: Cell) -> str:
    model = _plain(cell.model)
    model.pop("paper_name", None)
    task = _plain(cell.task)
    task.pop("paper_task", None)
    task["options"] = {k: v for k, v in task.get("options", {}).items() if k != "delay_s"}
    blob = json.dumps({"model": model, "task": task, "protocol": cell.protocol}, sort_keys=True)
    return f"{cell.model.name}__{cell.task.name}__{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


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


def select_samples(pool: list, cell: Cell, adapter, bundle, ctx, run_dir: Path, max_samples: int | None) -> list:
    """The evaluated samples of a cell in dataset order (see the module docstring)."""
    task = cell.task
    if task.pool_size is not None:
        pool = pool[:task.pool_size]
    ids = [s.sample_id for s in pool]
    if len(set(ids)) != len(ids):
        raise BadInputError(f"dataset of task {task.name!r} has duplicate sample ids",
                            "every sample needs a unique, stable sample_id (fix the loader)")
    rule = task.selection
    if rule == Selection.all:
        selected = pool if task.select_count is None else pool[:task.select_count]
    else:
        cache = Path(run_dir) / "selection" / f"{_selection_key(cell)}.json"
        if cache.exists():
            chosen_ids = json.loads(cache.read_text())["sample_ids"]
            by_id = {s.sample_id: s for s in pool}
            missing = [i for i in chosen_ids if i not in by_id]
            if missing:
                raise BadInputError(f"cached selection {cache} names samples that the dataset no longer has",
                                    "delete that file (the selection is recomputed) or restore the dataset")
            selected = [by_id[i] for i in chosen_ids]
        else:
            flags: list[bool] = []
            done = False
            for start in range(0, len(pool), SELECTION_CHUNK):
                flags += list(adapter.correct(bundle, pool[start:start + SELECTION_CHUNK], ctx))
                chosen, done = _apply_rule(flags, rule, task.select_count)
                if done:
                    break
            chosen, done = _apply_rule(flags, rule, task.select_count)
            if not done and task.select_count is not None:
                log.warning("task %s: only %d samples satisfy selection=%s (wanted %d); using them all",
                            task.name, len(chosen), rule.value, task.select_count)
            selected = [pool[i] for i in chosen]
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"rule": rule.value, "count": task.select_count,
                                       "candidates_seen": len(flags), "n_correct": int(sum(flags)),
                                       "sample_ids": [s.sample_id for s in selected]}))
            os.replace(tmp, cache)
    if max_samples is not None:
        selected = selected[:max_samples]
    return selected
