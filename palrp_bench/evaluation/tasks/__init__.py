"""Task adapters: the one place that knows how a kind of task evaluates its samples (docs/architecture.md "Data flow
of one run").

One module per task kind, registered by decorator (:func:`register_task`): ``text_classification`` (IMDB,
Tables 1-2), ``next_token`` (ARC-Easy MCQA, Wikipedia, Table 3), ``image_classification`` (ImageNet
perturbation, Table 4, Appendix F), ``image_segmentation`` (Table 5) and ``selftest`` (the harness self-test).
Every module of this package is imported when the registry is first used, so a new task kind is one module.

An adapter extends :class:`~palrp_bench.evaluation.tasks.base.TaskAdapter` and provides

* ``model_kinds``: the model kinds it evaluates (``classifier``, ``causal``, ``vit``, ``none``; the preflight
  refuses a cell pairing it with another kind before any model loads, :mod:`palrp_bench.planning.preflight`);
* ``load_samples(task, bundle) -> Sequence``: the candidate pool in dataset order (stable ``sample_id``s; a lazy
  sequence with ``sample_ids`` loads or tokenises only the samples that are used);
* ``correct(bundle, samples, ctx) -> list[bool]``: whether the model predicts each sample correctly (tasks with a
  prediction-dependent selection, docs/protocol.md section 2);
* ``explain(bundle, samples, ctx, needs) -> Iterable[ExplainedBatch]``: the samples explained with the cell's
  method (an explanation found in the cell's explanation cache, ``ctx.cache``, is reused), with what the cell's
  procedures need (:mod:`palrp_bench.evaluation.explained`); ``evaluate`` then runs the procedures on every batch
  (one shared loop, :func:`palrp_bench.evaluation.procedures.evaluate_batch`) and returns per-sample rows
  ``(metric, variant, step, value)``;
* ``sample_shape(cell, arch)``: one sample as the cost model sees it (the kind's work per sample; each procedure
  adds its forwards, :mod:`palrp_bench.planning.cost`).

The runner does everything else (selection, sharding, resume, storage). Per-sample results must not depend on
which other samples share the batch. A sample whose relevance is NaN or infinite is not fatal: its result carries
one row ``nonfinite_relevance = 1`` and no metric rows.
"""
from __future__ import annotations

from ...discovery import Registry
from .base import JobContext, ModelBundle, SampleResult, TaskAdapter, nonfinite_result

__all__ = ["TASK_KINDS", "register_task", "task_adapter", "JobContext", "ModelBundle",
           "SampleResult", "TaskAdapter", "nonfinite_result"]

#: task kind -> adapter class
TASK_KINDS = Registry("task kind", "task.kind", __name__)


def register_task(kind: str):
    """Class decorator: the adapter evaluating tasks of ``kind``."""
    return TASK_KINDS.register(kind)


def task_adapter(kind: str) -> TaskAdapter:
    """A fresh adapter of a task kind, or a one-line :class:`BadInputError`."""
    return TASK_KINDS.lookup(kind)()
