"""``task=selftest``: the harness self-test. No model, no data: deterministic numbers from each sample id, shaped
like the NLP perturbation rows (so the whole report path runs), with switches to slow a run down (kill / resume
tests) and to inject non-finite relevance."""
from __future__ import annotations

import math
import time
from typing import Iterator

import numpy as np
import torch

from ...data.registry import dataset_spec, load_dataset
from ...data.sample_ids import stable_hash
from ...data.selftest import SelftestSample
from ...metrics.auc import NLP_FRACTIONS
from ..explained import SampleShape, SelftestBatch
from . import register_task
from .base import TaskAdapter


def selftest_values(sample_id: str, method: str) -> dict[str, np.ndarray]:
    """Deterministic pseudo-curves of one sample: a function of ``(sample_id, method)`` only."""
    rng = np.random.default_rng(stable_hash(f"{method}|{sample_id}"))
    x = NLP_FRACTIONS.grid
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


@register_task("selftest")
class SelftestAdapter(TaskAdapter):
    """``task=selftest``: options ``n`` (samples), ``delay_s`` (seconds per sample, to let tests kill a run
    mid-way), ``nonfinite_every`` (every k-th sample gets a NaN relevance; 0 = never)."""

    model_kinds = ("none",)  # the numbers come from the sample ids: no model

    def load_samples(self, task, bundle) -> list[SelftestSample]:
        return load_dataset(task.dataset, path=task.path, limit=task.pool_size, options=task.options)

    def correct(self, bundle, samples, ctx) -> list[bool]:
        return [selftest_correct(s.sample_id) for s in samples]

    def explain(self, bundle, samples, ctx, needs=frozenset()) -> Iterator[SelftestBatch]:
        """Each sample's pseudo-curves (:func:`selftest_values`), after ``delay_s``; every ``nonfinite_every``-th
        sample's relevance is NaN."""
        options = dataset_spec(ctx.task.dataset).resolve_options(ctx.task.options)
        delay, every = float(options["delay_s"]), int(options["nonfinite_every"])
        values = []
        for sample in samples:
            if delay:
                time.sleep(delay)
            v = selftest_values(sample.sample_id, ctx.method)
            if every and sample.index % every == 0:
                v["scores"][0] = math.nan
            values.append(v)
        finite = [bool(np.isfinite(v["scores"]).all()) for v in values]
        yield SelftestBatch(bundle, list(samples), list(range(len(samples))),
                            torch.as_tensor(np.stack([v["scores"] for v in values])), [0] * len(samples),
                            [{"rules": ctx.rules or "none", "aggregation": ctx.aggregation} for _ in samples],
                            [{"scores": v["scores"].astype(np.float32)} for v in values], finite,
                            [selftest_correct(s.sample_id) for s in samples], values=values)

    @classmethod
    def sample_shape(cls, cell, arch) -> SampleShape:
        """No model: nothing is explained or forwarded; each sample waits ``delay_s``."""
        options = dataset_spec(cell.task.dataset).resolve_options(cell.task.options)
        return SampleShape(0.0, 0.0, 0, 0.0, explanations=0, wait_s=float(options["delay_s"]))
