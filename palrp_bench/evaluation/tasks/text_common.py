"""What the two language task kinds share: loading the pool, batching, one explanation per batch (cached) handed to
the procedures as a :class:`~palrp_bench.evaluation.explained.TokenBatch` (the NLP perturbation curves of
docs/protocol.md section 2, the AttnLRP paper's insertion areas: :mod:`palrp_bench.evaluation.procedures`), plus
``correct`` (0/1) when the sample has a gold answer. The kinds are :mod:`.text_classification` and
:mod:`.next_token`.

Per batch: one explanation (``palrp_bench.explain`` with the cell's method, rules, aggregation and protocol;
reused from the cell's explanation cache when present); with metric ``map_sensitivity`` the batch can explain its
samples again with the model's float64 copy (``TokenBatch.explain_again``).

Every sample is explained at its real length (its first ``meta['n_tokens']`` tokens; a batch is right-padded only
to its longest real sample, and the runner batches samples of similar length, :meth:`TextAdapter.sample_length`).
The models are causal, so right padding cannot change the relevance of the tokens before it, and the padded
positions of a sample (IMDB's pads up to 512) get relevance exactly 0 -- what the explanation of the padded
sequence gives them too (its read-out position is the last real token, which no pad can reach). The
perturbation then runs on the sample as the protocol defines it: under ``protocol=official`` the IMDB padding
counts as tokens (classification samples are grouped by their padded length for it), next-token samples are
right-padded per batch and the padding is excluded. Batching never changes a sample's numbers beyond float
rounding; ``tests/evaluation/test_unpadded_explanation.py`` checks the scores and curves against the padded run.

Datasets (``task.dataset``) come from :func:`palrp_bench.data.registry.load_dataset` (``imdb``, ``arc``,
``wikipedia``, ``synthetic_text``; their options are documented there).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from ...data.base import TextSample
from ...data.text_common import real_token_count
from ...stages import stage
from ..explained import SampleShape, TokenBatch
from .base import JobContext, TaskAdapter, dataset_tokens, explorer_arrays, pad_id

__all__ = ["TextAdapter"]

#: what a cached explanation must hold to be reused instead of recomputed
_CACHE_KEYS = {"scores", "logit", "explained", "rules", "aggregation", "stabilizers"}


def _batch(samples: list[TextSample], pad_id: int, *, real_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask)``; real tokens are the first ``meta['n_tokens']``. With
    ``real_only`` every sample is cut to its real tokens first (the explanation input)."""
    rows = [s.input_ids[:real_token_count(s)] if real_only else s.input_ids for s in samples]
    length = max(len(r) for r in rows)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), length), dtype=torch.long)
    for i, (s, row) in enumerate(zip(samples, rows)):
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, :real_token_count(s)] = 1
    return ids, mask


