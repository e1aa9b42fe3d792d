"""``kind: evidence``: do token attributions land on annotated evidence? The sva, ra and qa tasks of the
decomposition-attribution paper and the needle in a haystack, scored with PG, MRR, RMA and PTA (docs/evidence.md).

The loaders (``sva``, ``ra``, ``qa``, ``synthetic_sva|ra|qa``, ``needle``; :mod:`palrp_bench.data.evidence_common`,
:mod:`palrp_bench.data.needle`) return
model-independent records. This adapter turns each into the input of the model's head and maps the evidence to its
tokens (:func:`prepare_evidence`):

* the text: :func:`~palrp_bench.data.evidence_common.render` for the head (``causal`` LMs read the prefix or the qa
  prompt; ``masked_lm`` models the sentence with the tokenizer's mask token), tokenised by the model's fast
  tokenizer with its own special tokens (LLaMA's BOS, BERT's [CLS] and [SEP]; GPT-2's tokenizer adds none, so none
  is prepended);
* the tokens: ``evidence`` = the tokens whose offset range overlaps an evidence span
  (:func:`~palrp_bench.data.evidence_common.tokens_overlapping`), ``special`` = the tokens the tokenizer added (an
  empty offset range: BOS, [CLS], [SEP]; a [MASK] written in the text has a range and is no such token), the
  tokens of the qa and needle ``context`` and ``question`` regions, and those of each extra evidence mask (the
  needle's ``key``);
* the read-out position: the last token (causal) or the mask token (masked LM);
* target / foil: the first token of ``" " + word`` (tokens that decode to whitespace alone skipped, e.g. a
  SentencePiece word-boundary piece); a masked LM needs words of one token.

Dropped at load, counted per reason (:data:`ADAPTER_DROPS`; the pool's ``dropped`` adds them to the loader's, the
runner logs them and writes them to the job's status and so to the manifest): the text is longer than the model's
positions, no token overlaps the evidence, the evidence covers every token of the ``default`` mask, target and foil
share their first token, the target or the foil is the tokenizer's unknown token, or a masked LM's word is not one
token.

Selection ``correct_only``: a sample is correct when ``logit(target) > logit(foil)`` at the read-out position (one
plain forward); a needle (:data:`~palrp_bench.data.evidence_common.RETRIEVAL_TASKS`) when the target's token is the
arg-max there, i.e. the value is retrieved. One explanation per sample (``palrp_bench.explain`` with ``target``
and, when the task is ``contrastive`` (the default), ``foil``: the explained value is ``logit(target) -
logit(foil)``; otherwise the target's logit alone), scored under each evaluation mask (:func:`evaluation_masks`) by the ``evidence`` procedure
(:mod:`palrp_bench.evaluation.procedures.evidence`):

* ``default``: every token but those the tokenizer added ([MASK] stays); qa and needle: the context tokens only;
* ``with_special``: ``default`` plus the tokens the tokenizer added;
* ``with_question`` (qa, needle): every token but those the tokenizer added (context, question, the prompt's words);
* ``key`` (needle): the ``default`` tokens with the needle's key as the evidence.

Each sample's info carries the descriptors of :data:`palrp_bench.rundir.SAMPLE_COLUMNS` its record has (the needle's
``length`` and ``depth``), which the merge writes as columns of ``results.csv``. With the ``positional_share``
procedure the batch holds each sample's signed semantic and positional relevance sums over its tokens.

Scores keep the explanation's precision through the metrics and the cache (:func:`score_dtype`): a cast to a
narrower float can tie distinct scores, which the official dense-rank MRR punishes, and flush tiny positive scores
to 0, which flips PTA.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch

from ...data.evidence_common import RETRIEVAL_TASKS, EvidencePool, EvidenceSample, render, tokens_overlapping
from ...data.registry import load_dataset
from ...errors import BadInputError
from ...rundir import SAMPLE_COLUMNS
from ..explained import EvidenceBatch, SampleShape
from . import register_task
from .base import JobContext, TaskAdapter, dataset_longest_tokens, dataset_tokens, explorer_arrays, pad_id

__all__ = ["EvidenceAdapter", "PreparedEvidence", "ADAPTER_DROPS", "prepare_evidence", "evaluation_masks",
           "word_token", "model_head", "max_positions", "score_dtype"]

log = logging.getLogger(__name__)

#: why the adapter drops a sample after tokenisation (added to the loader's ``EvidencePool.dropped``)
ADAPTER_DROPS: dict[str, str] = {
    "too_long": "the input is longer than the model's positions",
    "evidence_not_tokenized": "no token of the input overlaps the evidence",
    "evidence_covers_all": "the evidence covers every token of the default evaluation mask",
    "same_first_token": "target and foil share their first token",
    "unknown_word": "the tokenizer knows the target or the foil only as its unknown token",
    "multi_token_word": "a masked LM predicts one token, but the target or the foil is several",
}
#: what the cache of a sample must hold to be reused
_CACHE_KEYS = {"scores", "logit", "explained", "rules", "aggregation", "stabilizers"}
#: the per-sample relevance sums of the positional share (procedure ``positional_share``, which needs ``totals``)
_TOTALS = {"semantic_total": "relevance_semantic", "positional_total": "relevance_positional"}


@dataclass
class PreparedEvidence:
    """One record as the model's head reads it (module docstring): token ids, per-token flags (``special``: added by
    the tokenizer; ``evidence``; ``context`` / ``question``: qa and needle regions; ``extra_evidence``: the tokens of
    each extra evidence mask), the read-out ``position``, the first token of the target and of the foil, and whether
    correctness is retrieval (``retrieval``: the target is the arg-max) rather than the contrast."""

    sample_id: str
    task: str
    input_ids: list[int]
    special: list[bool]
    evidence: list[bool]
    position: int
    target_id: int
    foil_id: int
    regions: dict[str, list[bool]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    extra_evidence: dict[str, list[bool]] = field(default_factory=dict)
    retrieval: bool = False

    def __len__(self) -> int:
        return len(self.input_ids)


def model_head(bundle) -> str:
    """``causal`` or ``masked`` (the :func:`~palrp_bench.data.evidence_common.render` head) of the bundle's model
    kind."""
    kind = getattr(bundle.config.kind, "value", bundle.config.kind)
    if kind == "causal":
        return "causal"
    if kind == "masked_lm":
        return "masked"
    raise BadInputError(f"evidence tasks explain causal or masked language models, not model kind {kind!r}",
                        "pick a causal LM or a masked LM (model.kind)")


def max_positions(model) -> int | None:
    """The most tokens the model reads (``n_positions`` / ``max_position_embeddings`` of its config), or None."""
    config = getattr(model, "config", None)
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def word_token(tokenizer, word: str, *, single: bool) -> int | None:
    """The first token of ``" " + word`` (leading pieces that decode to whitespace alone skipped); with ``single``
    the word must be exactly one such token, else None."""
    ids = list(tokenizer(" " + word, add_special_tokens=False)["input_ids"])
    while ids and not tokenizer.decode([ids[0]]).strip():
        ids.pop(0)
    if not ids or (single and len(ids) != 1):
        return None
    return int(ids[0])


def prepare_evidence(samples: Sequence[EvidenceSample], tokenizer, head: str,
                     limit: int | None) -> tuple[list[PreparedEvidence], dict[str, int]]:
    """The kept samples as their head reads them (module docstring) and the drops per reason
    (:data:`ADAPTER_DROPS`). ``limit``: the model's positions (None: no limit)."""
    if not getattr(tokenizer, "is_fast", False):
        raise BadInputError("evidence tasks map character spans to tokens with a fast tokenizer's offsets, but this "
                            f"tokenizer ({type(tokenizer).__name__}) is not a fast one",
                            "point model.tokenizer at a tokenizer with a tokenizer.json")
    mask_token = getattr(tokenizer, "mask_token", None) if head == "masked" else None
    rendered = [render(s, head, mask_token) for s in samples]
    encoded = tokenizer([r.text for r in rendered], return_offsets_mapping=True, add_special_tokens=True)
    kept: list[PreparedEvidence] = []
    dropped: dict[str, int] = {}
    words: dict[str, int | None] = {}
    unknown = getattr(tokenizer, "unk_token_id", None)

    def token_of(word: str) -> int | None:
        if word not in words:
            words[word] = word_token(tokenizer, word, single=head == "masked")
        return words[word]

    for sample, text, ids, offsets in zip(samples, rendered, encoded["input_ids"], encoded["offset_mapping"]):
        reason = None
        special = [int(e) <= int(s) for s, e in offsets]
        evidence = tokens_overlapping(offsets, text.evidence)
        regions = {name: tokens_overlapping(offsets, [span]) for name, span in text.regions.items()
                   if name in ("context", "question", "mask")}
        target, foil = token_of(sample.target), token_of(sample.foil)
        if limit is not None and len(ids) > limit:
            reason = "too_long"
        elif not any(evidence):
            reason = "evidence_not_tokenized"
        elif unknown is not None and unknown in (target, foil):
            reason = "unknown_word"
        elif target is None or foil is None:
            reason = "multi_token_word"
        elif target == foil:
            reason = "same_first_token"
        if reason is None:
            if head == "masked":
                position = regions["mask"].index(True) if any(regions.get("mask", ())) else -1
                if position < 0:
                    raise BadInputError(f"the tokenizer split the mask token {mask_token!r} of sample "
                                        f"{sample.sample_id}", "use the tokenizer of the masked LM")
            else:
                position = len(ids) - 1
            prepared = PreparedEvidence(sample.sample_id, sample.task, list(ids), special, evidence, position,
                                        target, foil, {k: v for k, v in regions.items() if k != "mask"},
                                        dict(sample.meta),
                                        {name: tokens_overlapping(offsets, spans)
                                         for name, spans in text.extra_evidence.items()},
                                        sample.task in RETRIEVAL_TASKS)
            default, _ = evaluation_masks(prepared)["default"]
            if all(e for e, v in zip(evidence, default) if v):
                reason = "evidence_covers_all"
            else:
                kept.append(prepared)
        if reason is not None:
            dropped[reason] = dropped.get(reason, 0) + 1
    return kept, dropped


