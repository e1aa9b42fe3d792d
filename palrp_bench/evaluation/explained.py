"""What a task adapter hands the evaluation procedures, and what comes back to the runner
(docs/architecture.md "Data flow of one run").

* :class:`ExplainedBatch` (one per modality: :class:`TokenBatch`, :class:`Seq2SeqBatch`, :class:`PixelBatch`,
  :class:`EvidenceBatch`, :class:`SelftestBatch`): a batch of samples with the explanation of each, the model
  inputs the procedures perturb, and where the procedures' rows go (:func:`palrp_bench.evaluation.procedures.
  evaluate_batch`);
* :class:`SampleResult`: one sample's rows, info and cached arrays, as the runner stores them;
* :class:`SampleShape`: one sample of a task kind as the cost model sees it (the work per sample a kind declares,
  to which each procedure adds its forwards).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from ..rundir import NO_VARIANT, NONFINITE_METRIC, SCALAR

__all__ = ["SampleResult", "nonfinite_result", "SampleShape", "ExplainedBatch", "TokenBatch", "Seq2SeqBatch",
           "PixelBatch", "EvidenceBatch", "SelftestBatch"]

#: one result row: ``(metric, variant, step, value)``
Row = tuple[str, str, "float | None", float]


@dataclass
class SampleResult:
    """What an adapter returns for one sample: result rows, descriptive info, and arrays worth caching."""

    sample_id: str
    rows: list[Row]
    info: dict = field(default_factory=dict)
    explanation: dict[str, np.ndarray] | None = None

    @property
    def nonfinite(self) -> bool:
        return any(r[0] == NONFINITE_METRIC for r in self.rows)


def nonfinite_result(sample_id: str, info: dict | None = None) -> SampleResult:
    """The record of a sample whose relevance contains NaN or inf."""
    return SampleResult(sample_id, [(NONFINITE_METRIC, NO_VARIANT, SCALAR, 1.0)], dict(info or {}, nonfinite=True))


@dataclass(frozen=True)
class SampleShape:
    """One sample of a task as the cost model sees it (docs/planning.md "Cost model"): ``explanations`` over
    ``explain_tokens`` tokens, walking ``explain_features`` features (what a method with one pass per feature, AtMan,
    pays for), plain forwards over ``forward_tokens`` tokens, the features a perturbation curve walks
    (``perturbed_features``: tokens, pixels, context tokens), the forwards the task kind itself costs per sample and
    the decoder tokens of an encoder-decoder's every forward, the seconds a sample waits outside the model (the
    self-test's delay), and the tokens of the longest sample where the plan measured them (0: unknown; peak memory
    is sized for a batch of those)."""

    explain_tokens: float
    forward_tokens: float
    explain_features: int
    perturbed_features: float
    forwards: float = 0.0
    decoder_tokens: float = 0.0
    explanations: int = 1
    wait_s: float = 0.0
    longest_tokens: float = 0.0


@dataclass
class ExplainedBatch:
    """A batch as its task adapter explained it (module docstring). ``samples``: the loaded samples; ``indices``:
    their positions in the list the adapter was given; ``scores``: the method's scores ``[B, ...]`` (tokens: zero
    after each sample's real tokens; pixels: the ReLU'd map); ``explained``: the explained index per sample;
    ``infos`` / ``arrays``: per-sample info and arrays to cache (None: nothing new); ``finite``: whether the
    relevance of each sample is finite; ``correct``: the sample's ``correct`` row (None: none); ``rows``: filled by
    the procedures, for the samples in :attr:`ok`; ``explain_again(model, positions)``: the scores of the samples at
    ``positions``, shaped as ``scores[positions]``, explained once more by ``model`` (the same method, input and
    explained output; the float64 copy of procedure ``map_sensitivity``), None where the kind offers none."""

    bundle: Any
    samples: list
    indices: list[int]
    scores: torch.Tensor
    explained: list[int]
    infos: list[dict]
    arrays: list[dict | None]
    finite: list[bool]
    correct: list[bool | None]
    rows: dict[int, list[Row]] = field(default_factory=dict)
    explain_again: Callable[[Any, list[int]], torch.Tensor] | None = None

    @property
    def ok(self) -> list[int]:
        """Positions in the batch of the samples with finite relevance."""
        return [j for j, f in enumerate(self.finite) if f]

    @property
    def model(self):
        return self.bundle.model


@dataclass
class TokenBatch(ExplainedBatch):
    """Text kinds: right-padded ``input_ids`` and ``attention_mask`` ``[B, T]`` of the samples as the protocol
    perturbs them, the rules of the NLP perturbation (``perturbation_task``, a key of
    :data:`palrp_bench.evaluation.procedures.nlp_perturbation.TASKS`), the labels a classifier is read at (None: the
    prediction is tracked) and whether attention is causal."""

    input_ids: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None
    perturbation_task: str = ""
    labels: list | None = None
    causal: bool = True


@dataclass
class Seq2SeqBatch(ExplainedBatch):
    """Encoder-decoder QA: encoder ``input_ids`` / ``attention_mask`` ``[B, T]``, the ``context`` and ``answer``
    token flags ``[B, T]``, the ``decoder_input_ids`` ``[B, 1]`` (the start token) and whether each question has an
    answer (SQuAD v2's unanswerable questions have none)."""

    input_ids: torch.Tensor | None = None
    attention_mask: torch.Tensor | None = None
    context: torch.Tensor | None = None
    answer: torch.Tensor | None = None
    decoder_input_ids: torch.Tensor | None = None
    answerable: list[bool] = field(default_factory=list)


@dataclass
class PixelBatch(ExplainedBatch):
    """Vision kinds: raw ``images`` ``[B, 3, H, W]`` in [0, 1], ``labels`` (None where unknown), segmentation
    ``masks`` (None where a sample has none), the explanation of the labelled class ``scores_target`` and the signed
    map ``scores_signed`` (None unless a procedure needs them), and the per-sample totals of the positional share
    (``semantic_total``, ``positional_total``, and with the CLS terms ``..._incl_prefix``)."""

    images: torch.Tensor | None = None
    labels: list | None = None
    masks: list | None = None
    scores_target: torch.Tensor | None = None
    scores_signed: torch.Tensor | None = None
    totals: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class EvidenceBatch(ExplainedBatch):
    """The evidence kind: per sample, its evaluation masks ``name -> (valid, evidence)`` token flags, and where a
    procedure needs them (``totals``) the signed semantic and positional relevance sums over its tokens
    (``semantic_total``, ``positional_total``, ``[B]`` float64)."""

    masks: list[dict] = field(default_factory=list)
    totals: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class SelftestBatch(ExplainedBatch):
    """The self-test: per sample, its deterministic pseudo-curves (no model)."""

    values: list[dict] = field(default_factory=list)