class TextAdapter(TaskAdapter):
    """Shared by both language task kinds; subclasses say how "correct" is read and which perturbation rules
    apply (``perturbation_task`` of :data:`palrp_bench.evaluation.procedures.nlp_perturbation.TASKS`)."""

    perturbation_task = "imdb"

    def sample_length(self, sample: TextSample) -> int:
        """The explained length of a sample (the runner batches similar lengths together)."""
        return real_token_count(sample)

    def _causal(self, ctx: JobContext) -> bool:
        return bool(ctx.task.causal)

    def _explain_options(self, ctx: JobContext) -> dict:
        return {}

    @torch.no_grad()
    def _logits(self, bundle, samples, ctx) -> torch.Tensor:
        from ..procedures.nlp_perturbation import readout_logits

        ids, mask = _batch(samples, pad_id(bundle))
        return readout_logits(bundle.model, ids, mask, task=self.perturbation_task, causal=self._causal(ctx),
                              batch_size=ctx.forward_batch_size, show_progress=False)

    def _perturbation_task_of(self, task) -> str:
        return self.perturbation_task

    def _groups(self, samples: list[TextSample]) -> list[list[int]]:
        """Index groups explained together (all of the batch by default)."""
        return [list(range(len(samples)))]

    def _explain_real(self, model, bundle, batch, ctx, target=None):
        """``palrp_bench.explain`` of ``model`` (the bundle's, or its float64 copy) on the group's real tokens
        (module docstring), on the CPU afterwards."""
        import palrp_bench

        real_ids, real_mask = _batch(batch, pad_id(bundle), real_only=True)
        return palrp_bench.explain(model, real_ids.to(bundle.device), attention_mask=real_mask.to(bundle.device),
                                   target=target, **ctx.explain_kwargs(), **self._explain_options(ctx)).to("cpu")

    def _explained(self, bundle, batch, ids, mask, ctx) -> tuple[torch.Tensor, list[dict], list[dict | None]]:
        """Scores ``[B, T]`` (``T`` = the group's padded width; 0 after each sample's real tokens), info and
        arrays to cache of a group: from the explanation cache when every sample of the group is there (nothing to
        cache then), else from one ``palrp_bench.explain`` call on the real tokens (module docstring)."""
        cached = [ctx.cache.load(s.sample_id) if ctx.cache is not None else None for s in batch]
        if all(c is not None and _CACHE_KEYS <= set(c) for c in cached):
            scores = torch.zeros(ids.shape, dtype=torch.float32)
            for j, c in enumerate(cached):
                scores[j, :len(c["scores"])] = torch.from_numpy(c["scores"])
            infos = [{"rules": str(c["rules"]), "aggregation": str(c["aggregation"]),
                      "stabilizers": str(c["stabilizers"]), "logit": float(c["logit"]),
                      "explained": int(c["explained"]), "n_tokens": int(mask[j].sum())} for j, c in enumerate(cached)]
            return scores, infos, [None] * len(batch)
        rel = self._explain_real(bundle.model, bundle, batch, ctx)
        scores = torch.zeros(ids.shape, dtype=torch.float32)
        infos, arrays = [], []
        for j, sample in enumerate(batch):
            n_real = real_token_count(sample)
            scores[j, :n_real] = rel.scores[j, :n_real].detach().float()
            infos.append({"rules": rel.rules, "aggregation": rel.aggregation,
                          "stabilizers": rel.stabilizers, "logit": float(rel.logit[j]),
                          "explained": int(rel.target[j]), "n_tokens": n_real,
                          "forward_passes": int(rel.forward_passes[j])})
            tokens = (bundle.tokenizer.convert_ids_to_tokens(sample.input_ids[:n_real])
                      if bundle.tokenizer is not None else [str(t) for t in sample.input_ids[:n_real]])
            arrays.append({"scores": scores[j, :len(sample.input_ids)].numpy(),
                           "semantic": rel.semantic[j, :n_real].float().numpy(),
                           "positional": rel.positional[j, ..., :n_real].float().numpy(),
                           "tokens": np.asarray([str(t) for t in tokens]),
                           "logit": np.asarray(float(rel.logit[j])), "explained": np.asarray(int(rel.target[j])),
                           "rules": np.asarray(rel.rules), "aggregation": np.asarray(rel.aggregation),
                           "stabilizers": np.asarray(rel.stabilizers),
                           **explorer_arrays(rel.extras, j, n_real, sample.label)})
        return scores, infos, arrays

    def explain(self, bundle, samples, ctx, needs=frozenset()) -> Iterator[TokenBatch]:
        """One :class:`~palrp_bench.evaluation.explained.TokenBatch` per group (:meth:`_groups`): the samples as the
        protocol perturbs them (right-padded), their scores and the perturbation rules of the kind."""
        for group in self._groups(samples):
            batch = [samples[i] for i in group]
            with stage("data_wait"):
                ids, mask = _batch(batch, pad_id(bundle))
            scores, infos, arrays = self._explained(bundle, batch, ids, mask, ctx)
            explained = [info["explained"] for info in infos]
            classifier = self.perturbation_task == "imdb"
            yield TokenBatch(bundle, batch, group, scores, explained, infos, arrays,
                             torch.isfinite(scores).all(-1).tolist(), self._correct_flags(bundle, batch, explained),
                             input_ids=ids, attention_mask=mask,
                             perturbation_task=self._perturbation_task_of(ctx.task),
                             labels=[s.label for s in batch] if classifier else None, causal=self._causal(ctx),
                             explain_again=self._again(bundle, batch, explained, ids.shape[1], ctx))

    def _again(self, bundle, batch, explained, width, ctx):
        """``TokenBatch.explain_again``: the real tokens of the samples at ``positions`` explained by ``model`` for
        the same outputs, as ``[len(positions), width]`` scores with 0 after each sample's real tokens."""
        def again(model, positions: list[int]) -> torch.Tensor:
            kept = [batch[j] for j in positions]
            target = torch.tensor([explained[j] for j in positions], device=bundle.device)
            rel = self._explain_real(model, bundle, kept, ctx, target=target)
            out = torch.zeros((len(kept), width), dtype=rel.scores.dtype)
            for k, sample in enumerate(kept):
                n_real = real_token_count(sample)
                out[k, :n_real] = rel.scores[k, :n_real].detach()
            return out
        return again

    padded = False  # whether the protocol pads the explained input (classification: to the dataset's length)

    @classmethod
    def sample_shape(cls, cell, arch) -> SampleShape | None:
        """The mean real tokens of the task's dataset, explained at its padded length where the kind pads (each a
        feature of the explanation), forwarded and perturbed at the real length."""
        real, _, padded = dataset_tokens(cell.task)
        if real is None:
            return None
        explained = float((padded if cls.padded else None) or real)
        return SampleShape(explained, real, round(explained), real)

    def batch_tokens(self, batch) -> list[tuple[float, float]]:
        """The batch's padded width explained, each sample's real tokens forwarded."""
        width = max(len(s.input_ids) for s in batch)
        return [(float(width), float(real_token_count(s))) for s in batch]
