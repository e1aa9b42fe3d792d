"""Task adapters of the language tasks: IMDB-style classification and next-token prediction (PROTOCOL.md sec. 2).

Per batch: one explanation (``palrp_bench.explain`` with the cell's method, rules, aggregation and protocol;
reused from the cell's explanation cache when present), then the generation / pruning perturbation curves
(:func:`palrp_bench.evaluation.nlp_perturbation.nlp_perturbation_curves`) of every sample, stored as rows
``ac`` / ``mse`` x ``generation`` / ``pruning`` x the 11 fractions, plus ``correct`` (0/1) when the sample has a
gold answer.

Batching never changes a sample's numbers beyond float rounding: classification samples are grouped by length
(under ``protocol=official`` the IMDB padding counts as tokens, so a sample must keep its own length), next-token
samples are right-padded per batch (padding is excluded from both explanation and perturbation).

Datasets (``task.dataset``): ``imdb`` (options: ``source``, ``max_length``), ``arc``, ``wikipedia``
(``max_length``), ``synthetic_text`` (``kind`` = cls | mcqa, ``n``, ``seed``, ``split``, ``pad_to``).
"""
from __future__ import annotations

from itertools import groupby

import numpy as np
import torch

from ..data.base import TextSample
from ..errors import BadInputError
from .schema import TaskKind
from .tasks import CORRECT_METRIC, NO_VARIANT, SCALAR, JobContext, SampleResult, nonfinite_result, register_adapter

#: fractions of the NLP curves (PROTOCOL.md section 2), as stored in the ``step`` column
NLP_STEPS = tuple(round(0.1 * k, 10) for k in range(11))
#: what a cached explanation must hold to be reused instead of recomputed
_CACHE_KEYS = {"scores", "logit", "explained", "rules", "aggregation"}


def _load_text_pool(task, tokenizer) -> list[TextSample]:
    options = dict(task.options)
    if task.dataset == "imdb":
        from ..data.imdb import load_imdb

        return load_imdb(source=options.get("source", "kaggle_csv"), path=task.path, split=options.get("split", "test"),
                         limit=task.pool_size, tokenizer=tokenizer, max_length=int(options.get("max_length", 512)))
    if task.dataset == "arc":
        from ..data.arc import load_arc_easy

        return load_arc_easy(tokenizer, path=task.path, limit=task.pool_size)
    if task.dataset == "wikipedia":
        from ..data.wikipedia import load_wikipedia

        return load_wikipedia(tokenizer, path=task.path, limit=task.pool_size,
                              max_length=int(options.get("max_length", 512)))
    if task.dataset == "synthetic_text":
        from ..data import synthetic_text

        kind = options.get("kind", "cls")
        n, seed, split = int(options.get("n", 64)), int(options.get("seed", 0)), options.get("split", "test")
        if kind == "cls":
            return synthetic_text.make_synthetic_classification(n, seed, split, pad_to=options.get("pad_to"))
        if kind == "mcqa":
            return synthetic_text.make_synthetic_mcqa(n, seed, split)
        raise BadInputError(f"unknown synthetic text kind {kind!r}", "set task.options.kind to cls or mcqa")
    raise BadInputError(f"unknown text dataset {task.dataset!r}", "use imdb, arc, wikipedia or synthetic_text")


