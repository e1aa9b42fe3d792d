"""Explaining language models: one LRP forward + one backward per batch, then token aggregation.

PROTOCOL.md section 1: the explained output is the arg-max logit (the predicted class of a classifier, the
predicted next token after the last non-pad position of a causal LM) unless ``target`` says otherwise; its
starting relevance is its own value (Gradient x Input seed 1). Relevance of the semantic sink is
``R(E) = E * E.grad``, of the per-layer RoPE sinks ``R(cos_k) = cos_k * cos_k.grad`` (likewise sin).
"""
from __future__ import annotations

import torch

from ..errors import BadInputError
from ..lrp.composites import Composite
from ..lrp.explanation import Explanation
from .registry import Method
from .token_aggregation import aggregate_tokens


def validate_token_inputs(twin, input_ids, attention_mask):
    """Check shapes/lengths and return (input_ids [B,T] long, attention_mask [B,T] long or None)."""
    if not isinstance(input_ids, torch.Tensor):
        input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
        raise BadInputError(f"input_ids must be an integer tensor [batch, tokens], got {tuple(input_ids.shape)} "
                            f"{input_ids.dtype}", "tokenize the text first (tokenizer(text, return_tensors='pt'))")
    if input_ids.shape[1] == 0 or input_ids.shape[0] == 0:
        raise BadInputError("empty input (no tokens)", "pass at least one token (a non-empty text)")
    max_len = getattr(twin.config, "max_position_embeddings", None)
    if max_len is not None and input_ids.shape[1] > max_len:
        raise BadInputError(f"sequence of {input_ids.shape[1]} tokens is longer than the model context ({max_len})",
                            f"truncate to at most {max_len} tokens")
    vocab = twin.embed_tokens.num_embeddings
    if int(input_ids.max()) >= vocab or int(input_ids.min()) < 0:
        raise BadInputError(f"token id out of range for a vocabulary of {vocab}",
                            "use the tokenizer that belongs to this model")
    device = twin.device
    input_ids = input_ids.to(device=device, dtype=torch.long)
    if attention_mask is not None:
        attention_mask = torch.as_tensor(attention_mask)
        if attention_mask.dim() == 1:
            attention_mask = attention_mask[None]
        if attention_mask.shape != input_ids.shape:
            raise BadInputError(f"attention_mask shape {tuple(attention_mask.shape)} differs from input_ids "
                                f"{tuple(input_ids.shape)}", "pass the mask the tokenizer returned")
        attention_mask = attention_mask.to(device=device, dtype=torch.long)
        if bool((attention_mask.sum(-1) == 0).any()):
            raise BadInputError("a sample has no real token (attention_mask all zero)", "drop empty texts")
    return input_ids, attention_mask


def resolve_target(target, logits: torch.Tensor) -> torch.Tensor:
    """``None`` -> arg-max; an int or a ``[B]`` tensor selects the explained index per sample."""
    b, c = logits.shape
    if target is None:
        return logits.detach().argmax(-1)
    t = torch.as_tensor(target, device=logits.device).long()
    if t.dim() == 0:
        t = t.expand(b)
    if t.shape != (b,):
        raise BadInputError(f"target must be an int or a [{b}] tensor, got shape {tuple(t.shape)}",
                            "pass one class/token index per sample")
    if bool((t < 0).any()) or bool((t >= c).any()):
        raise BadInputError(f"target index out of range for {c} outputs", f"use indices in [0, {c - 1}]")
    return t


def explain_tokens(twin, input_ids, *, method: Method, composite: Composite, target=None,
                   aggregation: str = "official", attention_mask=None, causal: bool = True,
                   attention: str = "sdpa", correct_sign: bool = False) -> Explanation:
    """Explain a batch with a language twin (:class:`palrp_bench.models.llama.LlamaTwin`).

    ``causal=False`` reproduces the official non-causal ARC/Wikipedia runs (PROTOCOL.md section 2).
    ``correct_sign=True`` fixes the IMDB sign hazard (PROTOCOL.md section 2): when the explained logit is
    negative the signed semantic and positional terms are multiplied by -1 before aggregation, so positive
    scores always mean "supports the explained output". Off under ``protocol=official``.
    """
    input_ids, attention_mask = validate_token_inputs(twin, input_ids, attention_mask)
    last = twin.last_index(input_ids, attention_mask)
    embeds = twin.embed(input_ids)
    with torch.enable_grad():
        out = twin.forward(embeds, attention_mask, last, composite, positional_sinks=method.positional_sinks,
                           causal=causal, attention=attention)
        tgt = resolve_target(target, out.logits)
        explained = out.logits.gather(1, tgt[:, None])[:, 0]
        leaves = [embeds, *out.cos, *out.sin]
        grads = torch.autograd.grad(explained.sum(), leaves, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)]
    n_layers = len(out.cos)
    acc = torch.promote_types(embeds.dtype, torch.float32)  # sums in float32 at least, float64 stays float64
    sem_elem = embeds.detach().to(acc) * grads[0].to(acc)
    semantic = sem_elem.sum(-1)
    semantic_relu = sem_elem.clamp(min=0).sum(-1)
    b, t = input_ids.shape
    if n_layers:
        cos_el = [c.detach().to(acc) * g.to(acc) for c, g in zip(out.cos, grads[1:1 + n_layers])]
        sin_el = [s.detach().to(acc) * g.to(acc) for s, g in zip(out.sin, grads[1 + n_layers:])]
        positional = torch.stack([torch.stack([c.sum(-1), s.sum(-1)], 1) for c, s in zip(cos_el, sin_el)], 1)
        positional_relu = torch.stack([torch.stack([c.clamp(min=0).sum(-1), s.clamp(min=0).sum(-1)], 1)
                                       for c, s in zip(cos_el, sin_el)], 1)
        shared = torch.stack([torch.stack(cos_el).sum(0).clamp(min=0).sum(-1),
                              torch.stack(sin_el).sum(0).clamp(min=0).sum(-1)], 1)
    else:
        positional = torch.zeros(b, twin.num_layers, 2, t, device=semantic.device, dtype=acc)
        positional_relu = positional.clone()
        shared = torch.zeros(b, 2, t, device=semantic.device, dtype=acc)
    logit = explained.detach().to(acc)
    if correct_sign:
        sign = torch.where(logit < 0, -1.0, 1.0).to(device=semantic.device, dtype=acc)
        semantic = semantic * sign[:, None]
        positional = positional * sign[:, None, None, None]
    valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(semantic, dtype=torch.bool)
    scores = aggregate_tokens(method, aggregation, semantic=semantic, semantic_relu=semantic_relu,
                              positional=positional, positional_relu=positional_relu,
                              positional_shared_relu=shared, valid=valid)
    return Explanation(scores=scores, semantic=semantic, positional=positional, logit=logit, target=tgt,
                       method=method.name, rules=composite.name, aggregation=aggregation,
                       attention_mask=attention_mask,
                       extras={"semantic_relu": semantic_relu, "positional_relu": positional_relu,
                               "positional_shared_relu": shared, "explained_index": last})
