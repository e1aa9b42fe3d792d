"""What task adapters receive and return (:mod:`palrp_bench.evaluation.tasks`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ...rundir import NO_VARIANT, NONFINITE_METRIC, SCALAR

__all__ = ["ModelBundle", "JobContext", "SampleResult", "TaskAdapter", "nonfinite_result", "pad_id"]


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


class TaskAdapter(Protocol):
    #: the model kinds (``configs/model/*.yaml`` ``kind``, :class:`palrp_bench.schema.ModelKind`) this task kind
    #: evaluates; the preflight refuses any other before a model loads
    model_kinds: tuple[str, ...]

    def load_samples(self, task, bundle) -> list: ...

    def correct(self, bundle, samples: list, ctx: JobContext) -> list[bool]: ...

    def evaluate(self, bundle, samples: list, ctx: JobContext, metrics: tuple[str, ...]) -> list[SampleResult]: ...


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


def nonfinite_result(sample_id: str, info: dict | None = None) -> SampleResult:
    """The record of a sample whose relevance contains NaN or inf."""
    return SampleResult(sample_id, [(NONFINITE_METRIC, NO_VARIANT, SCALAR, 1.0)], dict(info or {}, nonfinite=True))


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