def evaluation_masks(sample: PreparedEvidence) -> dict[str, tuple[list[bool], list[bool]]]:
    """``mask -> (valid, evidence)`` per token of one prepared sample (module docstring): ``default``,
    ``with_special``, for qa and needle ``with_question``, and each extra evidence mask (the needle's ``key``) over
    the ``default`` tokens. Evidence is restricted to the valid tokens."""
    plain = [not s for s in sample.special]
    if "context" in sample.regions:
        default = [c and p for c, p in zip(sample.regions["context"], plain)]
        masks = {"default": default,
                 "with_special": [d or s for d, s in zip(default, sample.special)],
                 "with_question": plain}
    else:
        masks = {"default": plain, "with_special": [True] * len(plain)}
    out = {name: (valid, [e and v for e, v in zip(sample.evidence, valid)]) for name, valid in masks.items()}
    for name, flags in sample.extra_evidence.items():
        out[name] = (masks["default"], [e and v for e, v in zip(flags, masks["default"])])
    return out


def _described(info: dict, sample: PreparedEvidence) -> dict:
    """``info`` with the sample's descriptors of :data:`~palrp_bench.rundir.SAMPLE_COLUMNS` (the needle's length
    and depth), which become columns of ``results.csv``."""
    return {**info, **{k: sample.meta[k] for k in SAMPLE_COLUMNS if k in sample.meta}}


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype scores of an explanation in ``dtype`` are scored and cached in: that dtype itself, float16 and
    bfloat16 widened (exactly) to float32, which the cache's numpy arrays can hold."""
    return torch.promote_types(dtype, torch.float32)


