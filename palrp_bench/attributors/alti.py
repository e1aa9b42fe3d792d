"""ALTI (Ferrando et al. 2022) and ALTI-Logit (Ferrando et al. 2023) from one traced forward (docs/baselines.md,
"ALTI and ALTI-Logit").

Notation. Block ``l = 1..L`` reads the residual stream ``x^{l-1}_j`` (``D`` wide) at every position ``j``; ``x^0`` is
the stream's input (GPT-2: word + position embedding; LLaMA: word embedding; BERT: the embedding LayerNorm's
output). Its attention output at position ``i`` is

    a^l_i = sum_j T^l_i(x_j) + b_O^l,     T^l_i(x_j) = sum_h A^{l,h}_{ij} W_O^{l,h} v^{l,h}_j,

with ``v^{l,h}_j`` the value vector of head ``h`` (grouped-query attention: the value head of ``h``'s group), which
includes the pre-norm's bias and the value bias (the affine "full" decomposition of Ferrando et al.'s code); the
attention weights ``A`` are constants. A pre-norm decoder adds it to the stream, ``y^l = x^{l-1} + a^l``, then its
MLP, ``x^l = y^l + m^l``; a post-norm encoder (BERT) normalises, ``y^l = LN(x^{l-1} + a^l)``.

**ALTI** (Ferrando et al. 2022, for BERT). Per block, the transformed vectors of the sum the block forms at ``i``
(the residual counted as a source) are ``X^l_{ij} = T^l_i(x_j) + delta_ij x^{l-1}_i``, so that
``y^l_i = sum_j X^l_{ij} + b_O^l``; under a post-norm its linear part with the normaliser of position ``i``
constant, ``N_i(z) = gamma * (z - mean(z)) / s_i``, is applied to each, ``X^l_{ij} <- N_i(X^l_{ij})``, and
``y^l_i = sum_j X^l_{ij} + N_i(b_O) + beta`` (the norm's output). With ``d_{ij} = ||y_i - X_{ij}||_1`` the
contribution of ``j`` to ``i`` is

    c^l_{ij} = max(0, ||y^l_i||_1 - d^l_{ij}) / sum_k max(0, ||y^l_i||_1 - d^l_{ik})

(their clipped L1 contribution; rows sum to 1; a pair the masks forbid gets 0, and a row with nothing left, which
only a masked-out padding row can be, gets the identity). The MLP mixes no positions and is not a term. The
relevance of the input tokens is the explained position's row of the rollout ``C^L C^{L-1} ... C^1`` (no identity
added: the residual is inside each ``C``). The scores are non-negative and sum to 1; targets and foils play no part.

**ALTI-Logit** (Ferrando et al. 2023; "A Close Look at Decomposition-based Attributions for Transformer Language
Models", appendix B.1, which extends it to Llama 3: grouped-query attention, RMSNorm). The explained logit is
``f = u . N_f(x^L_T) + b`` at the explained position ``T`` (``u``, ``b``: the head's row and bias). With the final
norm's normaliser constant (``s`` of the actual ``x^L_T``; LayerNorm or RMSNorm) ``f`` is affine in ``x^L_T``:
``f = g . x^L_T + c`` with ``g`` the gradient of ``f`` through the linearised final norm and head (a contrastive
explanation uses ``u_target - u_foil`` and ``b_target - b_foil``: everything below is linear in them). Following
the residual stream, ``x^L_T = x^0_T + sum_l (a^l_T + m^l_T)``, so

    f = sum_l sum_j Delta^l_j + sum_l g . m^l_T + sum_l g . b_O^l + g . x^0_T + c,     Delta^l_j = g . T^l_T(x_j),

the logit update of block ``l``'s attention from source ``j``. The MLP terms are not redistributed (an MLP mixes
no positions); the attention terms are tracked to the input tokens with the ALTI matrices of the blocks below:

    R_s = sum_l sum_j Delta^l_j [C^{l-1} ... C^1]_{js}      (the empty product is the identity),

so ``sum_s R_s = sum_l sum_j Delta^l_j`` (rows of ``C`` sum to 1). The explained position's own input vector
reaches the head along the residual too: its direct term ``g . x^0_T`` belongs to token ``T``, and Ferrando et al.'s
evaluation code adds it to the last input token before ranking. The scores are ``R`` with that term added at
``T``, ``[B, T]``, so that

    sum_s scores_s + sum_l g . m^l_T + sum_l g . b_O^l + c = f;

the other terms are in ``extras``: ``alti_logit_mlp`` and ``alti_logit_attention_bias`` ``[B, L]``,
``alti_logit_output_bias`` ``c`` ``[B]`` and ``alti_logit_explained`` ``f`` ``[B]`` (tested to float64 rounding),
and for the record ``alti_logit_embedding`` ``g . x^0_T`` ``[B]``, the part of the score at ``T`` that came
straight from the embedding.

What the twin must be: the wiring is read off the trace of :class:`palrp_bench.lrp.rules.AttentionRecorder`
(residual sums, output projections, norms of the stream), so any twin that writes its residual sums with
:func:`~palrp_bench.lrp.rules.residual` is covered without knowing about ALTI. ``alti`` takes pre-norm decoders
(GPT-2, OPT, the decoder-spec families with sequential residuals) and post-norm encoders (BERT, RoBERTa, post-norm
OPT); ``alti_logit`` pre-norm decoders only (BERT: one line naming ``alti``, the paper's proxy). Refused in one
line: attention outputs transformed before the residual sum (Gemma 2 / 3 sandwich norms), parallel residuals
(GPT-NeoX's default), soft-capped logits, twins that do not trace their residual stream (BLOOM, ViTs).

Cost: one forward with eager attention, no backward through the model (the gradient ``g`` crosses only the final
norm and the head: the trace cuts the graph at the last residual sum). Memory: docs/baselines.md.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from ..errors import UnsupportedModelError
from ..lrp import rules
from ..lrp.composites import GRAD_X_INPUT
from . import register_attributor
from .base import AttributorCall, AttributorResult, explained_of, forward_from, input_of

__all__ = ["LINEARISED_NORMS", "Block", "traced_forward", "stream_blocks", "projection_matrix", "alti_layer",
           "alti_rollout_row", "alti_logit_terms", "alti_matrices", "alti", "alti_logit"]

#: the forward ALTI reads: plain autograd except the norms, whose normaliser is a constant (the linearisation of
#: Ferrando et al.; LRP's identity rule), so the gradient of the logit at the last residual stream is ``g``
LINEARISED_NORMS = dataclasses.replace(GRAD_X_INPUT, name="linearised_norms", norm="identity")
#: most elements of one chunk of transformed vectors ``[B, rows, T, D]`` (query rows are processed in chunks)
CHUNK_ELEMENTS = 1 << 24


@dataclass
class Block:
    """One transformer block as ALTI sees it (all ``[B, ...]`` tensors detached).

    ``weights`` ``[B, H, T, T]``, ``values`` ``[B, H, T, d]`` (per query head), ``valid`` ``[B, T, T]`` (the pairs
    the masks allow) or None, ``projection`` the output projection (``[..., H * d] -> [..., D]``, with its bias),
    ``stream`` ``x^{l-1}`` and ``resultant`` ``y^l`` ``[B, T, D]``, ``norm`` the post-norm (None: pre-norm), and
    ``mlp`` the MLP branch ``m^l`` of a pre-norm block (None for post-norm)."""

    weights: torch.Tensor
    values: torch.Tensor
    valid: torch.Tensor | None
    projection: Callable[[torch.Tensor], torch.Tensor]
    stream: torch.Tensor
    resultant: torch.Tensor
    norm: rules.NormRecord | None
    mlp: torch.Tensor | None


def traced_forward(call: AttributorCall, with_grad: bool):
    """One forward of the batch with eager attention under a tracing recorder (:data:`LINEARISED_NORMS`);
    returns the twin's forward record and the recorder."""
    recorder = rules.AttentionRecorder(trace=True)
    options = {**call.options, "attention": "eager"}
    mode = torch.enable_grad() if with_grad else torch.no_grad()
    with mode, rules.attention_hooks(recorder=recorder):
        out = forward_from(call.twin, call.prepared, input_of(call.twin, call.prepared), LINEARISED_NORMS, **options)
    return out, recorder


