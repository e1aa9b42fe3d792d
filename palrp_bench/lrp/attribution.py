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

Contrastive explanations (Yin and Neubig 2022; docs/engine.md "Contrastive explanations"): with a ``foil`` the
explained output is the difference ``d = logit[target] - logit[foil]``, one scalar per sample, and the starting
conventions apply to ``d``: under ``"logit"`` its relevance is ``d`` itself (seed gradient +1 at the target logit,
-1 at the foil logit), under ``"unit"`` it is 1.0 (seeds ``+1/d`` and ``-1/d``). Every rule is a modified gradient,
linear in the seed, so under ``"logit"`` the contrastive relevance is exactly the target's minus the foil's; under
``"unit"`` it is that difference divided by ``d``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from ..errors import BadInputError

__all__ = ["TwinForward", "Attribution", "attribute", "resolve_target", "resolve_foil", "explained_output",
           "seed_gradient", "STARTING_RELEVANCE", "embedding_sink", "absorbed_relevance"]

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
    tensors, e.g. one per layer). Every sink is a leaf the forward starts from (inputs, positional encodings),
    except those a forward names in an optional ``probes`` attribute (e.g. a ViT's patch tokens, an intermediate
    tensor whose relevance comes from the pixels'): :func:`absorbed_relevance` leaves probes out."""

    logits: torch.Tensor

    @property
    def sinks(self) -> dict[str, torch.Tensor | list[torch.Tensor]]: ...


@dataclass
class Attribution:
    """The outcome of :func:`attribute`: the forward record, the explained index and value ``[B]`` (the logit, or
    with a foil the difference ``logit[target] - logit[foil]``), the foil index ``[B]`` (None without one), and the
    elementwise relevance of every sink (same structure as ``forward.sinks``), in at least float32."""

    forward: Any
    target: torch.Tensor
    logit: torch.Tensor
    relevance: dict[str, torch.Tensor | list[torch.Tensor]]
    foil: torch.Tensor | None = None


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


def resolve_foil(foil, target: torch.Tensor, logits: torch.Tensor) -> torch.Tensor | None:
    """The contrast class / token per sample: ``None`` (no contrast), an int or a ``[B]`` tensor (on any device),
    checked like a target and refused where it equals the explained ``target`` (the difference would be 0 with
    nothing to explain). Returned on the logits' device."""
    if foil is None:
        return None
    b, c = logits.shape
    f = torch.as_tensor(foil)
    if f.is_floating_point() or f.is_complex() or f.dtype == torch.bool:
        raise BadInputError(f"foil must hold integer class/token ids, got dtype {f.dtype}",
                            "pass one integer id per sample")
    f = f.long()
    if f.dim() == 0:
        f = f.expand(b)
    if f.shape != (b,):
        raise BadInputError(f"foil must be an int or a [{b}] tensor, got shape {tuple(f.shape)}",
                            "pass one contrast class/token id per sample")
    if bool((f < 0).any()) or bool((f >= c).any()):
        raise BadInputError(f"foil id out of range for {c} outputs", f"use ids in [0, {c - 1}]")
    f = f.to(logits.device)
    same = torch.nonzero(f == target.to(logits.device)).reshape(-1).tolist()
    if same:
        shown = ", ".join(str(i) for i in same[:5]) + (", ..." if len(same) > 5 else "")
        raise BadInputError(f"the foil equals the explained target for sample(s) {shown}",
                            "pass a foil other than the target (target=None explains the arg-max)")
    return f


def explained_output(logits: torch.Tensor, target: torch.Tensor, foil: torch.Tensor | None = None) -> torch.Tensor:
    """``[B]`` value explained per sample: ``logits[b, target[b]]``, minus ``logits[b, foil[b]]`` with a foil
    (module docstring). Differentiable: its gradient is the seed +1 / -1 on the two logits."""
    explained = logits.gather(1, target[:, None].to(logits.device))[:, 0]
    if foil is None:
        return explained
    return explained - logits.gather(1, foil[:, None].to(logits.device))[:, 0]


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


def attribute(run_forward: Callable[[], TwinForward], target=None, *, starting_relevance: str,
              foil=None) -> Attribution:
    """Run ``run_forward()`` with gradients on, explain ``target`` (or ``logit[target] - logit[foil]`` with a
    ``foil``; module docstring) and return the relevance of every sink. Sinks the explained output does not reach
    get zero relevance."""
    with torch.enable_grad():
        out = run_forward()
        tgt = resolve_target(target, out.logits)
        contrast = resolve_foil(foil, tgt, out.logits)
        explained = explained_output(out.logits, tgt, contrast)
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
    return Attribution(out, tgt, explained.detach().to(acc), relevance, contrast)


def absorbed_relevance(attribution: Attribution, starting_relevance: str) -> torch.Tensor:
    """Per sample ``[B]``, the starting relevance (module docstring) minus the relevance of every sink that is not a
    probe (:class:`TwinForward`): what the rules absorbed on the way, so that the sinks and it add up to the starting
    relevance (docs/design.md, "accounting identity"). Under AttnLRP rules the softmax keeps the relevance entering
    it minus the relevance leaving it, each bias ``b * grad_b``, and a position encoding the method holds constant
    (no sink) all it receives; rules that conserve give 0 up to rounding. Accumulated in float64, returned in the
    dtype of ``attribution.logit``."""
    logit = attribution.logit
    start = logit.double() * seed_gradient(logit, starting_relevance).double()
    probes = set(getattr(attribution.forward, "probes", ()))
    reached = torch.zeros_like(start)
    for name, value in attribution.relevance.items():
        if name in probes:
            continue
        for r in (value if isinstance(value, (list, tuple)) else [value]):
            reached = reached + r.double().flatten(1).sum(1).to(reached.device)
    return (start - reached).to(logit.dtype)
