"""Evidence metrics: do token scores land on annotated evidence? PG, MRR, RMA, PTA (docs/evaluation.md "Evidence
metrics"; the decomposition-attribution paper, "A Close Look at Decomposition-based Attributions for Transformer
Language Models", section 4.2 and Table 1).

Every function takes, for a batch of ``B`` samples of ``T`` token positions,

* ``scores``: FloatTensor ``[B, T]``, one relevance score per token (any real dtype; compared in float64, which
  every float16 / bfloat16 / float32 value converts to exactly, so ties are the ties of the given scores);
* ``evidence``: BoolTensor ``[B, T]``, the evidence tokens (the annotated span after tokenisation);
* ``valid``: BoolTensor ``[B, T]``, the evaluated tokens (the evaluation mask of the variant: special tokens, the
  question, padding left out). Only valid tokens are ranked or counted: an invalid token never outranks,
  ties with or dilutes anything. ``evidence`` must lie inside ``valid`` and every row needs a valid token;

and returns float64 ``[B]`` in [0, 1] on the device of ``scores``. A row with a non-finite score on a valid token
gives NaN (the table counts the sample in ``n_nonfinite``). A row without any evidence token scores 0 in PG, MRR
and RMA (no evidence token is ranked or receives relevance); loaders drop such samples before they get here.

Definitions (paper section 4.2; ``n`` = valid tokens of the row, ``E`` = its evidence tokens):

* **PG** (:func:`pointing_game`): 1 if the top-scoring token is evidence, else 0.
* **MRR** (:func:`mrr`): ``1 / r``, ``r`` the best (smallest) rank of an evidence token, ranks in decreasing
  order of score starting at 1 (the table number is the mean over samples, hence "mean" reciprocal rank).
* **RMA** (:func:`relevance_mass_accuracy`): positive relevance on evidence / positive relevance on all valid
  tokens, ``sum_E max(s, 0) / sum_valid max(s, 0)``; 0 when no valid token has positive relevance (counted, not
  dropped).
* **PTA** (:func:`per_token_accuracy`): the share of valid tokens classified right by the sign of their score,
  ``mean_valid [(s > 0) == evidence]`` (evidence should be strictly positive, the rest zero or negative). For
  scores that are positive everywhere it is the evidence share ``|E| / n``.
* **IoU** (the AttnLRP paper's SQuAD v2 plausibility, its section 4.1, not the decomposition paper's):
  ``|P ∩ E| / |P ∪ E|`` over the valid tokens (the context), in two readings, the row variant naming which
  (:data:`IOU_VARIANTS`): ``positive`` (:func:`positive_iou`), ``P`` the tokens scoring > 0; ``top_answer``
  (:func:`top_answer_iou`), ``P`` the ``|E|`` highest-scoring tokens (scale-free: any positive rescaling or shift of
  the scores keeps it). The paper's sentence ("the IoU between the positive attribution values and the ground
  truth mask") fixes neither the threshold nor the set size, and ``> 0`` cannot give its 0.840 / 0.531 for signed
  AttnLRP maps and rollouts positive on every token: the published values are not comparable with either reading
  (:data:`IOU_NOTE`). Table number the plain sample mean in [0, 1] as the AttnLRP paper prints it. The segmentation
  mIoU (metrics/segmentation.py) is another quantity: pixel counts pooled over images, background and foreground
  averaged.

Ties (PG and MRR only; ``ties=``):

* ``official``: MRR as the code of Ferrando et al. (2023) that the paper uses; that code has no pointing game, so
  PG's rule is this project's choice: the *first* arg-max (lowest position among the valid tokens, what
  ``argmax`` returns). MRR ranks with ``scipy.stats.rankdata(s, method="dense")``: the rank of a
  token is ``n - dense_ascending_rank + 1``. Every tie at or below the best evidence score lowers it, not only
  ties at the top: with ``d_below`` distinct values among the ``below`` tokens scoring less than the best evidence
  token, ``above`` tokens scoring more and ``m`` tied with it, the rank is ``above + m + (below - d_below)``, the
  worst position of that tie group pushed further down by each duplicate below it (ties above it do not count).
  Hence MRR < PG is possible: ``s = [1, 1]``, evidence = token 0 gives PG 1 (first arg-max) and MRR 1/2, and
  ``s = [3, 1, 1]`` with the same evidence gives PG 1 and MRR 1/2 without any tie at the top.
* ``corrected``: the exact expectation over a uniformly random order of the tied tokens (every order of each tie
  group equally likely, independently), in closed form, no sampling. PG: the share of evidence tokens among the
  tokens tied at the maximum, ``|E ∩ M| / |M|``. MRR: let ``b`` be the best evidence score, ``a`` the number of
  valid tokens scoring above ``b`` (none of them evidence), ``m`` the tokens scoring exactly ``b`` and ``k >= 1``
  the evidence tokens among them. Every order puts the ``a`` tokens first, so the best evidence rank is ``a + J``
  with ``J`` the position of the first evidence token within the ``m`` tied ones; tokens below ``b`` never
  matter. The ``k`` evidence positions are a uniformly random ``k``-subset of ``{1..m}``, so
  ``P(J >= j) = C(m - j + 1, k) / C(m, k)`` and ``P(J = j) = C(m - j, k - 1) / C(m, k)`` for
  ``j = 1 .. m - k + 1`` (these sum to 1 by the hockey-stick identity). Hence::

      E[1 / (a + J)] = sum_{j=1}^{m-k+1} C(m - j, k - 1) / C(m, k) / (a + j)

  computed from ``P(J = 1) = k / m`` and ``P(J = j + 1) / P(J = j) = (m - j - k + 1) / (m - j)``. Special cases:
  ``k = m`` gives ``1 / (a + 1)``; ``k = 1`` gives ``(H(a + m) - H(a)) / m`` (harmonic numbers).

What holds per sample (tested): corrected MRR >= corrected PG (if the top group holds evidence then ``a = 0`` and
``PG = P(J = 1) <= E[1 / J]``, else PG = 0); official MRR <= corrected MRR (the official rank
``a + m + (below - d_below)`` is at least ``a + m``, never better than the worst rank of any order,
``a + m - k + 1``), with equality exactly when the best evidence score is untied and no two tokens below it
tie; official MRR < official PG is possible (above). Without ties both rules agree.

Rows (what an evidence task writes per sample, scalar rows, values in [0, 1]; :func:`evidence_rows`): for each
evaluation mask ``V`` (``default``, ``with_special``, ``with_question`` for qa and the needle, ``key`` for the needle;
:data:`EVALUATION_MASKS`)

* ``pg``, ``mrr`` with variant ``V`` under the official tie rule (the rule of the published table, so ``default``
  meets its ``default``) and with variant ``V_corrected_ties`` under the corrected rule (:func:`tie_variant`). The
  rule is named in the variant, not taken from ``protocol``: both come from the same scores at no cost, so every
  run shows how far ties move a number;
* ``rma``, ``pta`` with variant ``V`` (no ties involved);
* ``tied_token_share`` with variant ``V`` (:func:`tied_token_share`): how much of the row a tie rule can touch.

``metrics.csv`` (:mod:`palrp_bench.metrics.table`) reports each as 100 x the sample mean (percent, like the paper);
``pg``, ``mrr``, ``rma``, ``pta`` are higher-is-better, ``tied_token_share`` has no direction.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..errors import BadInputError
from ..rundir import SCALAR
from .registry import MetricSource, MetricSpec, register_metric, sample_mean

__all__ = ["TIES", "EVALUATION_MASKS", "CORRECTED_TIES_SUFFIX", "EVIDENCE_METRICS", "TIED_TOKEN_SHARE",
           "pointing_game", "mrr", "relevance_mass_accuracy", "per_token_accuracy", "tied_token_share",
           "tie_variant", "evidence_rows", "percent_mean", "positive_iou", "top_answer_iou", "IOU_METRIC",
           "IOU_VARIANTS", "IOU_NOTE"]

#: the tie rules of PG and MRR (module docstring)
TIES: tuple[str, ...] = ("official", "corrected")
#: the evaluation masks an evidence task scores one explanation under (``with_question``: qa and needle; ``key``: the
#: needle's key as the evidence over the ``default`` tokens; ``with_text``: visual questions, every token besides the
#: image's, whose ``default`` is the image tokens)
EVALUATION_MASKS: tuple[str, ...] = ("default", "with_special", "with_question", "key", "with_text")
#: appended to the evaluation mask in the variant of ``pg`` / ``mrr`` rows under the corrected tie rule
CORRECTED_TIES_SUFFIX = "_corrected_ties"
#: the table metrics of the paper's Table 1, in its column order
EVIDENCE_METRICS: tuple[str, ...] = ("pg", "mrr", "rma", "pta")
TIED_TOKEN_SHARE = "tied_token_share"
#: the AttnLRP paper's plausibility metric on SQuAD v2 (:func:`positive_iou`, :func:`top_answer_iou`)
IOU_METRIC = "iou"
#: the readings of the IoU, as row variants: which tokens count as attributed (module docstring)
IOU_VARIANTS: tuple[str, ...] = ("positive", "top_answer")
#: written into the ``note`` column of every ``iou`` table number (and shown as a footnote by the report)
IOU_NOTE = ("the AttnLRP paper does not define which tokens its IoU counts as attributed; its published IoU is not "
            "comparable with iou:positive (score > 0) or iou:top_answer (the |answer| highest scores)")


# ----------------------------------------------------------------------------------------------------------------
# input checks
# ----------------------------------------------------------------------------------------------------------------

def _scores(scores) -> torch.Tensor:
    s = torch.as_tensor(scores).detach()
    if s.dim() != 2:
        raise BadInputError(f"scores has shape {tuple(s.shape)}, expected [B, T] (one row of token scores per sample)",
                            "pass a 2-D tensor; a single sample is scores[None]")
    if s.is_complex():
        raise BadInputError(f"scores has dtype {s.dtype}, expected real numbers", "pass real-valued token scores")
    return s.to(torch.float64)


def _mask(mask, name: str, like: torch.Tensor) -> torch.Tensor:
    m = torch.as_tensor(mask)
    if m.dtype != torch.bool:
        raise BadInputError(f"{name} has dtype {m.dtype}, expected a BoolTensor",
                            f"pass a boolean mask (e.g. {name}.bool())")
    if tuple(m.shape) != tuple(like.shape):
        raise BadInputError(f"{name} has shape {tuple(m.shape)} but scores has shape {tuple(like.shape)}",
                            "pass masks of the scores' shape [B, T]")
    return m.to(like.device)


def _rows(mask: torch.Tensor) -> str:
    rows = torch.nonzero(mask).flatten().tolist()
    return ", ".join(map(str, rows[:5])) + (", ..." if len(rows) > 5 else "")


def _prepare(scores, valid, evidence=None):
    """``(s, valid, evidence, finite)``: float64 scores with non-finite rows zeroed, the masks on the scores'
    device, and which rows had only finite scores on their valid tokens."""
    s = _scores(scores)
    v = _mask(valid, "valid", s)
    empty = ~v.any(dim=1)
    if bool(empty.any()):
        raise BadInputError(f"valid selects no token in sample rows {_rows(empty)}",
                            "every sample needs at least one evaluated token; drop samples whose mask is empty")
    e = None
    if evidence is not None:
        e = _mask(evidence, "evidence", s)
        outside = (e & ~v).any(dim=1)
        if bool(outside.any()):
            raise BadInputError(f"evidence marks tokens that valid leaves out, in sample rows {_rows(outside)}",
                                "mark evidence only on evaluated tokens (evidence & valid)")
    finite = torch.where(v, torch.isfinite(s), torch.ones_like(v)).all(dim=1)
    s = torch.where(finite[:, None] & v, s, torch.zeros_like(s))
    return s, v, e, finite


def _check_ties(ties: str) -> str:
    if ties not in TIES:
        raise BadInputError(f"unknown ties {ties!r}", f"use one of: {', '.join(TIES)}")
    return ties


def _nan_where_nonfinite(out: torch.Tensor, finite: torch.Tensor) -> torch.Tensor:
    return torch.where(finite, out, torch.full_like(out, float("nan")))


def _sorted_valid(s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's valid scores in ascending order, invalid positions (+inf) after them, and which sorted positions
    hold a valid token."""
    ordered = torch.where(v, s, torch.full_like(s, float("inf"))).sort(dim=1).values
    positions = torch.arange(s.shape[1], device=s.device)[None, :]
    return ordered, positions < v.sum(dim=1, keepdim=True)


