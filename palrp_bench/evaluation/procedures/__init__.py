"""The evaluation procedures a cell runs on every sample (config group ``metric``; docs/evaluation.md): each module
drives a model through one protocol and turns the outcomes into per-sample rows for the metric functions, and
registers itself here with the task kinds it applies to and what it costs (:class:`Procedure`). Which procedure
applies to which task kind, and how many forwards it adds to a sample, is read from this registry alone: by the
plan (:mod:`palrp_bench.runner.plan`), the cost model (:mod:`palrp_bench.planning.cost`) and the shared loop
(:func:`evaluate_batch`) that runs a cell's procedures on every batch a task adapter explains.

The loop: the adapter explains a batch (:meth:`palrp_bench.evaluation.tasks.base.TaskAdapter.explain`, one or more
:class:`~palrp_bench.evaluation.explained.ExplainedBatch`), each of the cell's procedures appends its rows to the
samples with finite relevance, in the cell's metric order, then each sample gets its ``correct`` row when it has
one; a sample whose relevance is NaN or infinite gets one row ``nonfinite_relevance = 1`` instead. The loop charges
the adapter's work to the stage ``explain`` and a procedure's to ``metrics``, where each procedure marks its own model
forwards as ``forwards`` (and its explanations as ``explain``; :mod:`palrp_bench.stages`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...discovery import Registry
from ...rundir import CORRECT_METRIC, NO_VARIANT, SCALAR
from ...stages import stage
from ..explained import ExplainedBatch, SampleResult, SampleShape, nonfinite_result

__all__ = ["Procedure", "PROCEDURES", "register_procedure", "procedure", "applies", "evaluate_batch",
           "SampleShape"]


@dataclass(frozen=True)
class Procedure:
    """One evaluation run on every sample of a cell.

    * ``run(batch, ctx)``: appends its rows ``(metric, variant, step, value)`` to ``batch.rows[j]`` of every sample
      ``j`` in ``batch.ok`` (and may add to ``batch.infos[j]``);
    * ``applies_to``: the task kinds it evaluates (the plan refuses it on any other);
    * ``forwards(kind, shape, task)``: plain model forwards it adds to one sample of that kind
      (:class:`~palrp_bench.evaluation.explained.SampleShape`: the sample as the cost model sees it);
    * ``explanations``: explanations it adds to a sample beyond the one every sample gets;
    * ``needs``: what the explained batch must hold besides the scores (``scores_target``: an explanation of the
      labelled class; ``scores_signed``: the map before the ReLU);
    * ``float64_copy``: it keeps a float64 copy of the model beside it (8 bytes per parameter more);
    * ``description``: what it measures, in one line.
    """

    name: str
    run: Callable[[ExplainedBatch, Any], None]
    applies_to: tuple[str, ...]
    forwards: Callable[[str, SampleShape, Any], float] = lambda kind, shape, task: 0.0
    explanations: int = 0
    needs: frozenset[str] = frozenset()
    float64_copy: bool = False
    description: str = ""


#: metric name (``configs/metric/<name>.yaml``, ``task.metrics``) -> :class:`Procedure`
PROCEDURES = Registry("metric", "metric", __name__)


def register_procedure(name: str, *, applies_to, forwards=None, explanations: int = 0, needs=(),
                       float64_copy: bool = False, description: str = ""):
    """Decorator: the function running procedure ``name`` on an explained batch and the rest of its
    :class:`Procedure`."""
    def deco(run):
        extra = {} if forwards is None else {"forwards": forwards}
        PROCEDURES.register(name)(Procedure(name, run, tuple(applies_to), explanations=explanations,
                                            needs=frozenset(needs), float64_copy=float64_copy,
                                            description=description, **extra))
        return run
    return deco


def procedure(name: str) -> Procedure:
    """The registered procedure ``name`` (one-line error naming the metrics otherwise)."""
    return PROCEDURES.lookup(name)


def applies(name: str, kind: str) -> bool:
    """Whether procedure ``name`` evaluates tasks of ``kind``."""
    return kind in procedure(name).applies_to


def evaluate_batch(adapter, bundle, samples: list, ctx, metrics) -> list[SampleResult]:
    """Explain ``samples`` with ``adapter`` and run the procedures ``metrics`` on them (module docstring), in the
    cell's order (``ctx.metrics``; the runner asks for the missing ones sorted by name): one
    :class:`~palrp_bench.evaluation.explained.SampleResult` per sample, in order."""
    cell_order = [m for m in ctx.metrics if m in metrics]
    chosen = [procedure(name) for name in cell_order + [m for m in metrics if m not in cell_order]]
    needs = frozenset().union(*(p.needs for p in chosen))
    results: dict[int, SampleResult] = {}
    batches = iter(adapter.explain(bundle, samples, ctx, needs))
    while True:
        with stage("explain"):
            batch = next(batches, None)
        if batch is None:
            break
        ok = batch.ok
        batch.rows = {j: [] for j in ok}
        if ok:
            for p in chosen:
                with stage("metrics"):  # a procedure marks its forwards (and explanations) inside
                    p.run(batch, ctx)
        with stage("metrics"):
            for j, index in enumerate(batch.indices):
                sample_id = batch.samples[j].sample_id
                if j not in batch.rows:
                    results[index] = nonfinite_result(sample_id, batch.infos[j])
                    continue
                rows = batch.rows[j]
                if batch.correct[j] is not None:
                    rows.append((CORRECT_METRIC, NO_VARIANT, SCALAR, float(batch.correct[j])))
                results[index] = SampleResult(sample_id, rows, batch.infos[j], batch.arrays[j])
    return [results[i] for i in range(len(samples))]
