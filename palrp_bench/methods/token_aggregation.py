"""Per-token scores from semantic and positional relevance (docs/protocol.md section 1, paper Eq. 11).

``aggregation="official"`` follows the official code with ``--pe --single-norm`` (the published configuration):

* ``sem[i] = sum_d R(E_i)[d]`` (signed);
* ``pos[i] = sum_k (|pcos[k,i]| + |psin[k,i]|)`` (multi-sink) or ``sum_k (pcos[k,i] + psin[k,i])`` (w/o
  multi-sink, Table 2); the same over the per-layer terms of other multi-sink kinds (ALiBi); a single sink
  (learned PE) enters signed;
* PA-LRP: ``(sem + pos) / max_i |sem + pos|``; PE only: ``pos / max|pos|``; AttnLRP: ``sem`` (raw).

``aggregation="eq11"`` follows the paper's Eq. 11 instead: per-element ReLU sums,
``R_i = sum_d E_i[d]^+ + sum_k sum_d' P_{i,k}[d']^+`` where the elements of ``P_{i,k}`` are the cos and sin
entries of token ``i`` in layer ``k`` (summed over heads and the q/k sides, which share them). Without multi-sink
there is one shared sink, so the per-layer element relevances are summed before the ReLU. Scores are divided by
their max (ordering is all the perturbation protocols use).

The run-level ``embeddings`` switch (docs/positional.md, "Full and partial embeddings"): on a text model whose
position enters as a learned absolute embedding added to the tokens (GPT-2, OPT, BERT, RoBERTa), ``full`` scores
the full embedding ``E_i + P_i`` of each token rather than its token embedding ``E_i`` alone, for the methods whose
scores are the semantic part alone (:attr:`~.registry.Method.reads_embeddings_switch`: ``attnlrp``, ``cp_lrp``,
``grad_x_input``). The relevance of the full embedding is the one ``pa_lrp`` adds up for such a model: ``sem + pos``
with the single learned-PE sink signed (official), ``sem_relu + pos_relu`` (eq11); BERT's token-type embedding stays
out, as in ``pa_lrp``. So on those models ``attnlrp`` with ``full`` is ``pa_lrp`` before its division by the max
(official) and equal to it under eq11. ``partial`` (token embeddings only) is how every run scored them before the
switch existed. RoPE, ALiBi and vision models: the switch changes nothing (:func:`embeddings_switch_applies`).
"""
from __future__ import annotations

import torch

from ..errors import BadInputError
from ..lrp.positional import LearnedAbsolute
from .registry import Method

AGGREGATIONS = ("official", "eq11")
#: the ``embeddings`` switch (module docstring); ``full`` is the default
EMBEDDINGS = ("full", "partial")


def check_embeddings(embeddings: str) -> str:
    """``embeddings`` if it is one of :data:`EMBEDDINGS`, else a one-line error."""
    if embeddings not in EMBEDDINGS:
        raise BadInputError(f"unknown embeddings {embeddings!r}", f"use one of: {', '.join(EMBEDDINGS)}")
    return embeddings


def embeddings_switch_applies(method: Method, positional_kind: str | None, modality: str) -> bool:
    """Whether the ``embeddings`` switch changes the scores of ``method`` on a model of ``modality`` whose position
    is of ``positional_kind`` (a name of :mod:`palrp_bench.lrp.positional`): text models with a learned absolute
    position embedding and the methods that score the semantic part alone (module docstring). Vision transformers
    keep the PA-LRP protocol's rows."""
    return modality == "tokens" and positional_kind == LearnedAbsolute.name and method.reads_embeddings_switch


def _max_normalise(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Divide each row by its max |value| over valid tokens (rows that are all zero stay zero)."""
    m = torch.where(valid, x.abs(), torch.zeros_like(x)).amax(-1, keepdim=True)
    return torch.where(m > 0, x / torch.where(m > 0, m, torch.ones_like(m)), x)


def token_terms(method: Method, aggregation: str, *, semantic: torch.Tensor, semantic_relu: torch.Tensor,
                positional: torch.Tensor, positional_relu: torch.Tensor, positional_shared_relu: torch.Tensor,
                multi_sink: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-token ``(semantic term, positional term)`` ``[B, T]`` that ``aggregation`` combines into the scores
    of ``method`` (module docstring): official ``sem[i]`` (signed) and ``pos[i]`` (``sum |.|`` over the per-layer
    sinks of a multi-sink kind, signed for a single sink or the multi-sink ablation); eq11 the ReLU sums. Inputs as
    :func:`aggregate_tokens`. Reports show them side by side with the scores (``Explanation.extras``)."""
    if aggregation == "official":
        if method.positional_abs and multi_sink:
            return semantic, positional.abs().sum(dim=(1, 2))
        return semantic, positional.sum(dim=(1, 2))
    if aggregation == "eq11":
        pos = positional_relu.sum(dim=(1, 2)) if method.positional_abs else positional_shared_relu.sum(dim=1)
        return semantic_relu, pos
    raise BadInputError(f"unknown aggregation {aggregation!r}", f"use one of: {', '.join(AGGREGATIONS)}")


def aggregate_tokens(method: Method, aggregation: str, *, semantic: torch.Tensor, semantic_relu: torch.Tensor,
                     positional: torch.Tensor, positional_relu: torch.Tensor,
                     positional_shared_relu: torch.Tensor, valid: torch.Tensor, multi_sink: bool = True,
                     full_embeddings: bool = False) -> torch.Tensor:
    """Final ``[B, T]`` scores of ``method``.

    Inputs (float, batch first): ``semantic``/``semantic_relu`` ``[B, T]``; ``positional``/``positional_relu``
    ``[B, S, C, T]`` (per sink S and component C: RoPE one sink per layer with cos/sin, ALiBi one per layer with
    one component, a learned PE one sink with one); ``positional_shared_relu`` ``[B, C, T]`` (ReLU of the
    sink-summed element relevance); ``valid`` ``[B, T]`` bool (real tokens). ``multi_sink``: the positional kind
    has one sink per layer; with a single sink (learned PE, as for DeiT) there is nothing for ``|.|`` to keep
    apart and the positional term enters signed (paper Eq. 5). ``full_embeddings``: the semantic term is the full
    embedding's relevance, the token's plus its learned position's (module docstring; only for a single sink).
    The two terms are :func:`token_terms`.
    """
    if full_embeddings and multi_sink:
        raise ValueError("full embeddings are defined for a single learned position sink")
    sem, pos = token_terms(method, aggregation, semantic=semantic, semantic_relu=semantic_relu,
                           positional=positional, positional_relu=positional_relu,
                           positional_shared_relu=positional_shared_relu, multi_sink=multi_sink)
    if full_embeddings:
        sem = sem + pos
    if aggregation == "official":
        if method.use_semantic and not method.use_positional:
            scores = sem
        elif method.use_positional and not method.use_semantic:
            scores = _max_normalise(pos, valid)
        else:
            scores = _max_normalise(sem + pos, valid)
    else:  # eq11 (token_terms refused any other name)
        total = torch.zeros_like(sem)
        if method.use_semantic:
            total = total + sem
        if method.use_positional:
            total = total + pos
        scores = _max_normalise(total, valid)
    return torch.where(valid, scores, torch.zeros_like(scores))
