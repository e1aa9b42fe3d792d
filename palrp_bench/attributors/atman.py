"""AtMan (Deb et al. 2023): attention manipulation, one input token at a time, batched.

AttnLRP paper appendix A.1.5: for token ``i`` the pre-softmax scores ``H = Q K^T`` of every head of every layer are
multiplied column-wise, ``H~ = H * (1 - p^i)`` with ``p^i`` equal to the suppression value ``p`` in column ``i`` and
0 elsewhere. Scaling column ``i`` of ``Q K^T`` is scaling key ``i``, which the hook
:func:`palrp_bench.lrp.rules.attention_hooks` (``key_scale``) does inside every attention call of the twin's plain
forward, on the fused and the eager path.

Correlated tokens (``threshold`` ``t``; the paper uses it for the ViT only, Deb et al.'s "conceptual
suppression"): every other feature token ``k`` whose input embedding (a decoder's token embedding, a ViT's patch
embedding) has cosine similarity ``s`` with token ``i`` in ``[t, 1]`` is suppressed too, with the factor
``(1 - f) (1 - s) + f`` where ``f = 1 - p`` is token ``i``'s own factor (Deb et al.'s rule: ``s = 1`` gives ``f``,
``s = 0`` no suppression).

Relevance of token ``i`` (``score``): ``cross_entropy`` (Deb et al.) = the increase of the explained output's
cross-entropy when ``i`` is suppressed, ``log p_j(x) - log p_j(x~_i)``; ``logit`` = the drop of the explained logit,
``f_j(x) - f_j(x~_i)``. A contrastive call (``foil`` ``k``) measures the change of the difference instead:
``d(x) - d(x~_i)`` with ``d = f_j - f_k`` under ``logit`` and ``d = log p_j - log p_k`` under ``cross_entropy``,
which is the same number (the log-softmax normaliser cancels). The features are the real tokens of a decoder input and the patch tokens of a ViT (painted
over their pixels). Each sample costs ``N_T + 1`` forwards (one per feature token, plus the unsuppressed
reference in the same batched passes), no backward; ``batch_size`` rows go through one forward.

Encoder-decoders (T5; AttnLRP paper section 4: "suppressing tokens in all self-attention layers within the encoder,
while only doing so in cross-attention layers within the decoder"): the features are the real encoder tokens, and
their keys are scaled in every call whose keys are encoder tokens, the encoder self-attention and the decoder's
cross-attention (:func:`~.base.feature_key_sites`), never in the decoder's self-attention. The scaling is of
``Q K^T`` as the paper writes it; T5's relative position bias is added afterwards, unscaled (docs/baselines.md,
"T5").
"""
from __future__ import annotations

import torch

from ..errors import BadInputError
from ..lrp import rules
from . import register_attributor
from .base import (AttributorCall, AttributorResult, feature_key_sites, input_of, logits_from, patch_embeddings,
                   patch_grid, per_patch, prefix_tokens, select_rows, valid_tokens)

__all__ = ["atman", "suppression_factors", "SCORES"]

#: how a suppression's effect on the explained output is measured
SCORES = ("cross_entropy", "logit")


def suppression_factors(features: torch.Tensor, n_tokens: int, suppression: float, threshold: float | None,
                        embeddings: torch.Tensor | None = None) -> torch.Tensor:
    """Key factors ``[1 + N, n_tokens]`` of one sample: row 0 all ones (the reference), row ``1 + j`` suppresses
    feature ``features[j]`` (a token position) and, with a ``threshold``, its correlated features (module
    docstring; ``embeddings`` ``[N, D]`` of the features, in the order of ``features``)."""
    n = features.numel()
    own = 1.0 - float(suppression)
    factors = torch.ones(n + 1, n_tokens, dtype=torch.float64, device=features.device)
    block = torch.ones(n, n, dtype=torch.float64, device=features.device)
    if threshold is not None:
        e = embeddings.double()
        e = e / e.norm(dim=-1, keepdim=True).clamp(min=1e-8)
        sim = (e @ e.T).clamp(-1, 1)
        correlated = (sim >= float(threshold)) & (sim >= 0)
        block = torch.where(correlated, (1 - own) * (1 - sim) + own, block)
    block.fill_diagonal_(own)
    factors[1:, features] = block
    return factors


def _feature_positions(call: AttributorCall, b: int) -> torch.Tensor:
    if call.modality == "tokens":
        return torch.nonzero(valid_tokens(call.twin, call.prepared)[b]).reshape(-1)
    hp, wp = patch_grid(call.twin, call.prepared)
    start = prefix_tokens(call.twin)
    return torch.arange(start, start + hp * wp, device=call.prepared.pixels.device)


def _feature_embeddings(call: AttributorCall, x: torch.Tensor, b: int, features: torch.Tensor) -> torch.Tensor:
    if call.modality == "tokens":
        return x[b, features]
    return patch_embeddings(call.twin, x[b:b + 1])[0]


def _explained_score(logits: torch.Tensor, target: int, score: str, foil: int | None = None) -> torch.Tensor:
    logits = logits.double()
    values = logits if score == "logit" else torch.log_softmax(logits, dim=-1)
    if foil is None:
        return values[:, target]
    return values[:, target] - values[:, foil]


@register_attributor("atman", passes=lambda p, n: (n + 1, 0))
def atman(call: AttributorCall) -> AttributorResult:
    p = call.params
    score = str(p["score"])
    if score not in SCORES:
        raise BadInputError(f"unknown AtMan score {score!r}", f"use one of: {', '.join(SCORES)}")
    threshold = None if p["threshold"] is None else float(p["threshold"])
    x = input_of(call.twin, call.prepared)
    if call.modality == "tokens":
        n_tokens = x.shape[1]
    else:
        hp, wp = patch_grid(call.twin, call.prepared)
        n_tokens = prefix_tokens(call.twin) + hp * wp
    sites = feature_key_sites(call.twin)
    relevance = torch.zeros(call.batch, n_tokens, dtype=torch.float64, device=x.device)
    passes = torch.zeros(call.batch, dtype=torch.long)
    for b in range(call.batch):
        features = _feature_positions(call, b)
        embeddings = _feature_embeddings(call, x, b, features) if threshold is not None else None
        factors = suppression_factors(features, n_tokens, float(p["suppression"]), threshold, embeddings)
        chunk = call.batch_size or factors.shape[0]
        values = []
        with torch.no_grad():
            for start in range(0, factors.shape[0], chunk):
                scale = factors[start:start + chunk]
                rows = torch.full((scale.shape[0],), b, dtype=torch.long, device=x.device)
                with rules.attention_hooks(key_scale=scale, key_scale_sites=sites):
                    logits = logits_from(call.twin, select_rows(call.prepared, rows), x[rows], **call.options)
                values.append(_explained_score(logits, int(call.target[b]), score,
                                               None if call.foil is None else int(call.foil[b])))
        values = torch.cat(values)
        relevance[b, features] = values[0] - values[1:]
        passes[b] = factors.shape[0]
    if call.modality == "tokens":
        return AttributorResult(relevance, passes, torch.zeros_like(passes))
    return AttributorResult(per_patch(call.twin, call.prepared, relevance), passes, torch.zeros_like(passes),
                            per_patch=True)