def _refusal(call: AttributorCall, reason: str, fix: str | None = None) -> UnsupportedModelError:
    return UnsupportedModelError(f"{call.method.name} decomposes the residual stream, but "
                                 f"{type(call.twin.model).__name__} {reason}",
                                 fix or "use a model with sequential pre-norm blocks (GPT-2, OPT, LLaMA, Mistral, "
                                        "Qwen, Phi-3) or another method")


def stream_blocks(call: AttributorCall, recorder: rules.AttentionRecorder) -> list[Block]:
    """The blocks of a traced forward, first first, or a one-line refusal naming what does not fit (module
    docstring): every attention call's projected output is summed into the stream, and the blocks are chained
    through one stream, all pre-norm or all post-norm."""
    heads, sums, norms = recorder.heads, recorder.residuals, recorder.norms
    if not heads or not sums:
        raise _refusal(call, "does not expose its residual stream (no residual sum was traced: e.g. a parallel "
                             "residual or a twin without traced blocks)")
    attention_sum = {r.branch_from: i for i, r in enumerate(sums) if r.branch_from is not None}
    norm_of = {nr.input_from: n for n, nr in enumerate(norms)}
    blocks, previous, wiring = [], None, set()
    for k, head in enumerate(heads):
        if k not in attention_sum or head.projection is None:
            raise _refusal(call, "transforms an attention output before adding it to the residual stream (e.g. a "
                                 "sandwich norm)")
        i = attention_sum[k]
        r = sums[i]
        if (k > 0 and r.stream_from != previous) or i + 1 >= len(sums):
            raise _refusal(call, "does not chain its blocks through one residual stream")
        m = sums[i + 1]
        if m.stream_from == ("residual", i):                               # pre-norm: y = x + a, x' = y + m
            norm, resultant, mlp, previous = None, r.output.detach(), m.branch, ("residual", i + 1)
        elif m.stream_from is not None and m.stream_from[0] == "norm" and norms[m.stream_from[1]].input_from == i \
                and (i + 1) in norm_of:                                    # post-norm: y = LN(x + a), x' = LN(y + m)
            norm = norms[m.stream_from[1]]
            resultant, mlp, previous = norm.output, None, ("norm", norm_of[i + 1])
        else:
            raise _refusal(call, "has a block that is neither pre-norm nor post-norm around its attention")
        wiring.add(norm is None)
        _, weights, valid = recorder.records[k]
        b, h, t, _ = weights.shape
        if valid is not None:
            valid = torch.broadcast_to(valid, (b, 1, t, t))[:, 0]
        blocks.append(Block(weights, head.values, valid, head.projection, r.stream, resultant, norm, mlp))
    if len(wiring) > 1 or len(sums) != 2 * len(heads):
        raise _refusal(call, "mixes pre-norm and post-norm blocks or has residual sums outside its blocks")
    return blocks