def _batch(samples: list[TextSample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask)``; real tokens are the first ``meta['n_tokens']``."""
    length = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), length), dtype=torch.long)
    for i, s in enumerate(samples):
        n_real = int(s.meta.get("n_tokens", len(s.input_ids)))
        ids[i, :len(s.input_ids)] = torch.tensor(s.input_ids, dtype=torch.long)
        mask[i, :n_real] = 1
    return ids, mask


def _pad_id(bundle) -> int:
    tok = bundle.tokenizer
    for attr in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, attr, None) if tok is not None else None
        if value is not None:
            return int(value)
    value = getattr(bundle.model.config, "pad_token_id", None)
    return int(value) if value is not None else 0


class _TextAdapter:
    """Shared by both language task kinds; subclasses say how "correct" is read and what the protocol is."""

    perturbation_task = "imdb"

    def load_samples(self, task, bundle) -> list[TextSample]:
        return _load_text_pool(task, bundle.tokenizer)

    def _causal(self, ctx: JobContext) -> bool:
        return not ctx.cell.task.official_noncausal

    def _explain_options(self, ctx: JobContext) -> dict:
        return {}

    @torch.no_grad()
    def _logits(self, bundle, samples, ctx) -> torch.Tensor:
        from ..evaluation.nlp_perturbation import readout_logits

        ids, mask = _batch(samples, _pad_id(bundle))
        return readout_logits(bundle.model, ids, mask, task=self.perturbation_task, causal=self._causal(ctx),
                              batch_size=ctx.forward_batch_size, show_progress=False)

    def _perturbation_task_of(self, task) -> str:
        return self.perturbation_task

    def _groups(self, samples: list[TextSample]) -> list[list[int]]:
        """Index groups explained together (all of the batch by default)."""
        return [list(range(len(samples)))]

    def _explained(self, bundle, batch, ids, mask, ctx) -> tuple[torch.Tensor, list[dict], list[dict | None]]:
        """Scores ``[B, T]``, info and arrays to cache of a group: from the explanation cache when every sample
        of the group is there (nothing to cache then), else from one ``palrp_bench.explain`` call."""
        import palrp_bench

        cell = ctx.cell
        cached = [ctx.cache.load(s.sample_id) if ctx.cache is not None else None for s in batch]
        if all(c is not None and _CACHE_KEYS <= set(c) for c in cached):
            scores = torch.zeros(ids.shape, dtype=torch.float32)
            for j, c in enumerate(cached):
                scores[j, :len(c["scores"])] = torch.from_numpy(c["scores"])
            infos = [{"rules": str(c["rules"]), "aggregation": str(c["aggregation"]), "logit": float(c["logit"]),
                      "explained": int(c["explained"]), "n_tokens": int(mask[j].sum())} for j, c in enumerate(cached)]
            return scores, infos, [None] * len(batch)
        rel = palrp_bench.explain(bundle.model, ids.to(bundle.device), attention_mask=mask.to(bundle.device),
                                  method=cell.method, aggregation=cell.aggregation, rules=cell.rules,
                                  protocol=cell.protocol, **self._explain_options(ctx)).to("cpu")
        scores = rel.scores.detach().float()
        infos, arrays = [], []
        for j, sample in enumerate(batch):
            n_real = int(mask[j].sum())
            infos.append({"rules": rel.rules, "aggregation": rel.aggregation, "logit": float(rel.logit[j]),
                          "explained": int(rel.target[j]), "n_tokens": n_real})
            tokens = (bundle.tokenizer.convert_ids_to_tokens(sample.input_ids[:n_real])
                      if bundle.tokenizer is not None else [str(t) for t in sample.input_ids[:n_real]])
            arrays.append({"scores": scores[j, :len(sample.input_ids)].numpy(),
                           "semantic": rel.semantic[j, :n_real].float().numpy(),
                           "positional": rel.positional[j, ..., :n_real].float().numpy(),
                           "tokens": np.asarray([str(t) for t in tokens]),
                           "logit": np.asarray(float(rel.logit[j])), "explained": np.asarray(int(rel.target[j])),
                           "rules": np.asarray(rel.rules), "aggregation": np.asarray(rel.aggregation)})
        return scores, infos, arrays

    def evaluate(self, bundle, samples, ctx, protocols=("nlp_perturbation",)) -> list[SampleResult]:
        from ..evaluation.nlp_perturbation import nlp_perturbation_curves

        cell = ctx.cell
        results: dict[int, SampleResult] = {}
        for group in self._groups(samples):
            batch = [samples[i] for i in group]
            ids, mask = _batch(batch, _pad_id(bundle))
            scores, infos, arrays = self._explained(bundle, batch, ids, mask, ctx)
            finite = torch.isfinite(scores).all(-1)
            for j, i in enumerate(group):
                if not bool(finite[j]):
                    results[i] = nonfinite_result(samples[i].sample_id, infos[j])
            ok = [j for j in range(len(batch)) if bool(finite[j])]
            if not ok:
                continue
            curves = None
            if "nlp_perturbation" in protocols:
                kwargs = dict(task=self._perturbation_task_of(cell.task), attention_mask=mask[ok],
                              protocol=cell.protocol, tokenizer=bundle.tokenizer, batch_size=ctx.forward_batch_size,
                              show_progress=False)
                if self.perturbation_task == "imdb":
                    kwargs["labels"] = [batch[j].label for j in ok]
                else:
                    kwargs["causal"] = self._causal(ctx)
                curves = nlp_perturbation_curves(bundle.model, ids[ok], scores[ok], **kwargs)
            correct = self._correct_flags(bundle, [batch[j] for j in ok], [infos[j]["explained"] for j in ok])
            for k, j in enumerate(ok):
                rows = []
                if curves is not None:
                    for variant in ("generation", "pruning"):
                        for metric in ("ac", "mse"):
                            rows += [(metric, variant, step, float(v))
                                     for step, v in zip(NLP_STEPS, curves[variant][metric][k])]
                if correct[k] is not None:
                    rows.append((CORRECT_METRIC, NO_VARIANT, SCALAR, float(correct[k])))
                results[group[j]] = SampleResult(batch[j].sample_id, rows, infos[j], arrays[j])
        return [results[i] for i in range(len(samples))]


@register_adapter(TaskKind.text_classification)
class TextClassificationAdapter(_TextAdapter):
    """IMDB (Tables 1, 2) and the embedded synthetic sentiment task: tracked class = gold label."""

    perturbation_task = "imdb"

    def _groups(self, samples):
        order = sorted(range(len(samples)), key=lambda i: (len(samples[i].input_ids), i))
        return [list(g) for _, g in groupby(order, key=lambda i: len(samples[i].input_ids))]

    def correct(self, bundle, samples, ctx) -> list[bool]:
        flags = [False] * len(samples)
        for group in self._groups(samples):
            logits = self._logits(bundle, [samples[i] for i in group], ctx)
            for k, i in enumerate(group):
                flags[i] = int(logits[k].argmax()) == samples[i].label
        return flags

    def _correct_flags(self, bundle, samples, explained) -> list[bool | None]:
        # the explained index of a classifier is its predicted class (target=None)
        return [None if s.label is None else bool(e == s.label) for s, e in zip(samples, explained)]


@register_adapter(TaskKind.next_token)
class NextTokenAdapter(_TextAdapter):
    """ARC-Easy MCQA and Wikipedia (Table 3) and the embedded synthetic MCQA: tracked token = the prediction.

    ``correct`` reads the arg-max token the official way (its last character is the answer letter); samples
    without ``meta['answer_letter']`` (Wikipedia) have no ``correct`` row."""

    perturbation_task = "mcqa"

    def _perturbation_task_of(self, task) -> str:
        return "wikipedia" if task.dataset == "wikipedia" else "mcqa"

    def _explain_options(self, ctx):
        return {"causal": self._causal(ctx)}

    def _letters(self, bundle, token_ids) -> list[str | None]:
        from ..data.arc import predicted_letter

        return [predicted_letter(bundle.tokenizer, int(t)) for t in token_ids]

    def correct(self, bundle, samples, ctx) -> list[bool]:
        logits = self._logits(bundle, samples, ctx)
        letters = self._letters(bundle, logits.argmax(-1))
        return [s.meta.get("answer_letter") is not None and letter == s.meta["answer_letter"]
                for s, letter in zip(samples, letters)]

    def _correct_flags(self, bundle, samples, explained) -> list[bool | None]:
        letters = self._letters(bundle, explained)
        return [None if s.meta.get("answer_letter") is None else bool(letter == s.meta["answer_letter"])
                for s, letter in zip(samples, letters)]
