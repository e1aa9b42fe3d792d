"""Positional encodings as relevance sinks: each kind declares its sinks, its rule and the identity it satisfies.

PA-LRP (paper Sec. 3-4; docs/protocol.md section 1) reads positional relevance off *sinks*: tensors the forward
uses that carry position only. Every kind here says

* ``sinks``: which tensors become leaves (and how many per forward: one, or one per layer = "multi-sink");
* ``rule``: how the encoding enters the forward and how relevance is split there (a forward-identical gradient
  modification, DESIGN.md);
* ``identity``: the relation between relevances its rule guarantees, which the tests check;
* ``affects_semantic``: whether making the encoding a sink changes the relevance of anything else. For an added
  encoding (learned absolute) it does not, so its sink is always read; for RoPE the products split relevance
  between q/k and cos/sin, so the semantic relevance of PA-LRP differs from AttnLRP's, whose cos/sin are constants;
* ``reduce``: the per-token (per-patch) positional relevance from the sinks' elementwise relevance ``x * grad``.

A new kind (partial or 2D RoPE, ALiBi, sinusoidal) is one class registered with :func:`register_positional`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..errors import BadInputError
from . import rules

__all__ = ["PositionalKind", "RoPE", "LearnedAbsolute", "POSITIONAL_KINDS", "register_positional",
           "get_positional", "RopeRelevance"]

POSITIONAL_KINDS: dict[str, type["PositionalKind"]] = {}


def register_positional(cls: type["PositionalKind"]) -> type["PositionalKind"]:
    """Class decorator: register a positional kind under ``cls.name``."""
    POSITIONAL_KINDS[cls.name] = cls
    return cls


def get_positional(name: str) -> "PositionalKind":
    try:
        return POSITIONAL_KINDS[name]()
    except KeyError:
        raise BadInputError(f"unknown positional encoding kind {name!r}",
                            f"use one of: {', '.join(sorted(POSITIONAL_KINDS))}") from None


class PositionalKind:
    """Base of the registry (see the module docstring)."""

    name: ClassVar[str]
    multi_sink: ClassVar[bool]
    affects_semantic: ClassVar[bool]
    sinks: ClassVar[str]
    rule: ClassVar[str]
    identity: ClassVar[str]


@dataclass
class RopeRelevance:
    """Positional relevance of RoPE sinks (docs/protocol.md section 1):

    * ``per_layer`` ``[B, L, 2, T]``: signed ``sum_d cos*grad`` (``[:, :, 0]``) and ``sum_d sin*grad`` (``[:, :, 1]``)
      per layer and token, summed over heads and the q and k sides;
    * ``per_layer_relu`` ``[B, L, 2, T]``: the same sums of the positive elements only (paper Eq. 11);
    * ``shared_relu`` ``[B, 2, T]``: positive elements of the layer-summed element relevance (one shared sink,
      Eq. 11 without multi-sink).
    """

    per_layer: torch.Tensor
    per_layer_relu: torch.Tensor
    shared_relu: torch.Tensor


@register_positional
class RoPE(PositionalKind):
    """Rotary position embedding (LLaMA family).

    * sinks: one fresh leaf copy of ``(cos, sin)`` per layer (multi-sink), shared by the q and k sides;
    * rule: ``x*cos + rot(x)*sin`` with the uniform rule on each product, so half of the relevance of each rotated
      query/key element goes to ``x`` and half to ``cos`` / ``sin`` (paper Eq. 10);
    * identity: per layer and token, ``R(cos) + R(sin) = (R(q~) + R(k~)) / 2`` where ``q~``, ``k~`` are the rotated
      queries and keys.
    """

    name = "rope"
    multi_sink = True
    affects_semantic = True
    sinks = "one (cos, sin) leaf pair per layer"
    rule = "uniform rule on x*cos and rot(x)*sin (paper Eq. 10)"
    identity = "R(cos_k) + R(sin_k) = (R(q~_k) + R(k~_k)) / 2 per layer k"

    @staticmethod
    def layer_sinks(cos: torch.Tensor, sin: torch.Tensor, enabled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(cos, sin)`` a layer uses: fresh leaves when sinks are on, the shared constants otherwise."""
        if not enabled:
            return cos, sin
        return cos.detach().clone().requires_grad_(True), sin.detach().clone().requires_grad_(True)

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, product_rule: str) -> torch.Tensor:
        """``x*cos + rot(x)*sin`` for ``x`` ``[B, H, T, d]`` and ``cos``/``sin`` ``[B, T, d]``, each product under
        ``product_rule`` (``uniform`` in every LRP composite)."""
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        return rules.product(x, cos, rule=product_rule) + rules.product(rules.rotate_half(x), sin, rule=product_rule)

    @staticmethod
    def reduce(cos_relevance: list[torch.Tensor], sin_relevance: list[torch.Tensor], n_layers: int, batch: int,
               tokens: int, like: torch.Tensor) -> RopeRelevance:
        """Per-layer sums of the elementwise relevance ``[B, T, d]`` of each layer's sinks (empty lists: zeros)."""
        if not cos_relevance:
            zeros = like.new_zeros(batch, n_layers, 2, tokens)
            return RopeRelevance(zeros, zeros.clone(), like.new_zeros(batch, 2, tokens))
        per_layer = torch.stack([torch.stack([c.sum(-1), s.sum(-1)], 1)
                                 for c, s in zip(cos_relevance, sin_relevance)], 1)
        per_layer_relu = torch.stack([torch.stack([c.clamp(min=0).sum(-1), s.clamp(min=0).sum(-1)], 1)
                                      for c, s in zip(cos_relevance, sin_relevance)], 1)
        shared = torch.stack([torch.stack(cos_relevance).sum(0).clamp(min=0).sum(-1),
                              torch.stack(sin_relevance).sum(0).clamp(min=0).sum(-1)], 1)
        return RopeRelevance(per_layer, per_layer_relu, shared)


@register_positional
class LearnedAbsolute(PositionalKind):
    """A learned absolute position embedding added to the token embeddings (ViT / DeiT, GPT-2, BERT).

    * sinks: one leaf copy of the position table per forward (single sink);
    * rule: ``z = E + P`` under the epsilon rule (eps -> 0, a plain add), so ``R(P) = P * grad_z`` (paper Eq. 5);
    * identity: ``R(E) + R(P) = R(z)``: token and position relevance add up to the embedding's.
    """

    name = "learned_absolute"
    multi_sink = False
    affects_semantic = False
    sinks = "one leaf copy of the position table"
    rule = "epsilon rule on z = E + P (paper Eq. 5, eps -> 0)"
    identity = "R(E) + R(P) = R(E + P)"

    @staticmethod
    def sink(table: torch.Tensor, batch: int) -> torch.Tensor:
        """A per-sample leaf copy ``[B, N, D]`` of the ``[1, N, D]`` position table."""
        return table.detach().expand(batch, -1, -1).clone().requires_grad_(True)

    @staticmethod
    def reduce(relevance: torch.Tensor) -> torch.Tensor:
        """Per-position relevance ``sum_d R(P)[n, d]``: ``[B, N]``."""
        return relevance.sum(-1)