def projection_matrix(block: Block, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_O [H, d, D], b_O [D])`` of the block's output projection in ``dtype``, read by applying the projection
    to the unit vectors (so any linear module works: ``Linear``, GPT-2's ``Conv1D``, quantised layers)."""
    _, h, _, d = block.values.shape
    like = block.values
    with torch.no_grad():
        bias = block.projection(torch.zeros(1, h * d, dtype=like.dtype, device=like.device))[0]
        weight = block.projection(torch.eye(h * d, dtype=like.dtype, device=like.device)) - bias
    return weight.to(dtype).reshape(h, d, -1), bias.to(dtype)


def _tolerance(dtype: torch.dtype) -> float:
    return 256 * torch.finfo(dtype).eps


def alti_layer(call: AttributorCall, block: Block, acc: torch.dtype, g: torch.Tensor | None = None,
               rows: torch.Tensor | None = None, matrix: bool = True):
    """One block: its normalised ALTI matrix ``[B, T, T]`` (float64; None unless ``matrix``) and, given ``g``
    ``[B, D]`` and the explained ``rows`` ``[B]``, the logit updates ``Delta_j = g . T_row(x_j)`` ``[B, T]`` and
    ``g . b_O`` ``[B]`` (module docstring). Transformed vectors are formed ``CHUNK_ELEMENTS`` at a time."""
    a = block.weights
    b, h, t, _ = a.shape
    w_o, b_o = projection_matrix(block, acc)
    projected = torch.einsum("bhjd,hde->bhje", block.values.to(acc), w_o)            # W_O^h v^h_j  [B, H, T, D]
    delta = bias = None
    if g is not None:
        arange = torch.arange(b, device=a.device)
        per_head = torch.einsum("bhjd,bd->bhj", projected, g)
        delta = (a[arange, :, rows.to(a.device)].to(acc) * per_head).sum(1)      # [B, T]
        bias = g @ b_o
    if not matrix:
        return None, delta, bias
    dim = projected.shape[-1]
    x, y = block.stream.to(acc), block.resultant.to(acc)
    norm = block.norm
    inverse = norm.inverse_scale(acc) if norm is not None else None
    out = torch.zeros(b, t, t, dtype=torch.float64, device=a.device)
    step = max(1, CHUNK_ELEMENTS // max(1, b * t * dim))
    worst = 0.0
    for start in range(0, t, step):
        stop = min(t, start + step)
        n = stop - start
        vectors = torch.einsum("bhij,bhjd->bijd", a[:, :, start:stop].to(acc), projected)   # [B, n, T, D]
        own = torch.arange(start, stop, device=a.device)
        vectors[:, torch.arange(n, device=a.device), own] += x[:, start:stop]
        constant = b_o.expand(b, n, dim)
        if norm is not None:
            vectors = norm.linear(vectors, inverse[:, start:stop, None])
            constant = norm.linear(constant, inverse[:, start:stop])
            if norm.bias is not None:
                constant = constant + norm.bias.to(acc)
        target = y[:, start:stop]
        scale = float(target.abs().amax()) + float(x[:, start:stop].abs().amax()) + 1e-30
        worst = max(worst, float((vectors.sum(2) + constant - target).abs().amax()) / scale)
        distance = vectors.sub_(target[:, :, None]).abs_().sum(-1)                  # d_ij  [B, n, T], in place
        out[:, start:stop] = (target.abs().sum(-1)[..., None] - distance).clamp(min=0).double()
    if worst > _tolerance(block.values.dtype):
        raise _refusal(call, f"computes an attention block that is not the sum of its traced parts (relative "
                             f"mismatch {worst:.1e})")
    if block.valid is not None:
        out = torch.where(block.valid | torch.eye(t, dtype=torch.bool, device=out.device), out, torch.zeros_like(out))
    total = out.sum(-1, keepdim=True)
    eye = torch.eye(t, dtype=out.dtype, device=out.device).expand(b, t, t)
    return torch.where(total > 0, out / torch.where(total > 0, total, torch.ones_like(total)), eye), delta, bias


def alti_rollout_row(matrices: list[torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
    """Row ``rows`` ``[B]`` of ``C^L ... C^1`` for per-block matrices ``[B, T, T]`` (first block first), computed
    as a row vector times each matrix from the last block down."""
    b, t, _ = matrices[0].shape
    u = torch.zeros(b, t, dtype=matrices[0].dtype, device=matrices[0].device)
    u[torch.arange(b, device=u.device), rows.to(u.device)] = 1.0
    for c in reversed(matrices):
        u = torch.bmm(u[:, None], c)[:, 0]
    return u


def alti_logit_terms(call: AttributorCall) -> dict:
    """The ALTI-Logit decomposition of the explained logit (module docstring): ``scores`` ``[B, T]`` (the explained
    position's direct embedding term included), ``mlp`` and ``attention_bias`` ``[B, L]``, ``embedding`` (that
    direct term), ``output_bias`` and ``explained`` ``[B]``."""
    if call.twin.final_softcap is not None:
        raise _refusal(call, "soft-caps its logits, which no linearisation of the final norm and head covers")
    out, recorder = traced_forward(call, with_grad=True)
    blocks = stream_blocks(call, recorder)
    if blocks[0].norm is not None:
        raise _refusal(call, "normalises after its residual sums (post-norm), so the stream is no sum of block "
                             "outputs", "use method=alti (Ferrando et al. 2022), the paper's proxy for BERT")
    final = recorder.residuals[-1].output
    explained = explained_of(call, out.logits)
    (grad,) = torch.autograd.grad(explained.sum(), final, allow_unused=True)
    if grad is None:
        raise _refusal(call, "computes its logits from something other than its last residual sum")
    acc = torch.promote_types(final.dtype, torch.float32)
    b = final.shape[0]
    rows = call.explained_index.to(final.device)
    arange = torch.arange(b, device=final.device)
    g = grad[arange, rows].to(acc)

    def at_rows(v):
        return (g * v[arange, rows].to(acc)).sum(-1)

    matrices, deltas, biases, mlps = [], [], [], []
    with torch.no_grad():
        for index, block in enumerate(blocks):
            c, delta, bias = alti_layer(call, block, acc, g, rows, matrix=index < len(blocks) - 1)
            matrices.append(c)
            deltas.append(delta.double())
            biases.append(bias)
            mlps.append(at_rows(block.mlp))
        scores = deltas[-1]
        for c, delta in zip(reversed(matrices[:-1]), reversed(deltas[:-1])):
            scores = torch.bmm(scores[:, None], c)[:, 0] + delta
        embedding = at_rows(blocks[0].stream)
        scores = scores.clone()
        scores[arange, rows] += embedding.to(scores.dtype)
    explained = explained.detach().to(acc)
    return {"scores": scores, "mlp": torch.stack(mlps, 1), "attention_bias": torch.stack(biases, 1),
            "embedding": embedding, "output_bias": explained - at_rows(final.detach()), "explained": explained}


def alti_memory(arch, tokens: float, batch_size: int, width: int) -> float:
    """Bytes one ALTI / ALTI-Logit explanation holds above the weights (docs/baselines.md "ALTI and ALTI-Logit",
    memory), with ``B`` the batch, ``T`` the tokens, ``L`` blocks, ``H`` heads, ``D`` the width of ``arch`` (a
    :class:`~palrp_bench.models.architecture.Architecture`), ``b = width`` bytes per element of the model's dtype and
    ``a = max(b, 4)`` of the accumulation::

        B (L (H T^2 b + 9 T D b + 8 T^2) + H T D a) + 2 min(B T^2 D, CHUNK_ELEMENTS) a  +  B H T^2 (b + 4)

    the recorded attention weights, what the trace keeps per block, the float64 ALTI matrices, one block's values
    through ``W_O`` per head, one chunk of transformed vectors with its copy, and the eager forward's scores and
    weights of one block."""
    b, a = float(width), float(max(width, 4))
    B, T, L, H, D = float(batch_size), float(tokens), float(arch.layers), float(arch.heads), float(arch.hidden)
    return (B * (L * (H * T * T * b + 9 * T * D * b + 8 * T * T) + H * T * D * a)
            + 2 * min(B * T * T * D, float(CHUNK_ELEMENTS)) * a + B * H * T * T * (b + 4))


@register_attributor("alti_logit", passes=lambda p, n: (1, 0), memory=alti_memory)
def alti_logit(call: AttributorCall) -> AttributorResult:
    terms = alti_logit_terms(call)
    ones = torch.ones(call.batch, dtype=torch.long)
    extras = {f"alti_logit_{name}": terms[name].detach()
              for name in ("mlp", "attention_bias", "embedding", "output_bias", "explained")}
    return AttributorResult(terms["scores"], ones, ones * 0, extras=extras)


def alti_matrices(call: AttributorCall) -> list[torch.Tensor]:
    """The normalised ALTI matrix ``[B, T, T]`` of every block, first block first (one traced forward)."""
    _, recorder = traced_forward(call, with_grad=False)
    blocks = stream_blocks(call, recorder)
    acc = torch.promote_types(blocks[0].stream.dtype, torch.float32)
    with torch.no_grad():
        return [alti_layer(call, block, acc)[0] for block in blocks]


@register_attributor("alti", passes=lambda p, n: (1, 0), memory=alti_memory)
def alti(call: AttributorCall) -> AttributorResult:
    scores = alti_rollout_row(alti_matrices(call), call.explained_index)
    ones = torch.ones(call.batch, dtype=torch.long)
    return AttributorResult(scores, ones, ones * 0)