def _batch(samples: Sequence[PreparedEvidence], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(s) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), length), dtype=torch.long)
    for i, s in enumerate(samples):
        ids[i, :len(s)] = torch.tensor(s.input_ids, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


@register_task("evidence")
class EvidenceAdapter(TaskAdapter):
    """The evidence benchmark (module docstring): causal and masked language models."""

    model_kinds = ("causal", "masked_lm")

    def sample_length(self, sample: PreparedEvidence) -> int:
        return len(sample)

    def load_samples(self, task, bundle) -> EvidencePool:
        pool = load_dataset(task.dataset, path=task.path, limit=task.pool_size, options=task.options,
                            tokenizer=bundle.tokenizer)
        if not isinstance(pool, EvidencePool):
            raise BadInputError(f"dataset {task.dataset!r} holds no evidence records (task {task.name})",
                                "use an evidence dataset: sva, ra, qa, synthetic_sva, synthetic_ra, synthetic_qa, "
                                "needle")
        prepared, dropped = prepare_evidence(pool, bundle.tokenizer, model_head(bundle), max_positions(bundle.model))
        merged = dict(pool.dropped)
        for reason, n in dropped.items():
            merged[reason] = merged.get(reason, 0) + n
        return EvidencePool(prepared, merged, pool.source)  # the prepared samples, with every drop

    @torch.no_grad()
    def correct(self, bundle, samples, ctx) -> list[bool]:
        ids, mask = _batch(samples, pad_id(bundle))
        logits = bundle.model(input_ids=ids.to(bundle.device), attention_mask=mask.to(bundle.device)).logits
        rows = torch.arange(len(samples), device=logits.device)
        at = logits[rows, torch.tensor([s.position for s in samples], device=logits.device)]
        target_ids = torch.tensor([s.target_id for s in samples], device=logits.device)
        target = at[rows, target_ids]
        foil = at[rows, torch.tensor([s.foil_id for s in samples], device=logits.device)]
        top = (at.argmax(-1) == target_ids).cpu()
        return [bool(r) if s.retrieval else bool(t > f)
                for s, r, t, f in zip(samples, top, target.float().cpu(), foil.float().cpu())]

    def _explained(self, bundle, samples, ctx: JobContext, width: int, totals: bool = False):
        """Scores ``[B, width]`` in the explanation's dtype (:func:`score_dtype`; 0 after each sample's tokens),
        per-sample info, arrays to cache and, with ``totals``, the positional share's relevance sums ``[B]`` float64
        (:data:`_TOTALS`; else empty): from the cache when every sample is there, else one ``palrp_bench.explain``
        call."""
        import palrp_bench

        needed = _CACHE_KEYS | (set(_TOTALS.values()) if totals else set())
        cached = [ctx.cache.load(s.sample_id) if ctx.cache is not None else None for s in samples]
        if all(c is not None and needed <= set(c) for c in cached):
            stored = [torch.from_numpy(np.asarray(c["scores"])) for c in cached]
            dtype = torch.float32
            for row in stored:
                dtype = torch.promote_types(dtype, score_dtype(row.dtype))
            scores = torch.zeros((len(samples), width), dtype=dtype)
            infos = []
            for j, c in enumerate(cached):
                scores[j, :len(stored[j])] = stored[j].to(dtype)
                info = {"rules": str(c["rules"]), "aggregation": str(c["aggregation"]),
                        "stabilizers": str(c["stabilizers"]), "logit": float(c["logit"]),
                        "explained": int(c["explained"]), "n_tokens": len(samples[j]),
                        "contrastive": bool(ctx.task.contrastive)}
                if ctx.task.contrastive:
                    info["foil"] = samples[j].foil_id
                infos.append(_described(info, samples[j]))
            sums = {k: torch.tensor([float(c[name]) for c in cached], dtype=torch.float64)
                    for k, name in _TOTALS.items()} if totals else {}
            return scores, infos, [None] * len(samples), sums
        ids, mask = _batch(samples, pad_id(bundle))
        options = {"causal": bool(ctx.task.causal)}
        if model_head(bundle) == "masked":
            options["position"] = torch.tensor([s.position for s in samples])
        foil = torch.tensor([s.foil_id for s in samples]) if ctx.task.contrastive else None
        rel = palrp_bench.explain(bundle.model, ids.to(bundle.device), attention_mask=mask.to(bundle.device),
                                  target=torch.tensor([s.target_id for s in samples]), foil=foil,
                                  **ctx.explain_kwargs(), **options).to("cpu")
        infos, arrays = [], []
        scores = torch.zeros((len(samples), width), dtype=score_dtype(rel.scores.dtype))
        for j, sample in enumerate(samples):
            n = len(sample)
            scores[j, :n] = rel.scores[j, :n].detach().to(scores.dtype)
            info = {"rules": rel.rules, "aggregation": rel.aggregation, "stabilizers": rel.stabilizers,
                    "logit": float(rel.logit[j]), "explained": int(rel.target[j]), "n_tokens": n,
                    "contrastive": bool(ctx.task.contrastive),
                    "forward_passes": int(rel.forward_passes[j])}
            if foil is not None:
                info["foil"] = int(foil[j])
            if "embeddings" in rel.extras:
                info["embeddings"] = str(rel.extras["embeddings"])
            infos.append(_described(info, sample))
            tokens = bundle.tokenizer.convert_ids_to_tokens(sample.input_ids)
            arrays.append({"scores": scores[j, :n].numpy().copy(), "tokens": np.asarray([str(t) for t in tokens]),
                           "evidence": np.asarray(sample.evidence), "special": np.asarray(sample.special),
                           "logit": np.asarray(float(rel.logit[j])), "explained": np.asarray(int(rel.target[j])),
                           "rules": np.asarray(rel.rules), "aggregation": np.asarray(rel.aggregation),
                           "stabilizers": np.asarray(rel.stabilizers), **explorer_arrays(rel.extras, j, n)})
        sums = {}
        if totals:  # signed sums over each sample's tokens (the positional parts: every sink and component)
            lengths = torch.tensor([len(s) for s in samples])
            real = torch.arange(rel.semantic.shape[-1])[None, :] < lengths[:, None]
            semantic = torch.where(real, rel.semantic.detach().double(), 0.0).sum(-1)
            positional = rel.positional.detach().double()
            positional = torch.where(real.reshape(real.shape[0], *([1] * (positional.dim() - 2)), -1), positional,
                                     0.0).reshape(len(samples), -1).sum(-1)
            sums = {"semantic_total": semantic, "positional_total": positional}
            for j, array in enumerate(arrays):
                array.update({_TOTALS[k]: np.asarray(float(v[j])) for k, v in sums.items()})
        return scores, infos, arrays, sums

    def explain(self, bundle, samples, ctx, needs=frozenset()) -> Iterator[EvidenceBatch]:
        """The batch's scores (:meth:`_explained`) and each sample's evaluation masks (:func:`evaluation_masks`)."""
        samples = list(samples)
        width = max(len(s) for s in samples)
        scores, infos, arrays, totals = self._explained(bundle, samples, ctx, width, "totals" in needs)
        finite = [bool(torch.isfinite(scores[j, :len(s)]).all()) and all(bool(torch.isfinite(t[j])) for t in
                                                                          totals.values())
                  for j, s in enumerate(samples)]
        yield EvidenceBatch(bundle, samples, list(range(len(samples))), scores, [info["explained"] for info in infos],
                            infos, arrays, finite, [None] * len(samples),
                            masks=[evaluation_masks(s) for s in samples], totals=totals)

    @classmethod
    def sample_shape(cls, cell, arch) -> SampleShape | None:
        """The dataset's mean tokens, explained (each a feature) and forwarded once in the selection; peak memory
        sized for its longest sample where the spec knows it (the needle's longest length)."""
        real, _, _ = dataset_tokens(cell.task)
        if real is None:
            return None
        return SampleShape(real, real, round(real), real, longest_tokens=float(dataset_longest_tokens(cell.task) or 0))

    def batch_tokens(self, batch) -> list[tuple[float, float]]:
        """The batch's width explained, each prepared sample's tokens forwarded."""
        width = max(len(s) for s in batch)
        return [(float(width), float(len(s))) for s in batch]
