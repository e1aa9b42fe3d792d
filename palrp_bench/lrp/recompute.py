"""Recompute instead of storing: one layer at a time in the backward (``checkpoint="layers"``; docs/engine.md,
"Long contexts").

Every LRP rule is a forward-identical modification of the backward (:mod:`palrp_bench.lrp.rules`), written as
custom autograd functions and detached factors inside the forward. A backward that recomputes a layer's forward
from its input therefore recomputes the rules with it: the relevance is the one of the stored graph, to float
rounding. Two pieces do it:

* :func:`layer`: a twin's layer ``fn(x, ...)`` under PyTorch's non-reentrant activation checkpoint. The forward
  keeps the layer's inputs (the residual stream ``x``, the layer's positional sinks, which are leaves created
  outside the layer, and constants) and none of its activations; the backward recomputes the layer, then runs its
  backward. Gradients reach the sinks through the graph of the first forward (the recomputation only supplies the
  saved tensors), so the relevance read from them is the same.
* :func:`tokenwise`: the position-wise tail of a layer (norm, MLP, residual sum: every token alone), run in chunks
  of :data:`CHUNK_ROWS` token rows. Inside a checkpointed layer its forward computes the chunks
  without keeping anything and its backward recomputes and backpropagates one chunk at a time, so the
  ``[T, ffn]``-sized MLP activations exist for one chunk only; when the backward recomputes the layer, the tail
  (the layer's last operation, whose output nothing in the layer reads) is not computed again. Outside a
  checkpointed layer it is the plain call.

Layers that record attention (an :class:`~palrp_bench.lrp.rules.AttentionRecorder` given to the twin or any
:func:`~palrp_bench.lrp.rules.attention_hooks`) and forwards without gradients run as they are: a recorder keeps
every layer's weights anyway, a recomputation would record twice, and hooks are set per thread, which the backward
may not share.
"""
from __future__ import annotations

from contextvars import ContextVar
from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from ..errors import BadInputError
from . import rules

__all__ = ["CHECKPOINTS", "CHUNK_ROWS", "check_checkpoint", "layer", "tokenwise", "chunk_tokens"]

#: ``checkpoint=`` values: ``none`` keeps every activation for the backward, ``layers`` keeps each layer's input
#: and recomputes the layer in the backward
CHECKPOINTS = ("none", "layers")
#: token rows (``batch x tokens``) of one chunk of a :func:`tokenwise` tail: 4096 tokens at batch 1, whose MLP
#: activations in a Llama-3.1-8B (ffn 14336, bf16) are 117 MB per tensor; matrix products of that many rows run at
#: full speed on a GPU
CHUNK_ROWS = 4096

#: inside :func:`layer`'s checkpointed function: ``"forward"`` on its first call, ``"recompute"`` on the backward's
#: call; None elsewhere
_PHASE: ContextVar[str | None] = ContextVar("palrp_checkpoint_phase", default=None)


def check_checkpoint(value) -> str:
    """``value`` as one of :data:`CHECKPOINTS` (None = ``none``), else a one-line :class:`BadInputError`."""
    name = "none" if value is None else str(getattr(value, "value", value)).strip().lower()
    if name not in CHECKPOINTS:
        raise BadInputError(f"checkpoint={value!r} is not a checkpointing mode",
                            f"use one of: {', '.join(CHECKPOINTS)} (layers: recompute each layer in the backward)")
    return name


class _LayerCall:
    """The function the activation checkpoint runs: its first call is the forward, later calls recompute."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.calls = 0

    def __call__(self, *args):
        self.calls += 1
        token = _PHASE.set("forward" if self.calls == 1 else "recompute")
        try:
            return self.fn(*args)
        finally:
            _PHASE.reset(token)


def layer(fn: Callable, *args, checkpoint: str, recorder=None):
    """``fn(*args)``, one layer of a twin; with ``checkpoint="layers"`` under a non-reentrant activation checkpoint
    (module docstring). ``fn`` must create no leaf whose gradient is wanted (sinks are created by the caller and
    passed in ``args``) and, where it uses :func:`tokenwise`, end with it. ``recorder``: the twin's attention
    recorder, if any (recording layers run as they are)."""
    if (checkpoint == "none" or recorder is not None or rules.attention_hooks_installed()
            or not torch.is_grad_enabled()):
        return fn(*args)
    return torch_checkpoint(_LayerCall(fn), *args, use_reentrant=False, preserve_rng_state=False)


def chunk_tokens(batch: int) -> int:
    """Tokens per chunk of a batch of ``batch`` sequences: :data:`CHUNK_ROWS` rows, at least one token."""
    return max(1, CHUNK_ROWS // max(1, batch))


class _Tokenwise(torch.autograd.Function):
    """``fn(*xs)`` for a position-wise ``fn`` of ``[B, T, ...]`` inputs, in token chunks (see :func:`tokenwise`).
    Forward: the chunks without a graph (nothing kept but the inputs); with ``skip`` (the backward recomputing the
    layer) an expanded NaN of the output's shape instead. Backward: per chunk, the forward with a graph and its
    backward, written into the inputs' gradients."""

    @staticmethod
    def forward(ctx, fn, chunk, skip, *xs):  # noqa: D401
        ctx.fn, ctx.chunk = fn, chunk
        ctx.save_for_backward(*xs)
        b, t = xs[0].shape[:2]
        if skip:  # the layer's last operation while the backward recomputes it: never read (module docstring)
            probe = fn(*(x[:, :1] for x in xs))
            return probe.new_full((), float("nan")).expand(b, t, *probe.shape[2:])
        out = None
        for start in range(0, t, chunk):
            y = fn(*(x[:, start:start + chunk] for x in xs))
            if out is None:
                out = y.new_empty(b, t, *y.shape[2:])
            out[:, start:start + chunk] = y
        return out

    @staticmethod
    def backward(ctx, grad):
        xs = ctx.saved_tensors
        wanted = ctx.needs_input_grad[3:]
        grads = [torch.zeros_like(x) if need else None for x, need in zip(xs, wanted)]
        t = xs[0].shape[1]
        for start in range(0, t, ctx.chunk):
            stop = start + ctx.chunk
            with torch.enable_grad():
                parts = [x[:, start:stop].detach().requires_grad_(need) for x, need in zip(xs, wanted)]
                y = ctx.fn(*parts)
                inputs = [p for p, need in zip(parts, wanted) if need]
                got = iter(torch.autograd.grad(y, inputs, grad[:, start:stop], allow_unused=True))
            for g, need in zip(grads, wanted):
                if need:
                    part = next(got)
                    if part is not None:
                        g[:, start:stop] = part
        return (None, None, None, *grads)


def tokenwise(fn: Callable[..., torch.Tensor], *xs: torch.Tensor) -> torch.Tensor:
    """``fn(*xs)`` where ``fn`` is position-wise over dimension 1 of its ``[B, T, ...]`` inputs (token ``t`` of the
    output depends on token ``t`` of the inputs only) and differentiable in ``xs`` alone (tensors it closes over,
    such as weights, are constants). Inside a checkpointed :func:`layer` it runs in token chunks (module docstring)
    and must be the layer's last operation; elsewhere it is ``fn(*xs)``."""
    phase = _PHASE.get()
    if phase is None or not torch.is_grad_enabled() or not any(x.requires_grad for x in xs):
        return fn(*xs)
    return _Tokenwise.apply(fn, chunk_tokens(xs[0].shape[0]), phase == "recompute", *xs)
