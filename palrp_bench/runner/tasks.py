"""Task adapters: the one place that knows how to evaluate a task's samples (issue "Runner", DESIGN.md data flow).

For each task kind an adapter provides

* ``load_samples(task, bundle) -> list``: the candidate pool in dataset order (every sample has a stable
  ``sample_id``);
* ``correct(bundle, samples, ctx) -> list[bool]``: whether the model predicts each sample correctly (only for
  tasks with a prediction-dependent selection, PROTOCOL.md section 2);
* ``evaluate(bundle, samples, ctx, protocols) -> list[SampleResult]``: explain a batch with the cell's method
  and run the given evaluation protocols (the cell's metric configs that are not stored yet for these samples),
  returning per-sample result rows ``(metric, variant, step, value)``. An explanation found in the cell's
  explanation cache (``ctx.cache``) is reused instead of recomputed, so a protocol added later to a cell costs
  only its own forwards.

The runner (:mod:`palrp_bench.runner.execute`) does everything else: selection, sharding, resume, storage.
Per-sample results must not depend on which other samples share the batch (tested for the self-test exactly
and for the model tasks up to float rounding).

A sample whose relevance is NaN or infinite is not fatal: its result carries one row
``nonfinite_relevance = 1`` (and no metric rows); the merge counts them (issue "Bad input").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from ..errors import BadInputError
from .plan import Cell
from .schema import TaskKind
from .sharding import stable_hash
from .store import ExplanationCache

from ..rundir import CORRECT_METRIC, NO_VARIANT, NONFINITE_METRIC, SCALAR  # noqa: F401  (row vocabulary)


@dataclass
class SampleResult:
    """What an adapter returns for one sample: result rows, descriptive info, and arrays worth caching."""

    sample_id: str
    rows: list[tuple[str, str, float | None, float]]
    info: dict = field(default_factory=dict)
    explanation: dict[str, np.ndarray] | None = None

    @property
    def nonfinite(self) -> bool:
        return any(r[0] == NONFINITE_METRIC for r in self.rows)


@dataclass
class JobContext:
    """Everything an adapter needs besides the model and the samples."""

    cell: Cell
    device: str
    cache: ExplanationCache | None
    forward_batch_size: int = 64


class TaskAdapter(Protocol):
    def load_samples(self, task, bundle) -> list: ...

    def correct(self, bundle, samples: list, ctx: JobContext) -> list[bool]: ...

    def evaluate(self, bundle, samples: list, ctx: JobContext, protocols: tuple[str, ...]) -> list[SampleResult]: ...


ADAPTERS: dict[TaskKind, Callable[[], TaskAdapter]] = {}


def register_adapter(kind: TaskKind):
    """Class decorator: the adapter evaluating tasks of ``kind``."""
    def deco(cls):
        ADAPTERS[kind] = cls
        return cls
    return deco


def adapter_for(kind: TaskKind) -> TaskAdapter:
    """The adapter of a task kind (model-task adapters are imported lazily: they pull in torch)."""
    if kind not in ADAPTERS:
        if kind in (TaskKind.text_classification, TaskKind.next_token):
            from . import text_tasks  # noqa: F401
        elif kind in (TaskKind.image_classification, TaskKind.image_segmentation):
            from . import vision_tasks  # noqa: F401
    if kind not in ADAPTERS:
        raise BadInputError(f"no task adapter for task kind {kind.value!r}",
                            f"use one of: {', '.join(k.value for k in TaskKind)}")
    return ADAPTERS[kind]()


def nonfinite_result(sample_id: str, info: dict | None = None) -> SampleResult:
    """The record of a sample whose relevance contains NaN or inf."""
    return SampleResult(sample_id, [(NONFINITE_METRIC, NO_VARIANT, SCALAR, 1.0)], dict(info or {}, nonfinite=True))


# --------------------------------------------------------------------------------------------------------------
# The harness self-test: no model, no data, deterministic numbers from the sample id.
# --------------------------------------------------------------------------------------------------------------

@dataclass
class SelftestSample:
    sample_id: str
    index: int


#: the 11 NLP fractions (PROTOCOL.md section 2), shared so the self-test exercises the NLP report path
SELFTEST_STEPS = tuple(round(0.1 * k, 10) for k in range(11))


def selftest_values(sample_id: str, method: str) -> dict[str, np.ndarray]:
    """Deterministic pseudo-curves of one sample: a function of ``(sample_id, method)`` only."""
    rng = np.random.default_rng(stable_hash(f"{method}|{sample_id}"))
    x = np.asarray(SELFTEST_STEPS)
    slope = rng.uniform(0.2, 0.8)
    return {
        "generation_ac": np.clip(0.2 + slope * x + rng.normal(0, 0.02, x.size), 0, 1),
        "pruning_ac": np.clip(0.9 - slope * x + rng.normal(0, 0.02, x.size), 0, 1),
        "generation_mse": np.abs(rng.normal(5.0, 1.0, x.size)) * (1 - x),
        "pruning_mse": np.abs(rng.normal(5.0, 1.0, x.size)) * x,
        "scores": rng.normal(size=8),
    }


def selftest_correct(sample_id: str) -> bool:
    """The self-test's pseudo "correct prediction" (two thirds of the ids), for selection rules."""
    return stable_hash(f"correct|{sample_id}") % 3 != 0


@register_adapter(TaskKind.selftest)
class SelftestAdapter:
    """``task=selftest``: options ``n`` (samples), ``delay_s`` (seconds per sample, to let tests kill a run
    mid-way), ``nonfinite_every`` (every k-th sample gets a NaN relevance; 0 = never)."""

    def load_samples(self, task, bundle) -> list[SelftestSample]:
        n = int(task.options.get("n", 40))
        if n < 1:
            raise BadInputError(f"task.options.n must be >= 1, got {n}", "set task.options.n to a positive integer")
        return [SelftestSample(f"selftest-{i:05d}", i) for i in range(n)]

    def correct(self, bundle, samples, ctx) -> list[bool]:
        return [selftest_correct(s.sample_id) for s in samples]

    def evaluate(self, bundle, samples, ctx, protocols=("selftest",)) -> list[SampleResult]:
        options = ctx.cell.task.options
        delay = float(options.get("delay_s", 0.0))
        every = int(options.get("nonfinite_every", 0))
        results = []
        for sample in samples:
            if delay:
                time.sleep(delay)
            values = selftest_values(sample.sample_id, ctx.cell.method)
            info = {"rules": ctx.cell.rules or "none", "aggregation": ctx.cell.aggregation}
            if every and sample.index % every == 0:
                values["scores"][0] = math.nan
            if not np.isfinite(values["scores"]).all():
                results.append(nonfinite_result(sample.sample_id, info))
                continue
            rows: list[tuple[str, str, float | None, float]] = []
            for variant in ("generation", "pruning"):
                for metric in ("ac", "mse"):
                    rows += [(metric, variant, step, float(v))
                             for step, v in zip(SELFTEST_STEPS, values[f"{variant}_{metric}"])]
            rows.append((CORRECT_METRIC, NO_VARIANT, SCALAR, float(selftest_correct(sample.sample_id))))
            results.append(SampleResult(sample.sample_id, rows, info,
                                        {"scores": values["scores"].astype(np.float32)}))
        return results

