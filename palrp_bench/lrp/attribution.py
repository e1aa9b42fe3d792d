"""One LRP explanation: one forward under a composite, one backward from the explained output (docs/design.md section
1).

Every model family uses this procedure (Zennit's "attributor"). A twin's LRP-aware forward returns the logits and
its named *sinks* (the tensors whose relevance ``x * grad`` is wanted: input embeddings or pixels, positional
sinks, probes such as patch tokens); :func:`attribute` picks the explained output, seeds the backward and returns
the elementwise relevance of every sink.

Explained output and starting relevance (docs/protocol.md section 1): the arg-max logit unless ``target`` says
otherwise; its starting relevance is

* ``"logit"``: its own value (language models; Gradient x Input seed 1);
* ``"unit"``: 1.0 (vision; the official code feeds a one-hot vector, i.e. a seed gradient ``1 / logit``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from ..errors import BadInputError

__all__ = ["TwinForward", "Attribution", "attribute", "resolve_target", "seed_gradient", "STARTING_RELEVANCE",
           "embedding_sink"]

def embedding_sink(embedding: torch.nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """The token embeddings as a leaf of the graph: the semantic sink, ``R(E) = E * E.grad`` after the backward
    (docs/design.md section 3). The lookup itself carries no relevance rule, so it runs without autograd."""
    with torch.no_grad():
        e = embedding(input_ids)
    return e.detach().requires_grad_(True)


#: starting relevance of the explained output (module docstring)
STARTING_RELEVANCE = ("logit", "unit")


class TwinForward(Protocol):
    """What a twin's LRP-aware forward returns: ``logits`` ``[B, C]`` and ``sinks`` (name -> tensor or list of
    tensors, e.g. one per layer)."""

    logits: torch.Tensor

    @property
    def sinks(self) -> dict[str, torch.Tensor | list[torch.Tensor]]: ...


@dataclass
class Attribution:
    """The outcome of :func:`attribute`: the forward record, the explained index and logit ``[B]``, and the
    elementwise relevance of every sink (same structure as ``forward.sinks``), in at least float32."""

    forward: Any
    target: torch.Tensor
    logit: torch.Tensor
    relevance: dict[str, torch.Tensor | list[torch.Tensor]]


def resolve_target(target, logits: torch.Tensor) -> torch.Tensor:
    """``None`` -> arg-max; an int or a ``[B]`` tensor (on any device) selects the explained index per sample.
    Checked where the caller keeps it, returned on the logits' device."""
    b, c = logits.shape
    if target is None:
        return logits.detach().argmax(-1)
    t = torch.as_tensor(target).long()
    if t.dim() == 0:
        t = t.expand(b)
    if t.shape != (b,):
        raise BadInputError(f"target must be an int or a [{b}] tensor, got shape {tuple(t.shape)}",
                            "pass one class/token index per sample")
    if bool((t < 0).any()) or bool((t >= c).any()):
        raise BadInputError(f"target index out of range for {c} outputs", f"use indices in [0, {c - 1}]")
    return t.to(logits.device)


def seed_gradient(explained: torch.Tensor, starting_relevance: str) -> torch.Tensor:
    """The gradient fed to the explained outputs so that their relevance ``logit * seed`` is the starting
    relevance: ones for ``"logit"``; ``1 / logit`` for ``"unit"`` (a logit of exactly 0 has nothing to
    distribute: seed 0)."""
    if starting_relevance == "logit":
        return torch.ones_like(explained)
    if starting_relevance != "unit":
        raise ValueError(f"unknown starting relevance {starting_relevance!r}; expected one of {STARTING_RELEVANCE}")
    e = explained.detach()
    return torch.where(e != 0, 1.0 / torch.where(e != 0, e, torch.ones_like(e)), torch.zeros_like(e))


def _flatten(sinks: dict) -> tuple[list[tuple[str, int | None]], list[torch.Tensor]]:
    keys, tensors = [], []
    for name, value in sinks.items():
        if isinstance(value, (list, tuple)):
            for i, t in enumerate(value):
                keys.append((name, i))
                tensors.append(t)
        else:
            keys.append((name, None))
            tensors.append(value)
    return keys, tensors


def attribute(run_forward: Callable[[], TwinForward], target=None, *, starting_relevance: str) -> Attribution:
    """Run ``run_forward()`` with gradients on, explain ``target`` (module docstring) and return the relevance of
    every sink. Sinks the explained output does not reach get zero relevance."""
    with torch.enable_grad():
        out = run_forward()
        tgt = resolve_target(target, out.logits)
        explained = out.logits.gather(1, tgt[:, None])[:, 0]
        keys, tensors = _flatten(out.sinks)
        grads = torch.autograd.grad(explained, tensors, grad_outputs=seed_gradient(explained, starting_relevance),
                                    allow_unused=True)
    relevance: dict[str, Any] = {}
    for (name, index), x, g in zip(keys, tensors, grads):
        acc = torch.promote_types(x.dtype, torch.float32)  # float32 at least; float64 stays float64
        r = x.detach().to(acc) * (torch.zeros_like(x) if g is None else g).to(acc)
        if index is None:
            relevance[name] = r
        else:
            relevance.setdefault(name, []).append(r)
    for name, value in out.sinks.items():  # an empty per-layer list stays an empty list
        if isinstance(value, (list, tuple)) and not value:
            relevance[name] = []
    acc = torch.promote_types(explained.dtype, torch.float32)
    return Attribution(out, tgt, explained.detach().to(acc), relevance)