# ----------------------------------------------------------------------------------------------------------------
# the metrics
# ----------------------------------------------------------------------------------------------------------------

def pointing_game(scores, evidence, valid, ties: str = "official") -> torch.Tensor:
    """Pointing game per sample, float64 ``[B]`` (paper section 4.2: 1 if the top token is evidence).

    ``ties="official"``: the first arg-max among the valid tokens decides (0 or 1; our rule: Ferrando et al.'s code,
    which the published MRR follows, has no pointing game). ``ties="corrected"``: the
    expectation over random orders of the tokens tied at the maximum, i.e. the share of evidence tokens among them.
    Module docstring for the arguments and the NaN rule.
    """
    ties = _check_ties(ties)
    s, v, e, finite = _prepare(scores, valid, evidence)
    top = torch.where(v, s, torch.full_like(s, -float("inf"))).max(dim=1, keepdim=True).values
    at_top = v & (s == top)
    if ties == "official":
        positions = torch.arange(s.shape[1], device=s.device).expand_as(s)
        first = torch.where(at_top, positions, torch.full_like(positions, s.shape[1])).min(dim=1).values
        out = e.gather(1, first[:, None])[:, 0].to(torch.float64)
    else:
        out = (at_top & e).sum(dim=1).to(torch.float64) / at_top.sum(dim=1).to(torch.float64)
    return _nan_where_nonfinite(out, finite)


