"""What task adapters receive and return, and the base every adapter extends (:mod:`palrp_bench.evaluation.tasks`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ...data.registry import dataset_spec, load_dataset
from ..explained import ExplainedBatch, SampleResult, SampleShape, nonfinite_result

__all__ = ["ModelBundle", "JobContext", "SampleResult", "TaskAdapter", "nonfinite_result", "pad_id", "dataset_tokens",
           "explorer_arrays"]


@dataclass
class ModelBundle:
    """A loaded model on its device: the library model object (None for the self-test), its tokenizer (text) and
    the model config it came from."""

    config: Any
    model: Any
    tokenizer: Any
    device: str
    extras: dict = field(default_factory=dict)


@dataclass
class JobContext:
    """Everything an adapter needs besides the model and the samples: the cell's task config and settings, the
    metrics to evaluate, the explanation cache (``load(sample_id)`` / ``save``; None = no cache), the device,
    the perturbation forward batch size, the pixel-perturbation tie-break (None = the protocol's default), the
    epsilon-rule stabilisers asked for (None = the protocol's default), the run seed (seeds per-sample
    randomness together with the sample id), the ``embeddings`` switch (``full`` / ``partial``) and the layer
    checkpointing of the explanations (``runner.checkpoint``: ``none`` / ``layers``)."""

    task: Any
    method: str
    rules: str | None
    aggregation: str
    protocol: str
    metrics: tuple[str, ...]
    device: str = "cpu"
    cache: Any = None
    forward_batch_size: int = 64
    tie_break: str | None = None
    stabilizers: str | None = None
    seed: int = 0
    embeddings: str = "full"
    checkpoint: str = "none"

    @property
    def method_params(self) -> dict:
        """Hyperparameters of the cell's method on this task: the AttnLRP paper's values for the task's dataset
        (``Method.dataset_params``), then the task's own (``TaskConfig.method_params``)."""
        from ...methods.registry import get_method

        return get_method(self.method).params_for(self.task)

    def stabilizers_used(self, model) -> str | None:
        """The name of the stabilisers this cell's explanations use on ``model``
        (:func:`palrp_bench.api.stabilizers_used`: the request resolved for the model's family), before any is
        computed; None without a model (the self-test)."""
        if model is None:
            return None
        from ...api import stabilizers_used

        return stabilizers_used(model, self.method, rules=self.rules, protocol=self.protocol,
                                stabilizers=self.stabilizers)

    def embeddings_used(self, model) -> str | None:
        """The ``embeddings`` switch where it changes this cell's explanations of ``model``
        (:func:`palrp_bench.api.embeddings_used`), else None (also without a model: the self-test)."""
        if model is None:
            return None
        from ...api import embeddings_used

        return embeddings_used(model, self.method, self.embeddings)

    def explain_kwargs(self) -> dict:
        """Keyword arguments of ``palrp_bench.explain`` every adapter passes: the method's rules, aggregation,
        protocol, stabilisers, the ``embeddings`` switch, the task's hyperparameters for it, the rows per forward
        of multi-pass methods and the layer checkpointing."""
        return {"method": self.method, "aggregation": self.aggregation, "rules": self.rules,
                "protocol": self.protocol, "stabilizers": self.stabilizers, "embeddings": self.embeddings,
                "params": self.method_params, "batch_size": self.forward_batch_size, "checkpoint": self.checkpoint}


class TaskAdapter:
    """The one place that knows how a kind of task evaluates its samples (:mod:`palrp_bench.evaluation.tasks`).

    * ``model_kinds``: the model kinds (``configs/model/*.yaml`` ``kind``, :class:`palrp_bench.schema.ModelKind`) it
      evaluates; the preflight refuses any other before a model loads;
    * :meth:`load_samples`: the candidate pool in dataset order;
    * :meth:`correct`: whether the model predicts each sample correctly (prediction-dependent selections);
    * :meth:`explain`: the explained batches of some samples (:class:`~palrp_bench.evaluation.explained.
      ExplainedBatch`), holding what the procedures ``needs`` besides the scores;
    * :meth:`evaluate`: explain, then run the cell's procedures on every batch (one shared loop,
      :func:`palrp_bench.evaluation.procedures.evaluate_batch`);
    * :meth:`sample_shape`: one sample of a cell as the cost model sees it (the kind's work per sample);
      :meth:`batch_tokens`: the tokens of a real batch, where they vary (calibration).
    """

    model_kinds: tuple[str, ...] = ()

    def load_samples(self, task, bundle) -> Sequence:
        """The pool as the task's dataset loads it (a lazy sequence where the loader makes one)."""
        return load_dataset(task.dataset, path=task.path, limit=task.pool_size, options=task.options,
                            tokenizer=bundle.tokenizer)

    def correct(self, bundle, samples: list, ctx: JobContext) -> list[bool]:
        raise NotImplementedError

    def explain(self, bundle, samples: list, ctx: JobContext, needs: frozenset[str] = frozenset()
                ) -> Iterable[ExplainedBatch]:
        raise NotImplementedError

    def evaluate(self, bundle, samples: list, ctx: JobContext, metrics: Sequence[str] | None = None
                 ) -> list[SampleResult]:
        """Per-sample rows of ``samples`` under the procedures ``metrics`` (default: the cell's, ``ctx.metrics``)."""
        from ..procedures import evaluate_batch

        return evaluate_batch(self, bundle, list(samples), ctx, tuple(ctx.metrics if metrics is None else metrics))

    @classmethod
    def sample_shape(cls, cell, arch) -> SampleShape | None:
        """One sample of ``cell`` (its model config, task, method) on a model of architecture ``arch``
        (:class:`~palrp_bench.models.architecture.Architecture`); None when its size is unknown."""
        raise NotImplementedError

    def batch_tokens(self, batch: Sequence) -> list[tuple[float, float]] | None:
        """``(explained tokens, forwarded tokens)`` of each sample of a real batch, where they vary by sample (None:
        every sample has the shape of :meth:`sample_shape`)."""
        return None


def dataset_tokens(task) -> tuple[float | None, float | None, int | None]:
    """``(mean tokens, mean context tokens, padded length)`` of a task's samples, from its dataset's spec."""
    spec = dataset_spec(task.dataset, f" (task {task.name})")
    options = spec.resolve_options(task.options)
    return spec.mean_tokens(options), spec.mean_context_tokens(options), spec.padded(options)


def dataset_longest_tokens(task) -> int | None:
    """Tokens of the task's longest sample where its dataset's spec knows them from the options, else None."""
    spec = dataset_spec(task.dataset, f" (task {task.name})")
    return spec.longest(spec.resolve_options(task.options))


def explorer_arrays(extras: dict, j: int, n: int | None = None, label=None) -> dict[str, np.ndarray]:
    """What the HTML report's sample explorer reads beside a sample's cached scores (docs/evaluation.md, "Cached
    explanations"): the aggregation's per-token or per-patch parts ``semantic_term`` / ``positional_term``
    (``Explanation.extras``; sample ``j``, its first ``n`` tokens; LRP methods only) and the gold ``label`` as text
    (when the sample has one). Nothing here enters a metric."""
    out = {}
    for name in ("semantic_term", "positional_term"):
        if name in extras:
            value = extras[name][j]
            out[name] = (value[:n] if n is not None else value).detach().float().cpu().numpy()
    if label is not None:
        out["label"] = np.asarray(str(label))
    return out


def pad_id(bundle) -> int:
    """The id right-padded batches are filled with: the tokenizer's pad token, else its EOS, else the model
    config's pad token, else 0 (the padded positions are masked out, so only a valid id matters)."""
    tok = bundle.tokenizer
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, attr, None) if tok is not None else None
        if value is not None:
            return int(value)
    value = getattr(bundle.model.config, "pad_token_id", None)
    return int(value) if value is not None else 0
