"""``kind: seq2seq_qa``: extractive question answering with an encoder-decoder under the AttnLRP paper's SQuAD v2
protocol (its section 4.1 and appendix B.1; docs/baselines.md "The Flan-T5 SQuAD v2 column"): ``squad_attnlrp``
(Flan-T5-XL) and its embedded stand-in ``synthetic_squad`` (the tiny T5).

Per sample (an :class:`~palrp_bench.data.evidence_common.EvidenceSample` of task ``qa``: ``squad`` or
``synthetic_qa``):

* encoder input: the prompt of B.1, ``"Context: {context}\\nQuestion: {question}\\nAnswer:"``
  (:func:`~palrp_bench.data.evidence_common.render`), tokenised with the model's tokenizer (T5's appends EOS);
  the context tokens and the answer-span tokens are read off the fast tokenizer's offsets
  (:func:`~palrp_bench.data.evidence_common.tokens_overlapping`);
* decoder input: the decoder start token alone; the explained output is the logit of the model's own first answer
  token (B.5: "attributions ... on the first token of the answer"), the arg-max there, which greedy decoding
  generates first (``palrp_bench.explain(..., decoder_input_ids=...)``, target None);
* ``correct``: the greedy answer (up to :data:`ANSWER_MAX_TOKENS` new tokens, stopped at EOS) matches one annotated
  answer under SQuAD's exact match (:func:`palrp_bench.data.squad.squad_exact_match`; the synthetic samples have
  one answer, the word itself; an unanswerable question's answer is the empty string, as in SQuAD v2's official
  evaluation). The paper says only "We calculate attributions for accurately answered questions" (section 4.1);
  exact match is our reading of "accurately".

Metrics (``ctx.metrics``; the procedures of :mod:`palrp_bench.evaluation.procedures` read the batch as a
:class:`~palrp_bench.evaluation.explained.Seq2SeqBatch`):

* ``attnlrp_perturbation``: insertion curves over the context tokens only (B.1: "we only perturb the tokens
  inside the context"), zero baseline on whole encoder token embeddings
  (:func:`palrp_bench.evaluation.procedures.attnlrp_perturbation.seq2seq_token_logit_curves`), rows ``a_morf`` /
  ``a_lerf`` (variant ``insertion``) -> ``delta_a``;
* ``iou``: on correctly answered answerable samples only, the IoU of the attributed context tokens and the
  answer-span tokens (valid = the context tokens), rows ``iou`` with variant ``positive`` (the tokens with positive
  relevance, :func:`palrp_bench.metrics.evidence.positive_iou`) and ``top_answer`` (as many of the highest-scoring
  tokens as the answer has, :func:`~palrp_bench.metrics.evidence.top_answer_iou`): the paper does not say which
  (``metrics.evidence.IOU_NOTE``; :mod:`palrp_bench.evaluation.procedures.iou`);

and every sample gets ``correct`` (0/1). The explanation of a sample does not depend on the batch (each sample is
explained at its real length; padding is never a feature).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ...data.evidence_common import EvidenceSample, render, tokens_overlapping
from ...data.squad import squad_exact_match
from ...errors import BadInputError
from ..explained import SampleShape, Seq2SeqBatch
from . import register_task
from .base import TaskAdapter, dataset_tokens, explorer_arrays, pad_id

__all__ = ["Seq2SeqQAAdapter", "ANSWER_MAX_TOKENS", "encode_qa", "prompt_lengths", "measured_prompts"]

#: most tokens of a generated answer (SQuAD answers are short: the longest of v2.0's validation answers has 29 words)
ANSWER_MAX_TOKENS = 32


def encode_qa(tokenizer, sample: EvidenceSample) -> tuple[list[int], list[bool], list[bool]]:
    """``(input_ids, context, answer)`` of one sample: the encoder ids of its B.1 prompt (special tokens the
    tokenizer adds included) and, per token, whether it overlaps the context / the answer span."""
    if sample.task != "qa":
        raise BadInputError(f"sample {sample.sample_id} is a {sample.task!r} sample, not extractive qa",
                            "use a qa dataset (squad, synthetic_qa) with task kind seq2seq_qa")
    if not getattr(tokenizer, "is_fast", False):
        raise BadInputError("the seq2seq_qa task needs a fast tokenizer (character offsets)",
                            "load the model's tokenizer with use_fast=True")
    rendered = render(sample, "causal")
    encoded = tokenizer(rendered.text, return_offsets_mapping=True)
    offsets = encoded["offset_mapping"]
    return (list(encoded["input_ids"]), tokens_overlapping(offsets, [rendered.regions["context"]]),
            tokens_overlapping(offsets, rendered.evidence))


def prompt_lengths(tokenizer, samples) -> list[tuple[int, int]]:
    """``(encoder tokens, context tokens)`` of each sample's prompt (:func:`encode_qa`): what a plan sizes time and
    memory from."""
    out = []
    for sample in samples:
        ids, context, _ = encode_qa(tokenizer, sample)
        out.append((len(ids), sum(context)))
    return out


def _answerable(sample: EvidenceSample) -> bool:
    return bool(sample.meta.get("answerable", True)) and bool(sample.evidence)


def _answers(sample: EvidenceSample) -> list[str]:
    """The annotated answers; an unanswerable question's is the empty string (SQuAD v2's official evaluation)."""
    if not _answerable(sample):
        return [""]
    return list(sample.meta.get("answers") or [sample.meta.get("answer") or sample.target])


def _start_id(model) -> int:
    start = getattr(model.config, "decoder_start_token_id", None)
    if start is None:
        raise BadInputError(f"{type(model).__name__} has no decoder_start_token_id",
                            "use an encoder-decoder whose config names its decoder start token")
    return int(start)


@register_task("seq2seq_qa")
class Seq2SeqQAAdapter(TaskAdapter):
    """Extractive QA with an encoder-decoder (module docstring)."""

    model_kinds = ("seq2seq",)

    def sample_length(self, sample: EvidenceSample) -> int:
        """The prompt's length in characters (the runner batches similar lengths; tokens follow characters)."""
        return len(sample.context) + len(sample.question)

    def _encoded(self, bundle, samples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded ``(input_ids, attention_mask, context, answer)`` ``[B, T]`` of a batch."""
        rows = [encode_qa(bundle.tokenizer, s) for s in samples]
        width = max(len(ids) for ids, _, _ in rows)
        ids = torch.full((len(rows), width), pad_id(bundle), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        context = torch.zeros((len(rows), width), dtype=torch.bool)
        answer = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, (row, ctx_row, ans_row) in enumerate(rows):
            n = len(row)
            ids[i, :n], mask[i, :n] = torch.tensor(row), 1
            context[i, :n], answer[i, :n] = torch.tensor(ctx_row), torch.tensor(ans_row)
        return ids, mask, context, answer

    @torch.no_grad()
    def _answers_generated(self, bundle, ids, mask) -> list[str]:
        """The greedy answers of a batch (module docstring, ``correct``)."""
        out = bundle.model.generate(input_ids=ids.to(bundle.device), attention_mask=mask.to(bundle.device),
                                    max_new_tokens=ANSWER_MAX_TOKENS, do_sample=False, num_beams=1)
        return [str(t) for t in bundle.tokenizer.batch_decode(out.cpu(), skip_special_tokens=True)]

    def correct(self, bundle, samples, ctx) -> list[bool]:
        ids, mask, _, _ = self._encoded(bundle, samples)
        return [squad_exact_match(a, _answers(s)) for s, a in zip(samples, self._answers_generated(bundle, ids, mask))]

    def explain(self, bundle, samples, ctx, needs=frozenset()) -> Iterator[Seq2SeqBatch]:
        """The batch's encoder inputs, context and answer flags, the explanation of the first answer token and
        whether the greedy answer is correct."""
        import palrp_bench

        ids, mask, context, answer = self._encoded(bundle, samples)
        start = torch.full((len(samples), 1), _start_id(bundle.model), dtype=torch.long)
        rel = palrp_bench.explain(bundle.model, ids.to(bundle.device), attention_mask=mask.to(bundle.device),
                                  decoder_input_ids=start.to(bundle.device), **ctx.explain_kwargs()).to("cpu")
        scores = rel.scores.detach()
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))  # the explanation's precision
        scores = torch.where(mask.bool(), scores, torch.zeros_like(scores))  # padding: exactly 0
        generated = self._answers_generated(bundle, ids, mask)
        correct = [squad_exact_match(a, _answers(s)) for s, a in zip(samples, generated)]
        infos, arrays = [], []
        for j, sample in enumerate(samples):
            n = int(mask[j].sum())
            infos.append({"rules": rel.rules, "aggregation": rel.aggregation,
                          "stabilizers": rel.stabilizers, "logit": float(rel.logit[j]),
                          "explained": int(rel.target[j]), "n_tokens": n, "n_context_tokens": int(context[j].sum()),
                          "answer": generated[j], "forward_passes": int(rel.forward_passes[j])})
            tokens = bundle.tokenizer.convert_ids_to_tokens(ids[j, :n].tolist())
            arrays.append({"scores": scores[j, :n].numpy(), "semantic": rel.semantic[j, :n].float().numpy(),
                           "tokens": np.asarray([str(t) for t in tokens]), "context": context[j, :n].numpy(),
                           "answer_span": answer[j, :n].numpy(), "logit": np.asarray(float(rel.logit[j])),
                           "explained": np.asarray(int(rel.target[j])), "rules": np.asarray(rel.rules),
                           "aggregation": np.asarray(rel.aggregation), **explorer_arrays(rel.extras, j, n)})
        yield Seq2SeqBatch(bundle, list(samples), list(range(len(samples))), scores,
                           [info["explained"] for info in infos], infos, arrays, torch.isfinite(scores).all(-1).tolist(),
                           correct, input_ids=ids, attention_mask=mask, context=context, answer=answer,
                           decoder_input_ids=start, answerable=[_answerable(s) for s in samples])

    @classmethod
    def sample_shape(cls, cell, arch) -> SampleShape | None:
        """The prompt's mean tokens explained and forwarded with one decoder token; the context tokens are the
        features (an explanation walks them, the insertion curves perturb them); the greedy answer (correctness)
        costs about one more forward. Where the task's file and the model's tokenizer are on this machine the
        prompts are measured (:func:`measured_prompts`: the mean for time, the longest for memory), else the
        dataset's token table is used."""
        measured = measured_prompts(cell)
        if measured is not None:
            real, context, longest = measured
        else:
            real, context, _ = dataset_tokens(cell.task)
            if real is None:
                return None
            context, longest = float(context or real), 0.0
        return SampleShape(real, real, round(context), context, forwards=1.0, decoder_tokens=1.0,
                           longest_tokens=longest)


def _prompt_key(cell) -> tuple | None:
    """What :func:`measured_prompts` depends on, or None when the task reads no local file."""
    task = cell.task
    if task.path is None or not Path(str(task.path)).expanduser().exists():
        return None
    options = json.dumps(dict(task.options or {}), sort_keys=True, default=str)
    model = cell.model
    return (task.dataset, str(Path(str(task.path)).expanduser().resolve()), options, task.pool_size,
            str(getattr(model.loader, "value", model.loader)), str(model.source), str(getattr(model, "tokenizer", "")),
            str(getattr(model, "base_model", "")))


#: :func:`measured_prompts` per :func:`_prompt_key` (a plan prices every method of a cell on the same file)
_MEASURED: dict[tuple, tuple[float, float, float] | None] = {}


def _measured(cell) -> tuple[float, float, float] | None:
    from ...data.registry import load_dataset
    from ...errors import PalrpError
    from ...models.loading import local_tokenizer

    tokenizer = local_tokenizer(cell.model)
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        return None
    try:
        pool = load_dataset(cell.task.dataset, path=cell.task.path, limit=cell.task.pool_size,
                            options=dict(cell.task.options or {}), tokenizer=tokenizer)
        lengths = prompt_lengths(tokenizer, pool)
    except (PalrpError, OSError, ValueError):
        return None  # the preflight names what is wrong with the file
    if not lengths:
        return None
    tokens = [t for t, _ in lengths]
    return sum(tokens) / len(tokens), sum(c for _, c in lengths) / len(lengths), float(max(tokens))


def measured_prompts(cell) -> tuple[float, float, float] | None:
    """``(mean encoder tokens, mean context tokens, longest encoder tokens)`` of a cell's samples, tokenised by the
    model's own tokenizer from the task's local file (the pool the run will draw: :func:`prompt_lengths`), or None
    when the file or the tokenizer is not on this machine. Cached per file, options and tokenizer."""
    key = _prompt_key(cell)
    if key is None:
        return None
    if key not in _MEASURED:
        _MEASURED[key] = _measured(cell)
    return _MEASURED[key]
