"""What the two vision task kinds share: lazy image pools, one explanation per batch (two where the labelled class's
maps are needed), cached (docs/protocol.md sections 3, 4). The kinds are :mod:`.image_classification` and
:mod:`.image_segmentation`.

Per batch: raw images in [0, 1] are normalised with the model's mean/std and explained for the predicted class
(``palrp_bench.explain``); for the target curves (every sample labelled), a second explanation for the
ground-truth class. Explanations come from the cell's explanation cache when present (a protocol added to a
cell later reuses them).
The batch goes to the cell's procedures as a :class:`~palrp_bench.evaluation.explained.PixelBatch`
(:mod:`palrp_bench.evaluation.procedures`: ``vision_perturbation``, ``positional_share``, ``attnlrp_perturbation``,
``segmentation``, ``map_sensitivity``: ``PixelBatch.explain_again`` explains the images once more with another
model), plus ``correct`` (prediction == label). Datasets (``task.dataset``) come from
:func:`palrp_bench.data.registry.load_dataset`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from ...data.base import ImageSample, loaded
from ...data.registry import dataset_spec, load_dataset, sample_ids_of
from ...stages import stage
from ..explained import PixelBatch, SampleShape
from .base import JobContext, TaskAdapter, explorer_arrays

__all__ = ["VisionAdapter", "LazyImageSample", "stack_images"]

#: what a cached explanation must hold to be reused (plus ``scores_target`` for the target-class curves)
_CACHE_KEYS = {"scores", "explained", "logit", "rules", "aggregation", "stabilizers", "semantic_total",
               "positional_total", "semantic_total_incl_prefix", "positional_total_incl_prefix"}
#: the cached names (one per batch), not arrays
_NAME_KEYS = ("rules", "aggregation", "stabilizers")
#: the totals of the positional share (Appendix F) per sample
_TOTALS = ("semantic_total", "positional_total", "semantic_total_incl_prefix", "positional_total_incl_prefix")


@dataclass
class LazyImageSample:
    """A sample id plus how to load it: the pool of 5000 ImageNet images is planned, sharded and selected
    without reading a single image; a batch reads only its own images."""

    sample_id: str
    dataset: Sequence[ImageSample]
    index: int

    def load(self) -> ImageSample:
        return self.dataset[self.index]


def stack_images(samples, pin: bool = False) -> torch.Tensor:
    """The samples' images as one float32 ``[B, 3, H, W]`` tensor; in page-locked memory with ``pin`` (a GPU then
    copies it without a staging copy, ``non_blocking``)."""
    images = [torch.as_tensor(s.image, dtype=torch.float32) for s in samples]
    out = torch.empty((len(images), *images[0].shape), dtype=torch.float32, pin_memory=pin)
    return torch.stack(images, out=out)


def _load_image_pool(task) -> list[LazyImageSample]:
    dataset = load_dataset(task.dataset, path=task.path, limit=task.pool_size, options=task.options)
    return [LazyImageSample(sid, dataset, i) for i, sid in enumerate(sample_ids_of(dataset))]


class VisionAdapter(TaskAdapter):
    model_kinds = ("vit",)

    def load_samples(self, task, bundle) -> list[LazyImageSample]:
        return _load_image_pool(task)

    @torch.no_grad()
    def correct(self, bundle, samples, ctx) -> list[bool]:
        from ..procedures.vision_perturbation import resolve_normalization

        samples = [loaded(s) for s in samples]
        images = stack_images(samples)
        norm = resolve_normalization(bundle.model)
        logits = bundle.model(norm(images).to(bundle.device))
        return [s.label is not None and int(p) == s.label for s, p in zip(samples, logits.argmax(-1).cpu())]

    def _explain(self, bundle, pixels, ctx: JobContext, target=None, model=None):
        """``palrp_bench.explain`` of ``model`` (default: the bundle's) on ``pixels``, on the CPU afterwards."""
        import palrp_bench

        return palrp_bench.explain(bundle.model if model is None else model, pixels, target=target,
                                   **ctx.explain_kwargs()).to("cpu")

    def _explained(self, bundle, samples, images, ctx, with_target: bool,
                   with_signed: bool = False) -> tuple[dict, list[dict | None]]:
        """Per-batch tensors (``scores``, ``scores_target`` when ``with_target``, ``scores_signed`` when
        ``with_signed``, ``explained``, ``logit``, the four Appendix F totals) and the arrays to (re)cache. Each of
        the two explanations (predicted class, target class) is taken from the explanation cache when every sample
        of the batch has it, else computed with ``palrp_bench.explain``; nothing is re-cached when nothing was
        computed."""
        from ..procedures.vision_perturbation import resolve_normalization

        cached = [ctx.cache.load(s.sample_id) if ctx.cache is not None else None for s in samples]
        have = lambda keys: all(c is not None and keys <= set(c) for c in cached)  # noqa: E731
        pixels = None
        arrays: list[dict | None]
        needed = _CACHE_KEYS | ({"scores_signed"} if with_signed else set())
        if have(needed):
            batch = {k: torch.stack([torch.as_tensor(c[k]) for c in cached])
                     for k in needed - set(_NAME_KEYS)}
            batch.update({k: str(cached[0][k]) for k in _NAME_KEYS})
            arrays = [None] * len(samples)
        else:
            pixels = resolve_normalization(bundle.model)(images.to(bundle.device, non_blocking=True))
            rel = self._explain(bundle, pixels, ctx)
            ex = rel.extras
            batch = {"scores": rel.scores.float(), "explained": rel.target, "logit": rel.logit.float(),
                     "semantic_total": ex["semantic_total"], "positional_total": ex["positional_total"],
                     "semantic_total_incl_prefix": ex["semantic_total_incl_prefix"],
                     "positional_total_incl_prefix": ex["positional_total_incl_prefix"],
                     "rules": rel.rules, "aggregation": rel.aggregation, "stabilizers": rel.stabilizers}
            if with_signed:  # only when a metric needs it: it would double the cached maps otherwise
                batch["scores_signed"] = ex["scores_signed"].float()
            batch["forward_passes"] = rel.forward_passes
            arrays = []
            for i in range(len(samples)):
                item = {k: np.asarray(v[i].numpy() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
                item.update(semantic=rel.semantic[i].float().numpy(), positional=rel.positional[i].float().numpy(),
                            image=(images[i].clamp(0, 1) * 255).round().to(torch.uint8).numpy(),
                            **explorer_arrays(ex, i, label=samples[i].label))
                if samples[i].mask is not None:  # the segmentation gallery outlines it
                    item["mask"] = np.asarray(samples[i].mask, dtype=np.uint8)
                arrays.append(item)
        if with_target:
            if have({"scores_target"}):
                batch["scores_target"] = torch.stack([torch.as_tensor(c["scores_target"]) for c in cached])
            else:
                if pixels is None:
                    pixels = resolve_normalization(bundle.model)(images.to(bundle.device, non_blocking=True))
                target = self._explain(bundle, pixels, ctx, target=torch.tensor([s.label for s in samples]))
                batch["scores_target"] = target.scores.float()
                arrays = [dict(a if a is not None else c, scores_target=batch["scores_target"][i].numpy())
                          for i, (a, c) in enumerate(zip(arrays, cached))]
        return batch, arrays

    def explain(self, bundle, samples, ctx, needs=frozenset()) -> Iterator[PixelBatch]:
        """The batch's images and their explanations (:meth:`_explained`): the labelled class's maps where
        ``needs`` asks for ``scores_target`` and every sample is labelled, the signed map where it asks for
        ``scores_signed``. ``samples`` are loaded ones or :class:`LazyImageSample` (loaded here)."""
        with stage("data_wait"):
            samples = [loaded(s) for s in samples]
            images = stack_images(samples, pin=str(bundle.device).startswith("cuda"))
        labels = [s.label for s in samples]
        with_target = "scores_target" in needs and all(label is not None for label in labels)
        ex, arrays = self._explained(bundle, samples, images, ctx, with_target, "scores_signed" in needs)
        checked = [ex["scores"]] + ([ex["scores_target"]] if with_target else [])
        finite = torch.stack([torch.isfinite(t.float()).flatten(1).all(1) for t in checked]).all(0)
        finite &= torch.isfinite(ex["positional_total"].float()) & torch.isfinite(ex["semantic_total"].float())
        explained = [int(e) for e in ex["explained"]]
        infos = [{**{k: ex[k] for k in _NAME_KEYS}, "explained": explained[i], "logit": float(ex["logit"][i])}
                 for i in range(len(samples))]
        if "forward_passes" in ex:  # the cost of a fresh explanation (not known for cached ones)
            for i, info in enumerate(infos):
                info["forward_passes"] = int(ex["forward_passes"][i])
        yield PixelBatch(bundle, samples, list(range(len(samples))), ex["scores"], explained, infos, arrays,
                         finite.tolist(), [None if s.label is None else explained[i] == s.label
                                           for i, s in enumerate(samples)],
                         images=images, labels=labels, masks=[s.mask for s in samples],
                         scores_target=ex.get("scores_target"), scores_signed=ex.get("scores_signed"),
                         totals={k: ex[k] for k in _TOTALS}, explain_again=self._again(bundle, images, ex, ctx))

    def _again(self, bundle, images, ex, ctx):
        """``PixelBatch.explain_again``: the images at ``positions`` explained by ``model`` for the same classes,
        in the model's dtype."""
        from ..procedures.vision_perturbation import resolve_normalization

        def again(model, positions: list[int]) -> torch.Tensor:
            dtype = next(model.parameters()).dtype
            pixels = resolve_normalization(bundle.model)(images[positions]).to(bundle.device, dtype)
            target = ex["explained"][positions].to(bundle.device)
            return self._explain(bundle, pixels, ctx, target=target, model=model).scores
        return again

    @classmethod
    def sample_shape(cls, cell, arch) -> SampleShape:
        """The ViT's fixed tokens (patches and class token) explained and forwarded; an explanation walks the
        patches, a pixel perturbation the image's pixels."""
        tokens = float(arch.tokens or 0)
        size = dataset_spec(cell.task.dataset).resolve_options(cell.task.options).get("image_size")
        pixels = int(size) ** 2 if size else (arch.pixels or 224 * 224)
        return SampleShape(tokens, tokens, round(tokens) - 1 if tokens else 0, float(pixels))