def mrr(scores, evidence, valid, ties: str = "official") -> torch.Tensor:
    """Reciprocal of the best rank of an evidence token per sample, float64 ``[B]`` (paper section 4.2; the table
    number is its mean over samples).

    ``ties="official"``: dense ranks as Ferrando et al. (2023), ``rank = n - dense_ascending_rank + 1`` over the
    valid tokens (every tie at or below the best evidence score lowers it). ``ties="corrected"``: the exact
    expectation of ``1 / rank`` over random orders of tied tokens (the closed form derived in the module
    docstring). 0 for a row without evidence.
    """
    ties = _check_ties(ties)
    s, v, e, finite = _prepare(scores, valid, evidence)
    has_evidence = e.any(dim=1)
    best = torch.where(e, s, torch.full_like(s, -float("inf"))).max(dim=1, keepdim=True).values
    if ties == "official":
        ordered, in_row = _sorted_valid(s, v)
        new_value = torch.ones_like(in_row)
        new_value[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        dense = (in_row & new_value & (ordered <= best)).sum(dim=1)
        rank = v.sum(dim=1) - dense + 1
        out = 1.0 / rank.to(torch.float64)
    else:
        above = (v & (s > best)).sum(dim=1, keepdim=True).to(torch.float64)
        tied = (v & (s == best)).sum(dim=1, keepdim=True).to(torch.float64)
        hits = (e & (s == best)).sum(dim=1, keepdim=True).to(torch.float64)
        tied_safe, hits_safe = tied.clamp(min=1.0), hits.clamp(min=1.0)
        # P(J = 1) = k / m, P(J = j + 1) / P(J = j) = (m - j - k + 1) / (m - j) while j + 1 <= m - k + 1
        j = torch.arange(1, s.shape[1], device=s.device, dtype=torch.float64)[None, :]
        step = torch.where(j <= tied_safe - hits_safe, (tied_safe - j - hits_safe + 1) / (tied_safe - j).clamp(min=1.0),
                           torch.zeros_like(j))
        probability = torch.cumprod(torch.cat([hits_safe / tied_safe, step], dim=1), dim=1)
        positions = torch.arange(1, s.shape[1] + 1, device=s.device, dtype=torch.float64)[None, :]
        out = (probability / (above + positions)).sum(dim=1)
    out = torch.where(has_evidence, out, torch.zeros_like(out))
    return _nan_where_nonfinite(out, finite)


def relevance_mass_accuracy(scores, evidence, valid) -> torch.Tensor:
    """Share of the positive relevance that lies on evidence per sample, float64 ``[B]`` (paper section 4.2, after
    Arras et al. 2022): ``sum_E max(s, 0) / sum_valid max(s, 0)``; 0 when no valid token has positive relevance."""
    s, v, e, finite = _prepare(scores, valid, evidence)
    positive = torch.where(v, s.clamp(min=0.0), torch.zeros_like(s))
    total = positive.sum(dim=1)
    inside = torch.where(e, positive, torch.zeros_like(s)).sum(dim=1)
    denominator = torch.where(total > 0, total, torch.ones_like(total))
    out = torch.where(total > 0, inside / denominator, torch.zeros_like(total))
    return _nan_where_nonfinite(out, finite)


def per_token_accuracy(scores, evidence, valid) -> torch.Tensor:
    """Share of valid tokens whose sign is right per sample, float64 ``[B]`` (paper section 4.2): evidence tokens
    should score > 0, the others <= 0; ``mean_valid [(s > 0) == evidence]``."""
    s, v, e, finite = _prepare(scores, valid, evidence)
    right = v & ((s > 0) == e)
    out = right.sum(dim=1).to(torch.float64) / v.sum(dim=1).to(torch.float64)
    return _nan_where_nonfinite(out, finite)


def positive_iou(scores, evidence, valid) -> torch.Tensor:
    """Intersection over union of the positively attributed tokens and the evidence per sample, float64 ``[B]``
    in [0, 1] (the AttnLRP paper's plausibility metric, its section 4.1: "the Intersection over Union (IoU)
    between the positive attribution values and the ground truth mask"; docs/baselines.md "The Flan-T5 SQuAD v2 column"):
    ``|P ∩ E| / |P ∪ E|`` over the valid tokens, ``P = {s > 0}`` (strictly positive: a score of exactly 0 is not
    an attribution). 0 when both sets are empty. The same set ``P`` as :func:`per_token_accuracy`'s, which
    counts the tokens this ratio leaves out (the true negatives) too."""
    s, v, e, finite = _prepare(scores, valid, evidence)
    positive = v & (s > 0)
    inter = (positive & e).sum(dim=1).to(torch.float64)
    union = (positive | e).sum(dim=1).to(torch.float64)
    out = torch.where(union > 0, inter / union.clamp(min=1.0), torch.zeros_like(union))
    return _nan_where_nonfinite(out, finite)


def top_answer_iou(scores, evidence, valid) -> torch.Tensor:
    """Intersection over union of the ``|E|`` highest-scoring valid tokens and the evidence ``E`` per sample,
    float64 ``[B]`` in [0, 1] (the scale-free reading of the AttnLRP paper's IoU, module docstring):
    ``|T ∩ E| / |T ∪ E| = o / (2 |E| - o)``, ``o = |T ∩ E|``. Ties at the ``|E|``-th score are broken towards the
    lower position (the first-arg-max rule of :func:`pointing_game`, a choice of this project). 0 for a row without
    evidence."""
    s, v, e, finite = _prepare(scores, valid, evidence)
    k = e.sum(dim=1)
    positions = torch.arange(s.shape[1], device=s.device).expand_as(s)
    # descending score, lower position first among equal scores; invalid tokens last
    order = torch.argsort(torch.where(v, s, torch.full_like(s, -float("inf"))), dim=1, descending=True, stable=True)
    rank = torch.empty_like(positions)
    rank.scatter_(1, order, positions)
    top = v & (rank < k[:, None])
    overlap = (top & e).sum(dim=1).to(torch.float64)
    size = k.to(torch.float64)
    out = torch.where(size > 0, overlap / (2 * size - overlap).clamp(min=1.0), torch.zeros_like(size))
    return _nan_where_nonfinite(out, finite)


def tied_token_share(scores, valid) -> torch.Tensor:
    """Share of the valid tokens whose score equals the score of another valid token (tie groups of size >= 2) per
    sample, float64 ``[B]`` in [0, 1]: what the tie rules of :func:`pointing_game` and :func:`mrr` can touch.

    Exact equality of the given scores (no tolerance): bfloat16 scores, and methods that give many tokens exactly
    0, tie far more often than float64 ones. NaN for a row with a non-finite valid score."""
    s, v, _, finite = _prepare(scores, valid)
    ordered, in_row = _sorted_valid(s, v)
    equal_next = (ordered[:, 1:] == ordered[:, :-1]) & in_row[:, 1:]
    tied = torch.zeros_like(in_row)
    tied[:, 1:] |= equal_next
    tied[:, :-1] |= equal_next
    out = tied.sum(dim=1).to(torch.float64) / v.sum(dim=1).to(torch.float64)
    return _nan_where_nonfinite(out, finite)


# ----------------------------------------------------------------------------------------------------------------
# per-sample rows and the table metrics
# ----------------------------------------------------------------------------------------------------------------

def tie_variant(variant: str, ties: str) -> str:
    """The row variant of ``pg`` / ``mrr`` under a tie rule: ``variant`` itself under ``official`` (the published
    rule), ``variant + "_corrected_ties"`` under ``corrected``."""
    return variant if _check_ties(ties) == "official" else variant + CORRECTED_TIES_SUFFIX


def evidence_rows(scores, evidence, valid, variant: str) -> list[list[tuple[str, str, None, float]]]:
    """Every evidence row of each sample under one evaluation mask ``variant`` (:data:`EVALUATION_MASKS`): a list
    per sample of ``(metric, variant, step, value)`` scalar rows as the task adapters write them (module
    docstring, "Rows"): ``pg`` and ``mrr`` under both tie rules, ``rma``, ``pta`` and ``tied_token_share``."""
    if variant not in EVALUATION_MASKS:
        raise BadInputError(f"unknown evaluation mask {variant!r}", f"use one of: {', '.join(EVALUATION_MASKS)}")
    columns: list[tuple[str, str, torch.Tensor]] = []
    for ties in TIES:
        columns.append(("pg", tie_variant(variant, ties), pointing_game(scores, evidence, valid, ties)))
        columns.append(("mrr", tie_variant(variant, ties), mrr(scores, evidence, valid, ties)))
    columns.append(("rma", variant, relevance_mass_accuracy(scores, evidence, valid)))
    columns.append(("pta", variant, per_token_accuracy(scores, evidence, valid)))
    columns.append((TIED_TOKEN_SHARE, variant, tied_token_share(scores, valid)))
    values = [(metric, name, column.cpu().tolist()) for metric, name, column in columns]
    batch = len(values[0][2])
    return [[(metric, name, SCALAR, float(column[i])) for metric, name, column in values] for i in range(batch)]


def percent_mean(components) -> np.ndarray | float:
    """100 x the sample mean of one per-sample value ``[..., n, 1]`` in [0, 1]: the table number of every evidence
    metric (vectorised over leading axes like :func:`~palrp_bench.metrics.registry.sample_mean`)."""
    return 100.0 * sample_mean(components)


def _variants(with_ties: bool) -> tuple[str, ...]:
    masks: Sequence[str] = EVALUATION_MASKS
    return tuple(masks) + (tuple(m + CORRECTED_TIES_SUFFIX for m in masks) if with_ties else ())


_CONVENTION = "100 x the sample mean of the per-sample value in [0, 1]"
_TIES_NOTE = ("; variant <mask> ties by the first arg-max (PG, our rule) / dense ranks (MRR, the official code), "
              "<mask>_corrected_ties the exact expectation over random orders of tied tokens")
for _name, _description, _ties in (
        ("pg", "pointing game: the top-scoring evaluated token is evidence", True),
        ("mrr", "mean reciprocal rank of the best-ranked evidence token", True),
        ("rma", "relevance mass accuracy: share of the positive relevance on evidence (0 without positive relevance)",
         False),
        ("pta", "per-token accuracy: share of evaluated tokens with (score > 0) == evidence", False)):
    register_metric(MetricSpec(_name, True, _CONVENTION + (_TIES_NOTE if _ties else ""),
                               _description + " (decomposition-attribution paper section 4.2)", "4.2", "%",
                               _variants(_ties), (MetricSource((_name,)),), percent_mean))
register_metric(MetricSpec(IOU_METRIC, True, "sample mean of the per-sample IoU in [0, 1] (the paper's scale)",
                           "IoU of the attributed context tokens with the answer span, correctly answered answerable "
                           "questions only (AttnLRP paper section 4.1); variant positive: tokens scoring > 0, "
                           "top_answer: the |answer| highest-scoring tokens", "4.1", "", IOU_VARIANTS,
                           (MetricSource((IOU_METRIC,)),), sample_mean, note=IOU_NOTE))
register_metric(MetricSpec(TIED_TOKEN_SHARE, None, _CONVENTION,
                           "share of evaluated tokens whose score ties with another evaluated token (what the tie "
                           "rules of pg and mrr can change), per evaluation mask", "4.2", "%", EVALUATION_MASKS,
                           (MetricSource((TIED_TOKEN_SHARE,)),), percent_mean))
