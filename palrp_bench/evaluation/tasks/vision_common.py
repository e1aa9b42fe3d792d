"""What the two vision task kinds share: pixel perturbation + positional share, and segmentation (docs/protocol.md
sections 3, 4). The kinds are :mod:`.image_classification` and :mod:`.image_segmentation`.

Per batch: raw images in [0, 1] are normalised with the model's mean/std and explained for the predicted class
(``palrp_bench.explain``); for the target curves (every sample labelled), a second explanation for the
ground-truth class. Explanations come from the cell's explanation cache when present (a protocol added to a
cell later reuses them).
Then, by the cell's metrics:

* ``vision_perturbation`` (Table 4): rows ``agreement`` (predicted-class map, agreement with the original
  prediction) and ``accuracy`` (ground-truth map, top-1 accuracy), variants ``positive`` / ``negative``, steps
  ``p = 0.1..0.9`` (:func:`palrp_bench.evaluation.vision_perturbation.vision_perturbation_curves`, tie-break
  ``ctx.tie_break`` seeded from ``ctx.seed`` and the sample id), and ``tied_pixel_share`` of each map
  (variants ``predicted`` / ``target``; :func:`palrp_bench.metrics.perturbation.tied_pixel_share`); each sample's
  info records ``tie_device``, the device kind that ordered tied pixels
  (:func:`palrp_bench.evaluation.vision_perturbation.tie_order_device`);
* ``positional_share`` (Appendix F): signed totals ``relevance_semantic`` / ``relevance_positional`` (patches
  only, what the maps use) and ``..._with_cls`` (CLS terms added), from the predicted-class pass;
* ``attnlrp_perturbation`` (the AttnLRP paper's Table 1, appendix B.2): per-sample areas ``a_morf`` / ``a_lerf``
  of the explained logit while pixels are flipped to 0 in the order of the signed map
  (:mod:`palrp_bench.evaluation.attnlrp_perturbation`);
* ``segmentation`` (Table 5): per-image pixel counts of the mean-thresholded predicted-class map against the
  mask (``pix_correct``, ``pix_labeled``, ``inter_bg`` ... ``union_fg``) and its ``ap``
  (:func:`palrp_bench.metrics.segmentation.segmentation_counts`), variant ``mean_threshold``;

* ``map_sensitivity`` (``runner.map_sensitivity=true``): the distance of the predicted-class map to that of the
  model's float64 copy for the same pixels and class (:mod:`palrp_bench.evaluation.map_sensitivity`);

plus ``correct`` (prediction == label). Datasets (``task.dataset``) come from
:func:`palrp_bench.data.registry.load_dataset` (``synthetic_vision``, ``imagenet``, ``imagenet_seg``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ...data.base import ImageSample
from ...data.registry import load_dataset, sample_ids_of
from ...errors import BadInputError
from ...metrics.perturbation import VISION_FRACTIONS, tied_pixel_share
from ...metrics.segmentation import segmentation_counts
from ...rundir import CORRECT_METRIC, MAP_SENSITIVITY_METRIC, NO_VARIANT, SCALAR
from ..attnlrp_perturbation import VISION_PROCESS, area_rows, pixel_logit_curves
from ..map_sensitivity import sensitivity_rows
from .base import JobContext, SampleResult, explorer_arrays, nonfinite_result

__all__ = ["VisionAdapter", "LazyImageSample", "SEGMENTATION_THRESHOLD"]

SEGMENTATION_THRESHOLD = "mean"
#: what a cached explanation must hold to be reused (plus ``scores_target`` for the target-class curves)
_CACHE_KEYS = {"scores", "explained", "logit", "rules", "aggregation", "stabilizers", "semantic_total",
               "positional_total", "semantic_total_incl_prefix", "positional_total_incl_prefix"}
#: the cached names (one per batch), not arrays
_NAME_KEYS = ("rules", "aggregation", "stabilizers")


@dataclass
class LazyImageSample:
    """A sample id plus how to load it: the pool of 5000 ImageNet images is planned, sharded and selected
    without reading a single image; a batch reads only its own images."""

    sample_id: str
    dataset: Sequence[ImageSample]
    index: int

    def load(self) -> ImageSample:
        return self.dataset[self.index]


def _load_image_pool(task) -> list[LazyImageSample]:
    dataset = load_dataset(task.dataset, path=task.path, limit=task.pool_size, options=task.options)
    return [LazyImageSample(sid, dataset, i) for i, sid in enumerate(sample_ids_of(dataset))]


class VisionAdapter:
    model_kinds = ("vit",)

    def load_samples(self, task, bundle) -> list[LazyImageSample]:
        return _load_image_pool(task)

    @torch.no_grad()
    def correct(self, bundle, samples, ctx) -> list[bool]:
        from ..vision_perturbation import resolve_normalization

        samples = [s.load() for s in samples]
        images = torch.stack([torch.as_tensor(s.image, dtype=torch.float32) for s in samples])
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
        from ..vision_perturbation import resolve_normalization

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
            pixels = resolve_normalization(bundle.model)(images).to(bundle.device)
            rel = self._explain(bundle, pixels, ctx)
            ex = rel.extras
            batch = {"scores": rel.scores.float(), "explained": rel.target, "logit": rel.logit.float(),
                     "semantic_total": ex["semantic_total"], "positional_total": ex["positional_total"],
                     "semantic_total_incl_prefix": ex["semantic_total_incl_prefix"],
                     "positional_total_incl_prefix": ex["positional_total_incl_prefix"],
                     "rules": rel.rules, "aggregation": rel.aggregation, "stabilizers": ex["stabilizers"]}
            if with_signed:  # only when a metric needs it: it would double the cached maps otherwise
                batch["scores_signed"] = ex["scores_signed"].float()
            batch["forward_passes"] = ex["forward_passes"]
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
                    pixels = resolve_normalization(bundle.model)(images).to(bundle.device)
                target = self._explain(bundle, pixels, ctx, target=torch.tensor([s.label for s in samples]))
                batch["scores_target"] = target.scores.float()
                arrays = [dict(a if a is not None else c, scores_target=batch["scores_target"][i].numpy())
                          for i, (a, c) in enumerate(zip(arrays, cached))]
        return batch, arrays

    def evaluate(self, bundle, samples, ctx, metrics=()) -> list[SampleResult]:
        from ..vision_perturbation import resolve_normalization, tie_order_device, vision_perturbation_curves
        metrics = set(metrics or ctx.metrics)
        samples = [s.load() for s in samples]
        images = torch.stack([torch.as_tensor(s.image, dtype=torch.float32) for s in samples])
        labels = [s.label for s in samples]
        with_target = "vision_perturbation" in metrics and all(label is not None for label in labels)
        with_signed = "attnlrp_perturbation" in metrics
        ex, arrays = self._explained(bundle, samples, images, ctx, with_target, with_signed)
        checked = [ex["scores"]] + ([ex["scores_target"]] if with_target else [])
        finite = torch.stack([torch.isfinite(t.float()).flatten(1).all(1) for t in checked]).all(0)
        finite &= torch.isfinite(ex["positional_total"].float()) & torch.isfinite(ex["semantic_total"].float())
        infos = [{**{k: ex[k] for k in _NAME_KEYS}, "explained": int(ex["explained"][i]),
                  "logit": float(ex["logit"][i])} for i in range(len(samples))]
        if "forward_passes" in ex:  # the cost of a fresh explanation (not known for cached ones)
            for i, info in enumerate(infos):
                info["forward_passes"] = int(ex["forward_passes"][i])
        ok = [i for i in range(len(samples)) if bool(finite[i])]
        rows: dict[int, list] = {i: [] for i in ok}
        if ok and "vision_perturbation" in metrics:
            ties = dict(protocol=ctx.protocol, tie_break=ctx.tie_break, seed=ctx.seed,
                        sample_ids=[samples[i].sample_id for i in ok], batch_size=ctx.forward_batch_size)
            tie_device = tie_order_device(bundle.model, ctx.protocol, ctx.tie_break)
            for i in ok:
                infos[i]["tie_device"] = tie_device
            maps = {"predicted": ex["scores"][ok]} | ({"target": ex["scores_target"][ok]} if with_target else {})
            for kind, kind_maps in maps.items():
                share = tied_pixel_share(kind_maps)
                for k, i in enumerate(ok):
                    rows[i].append(("tied_pixel_share", kind, SCALAR, float(share[k])))
            for positive, variant in ((True, "positive"), (False, "negative")):
                agree = vision_perturbation_curves(bundle.model, images[ok], maps["predicted"], None, positive, **ties)
                for k, i in enumerate(ok):
                    rows[i] += [("agreement", variant, p, float(v)) for p, v in zip(VISION_FRACTIONS, agree[k])]
                if with_target:
                    acc = vision_perturbation_curves(bundle.model, images[ok], maps["target"],
                                                     torch.tensor([labels[i] for i in ok]), positive, **ties)
                    for k, i in enumerate(ok):
                        rows[i] += [("accuracy", variant, p, float(v)) for p, v in zip(VISION_FRACTIONS, acc[k])]
        if ok and with_signed:
            pixels = resolve_normalization(bundle.model)(images[ok]).to(bundle.device)
            curves = pixel_logit_curves(bundle.model, pixels, ex["scores_signed"][ok].to(bundle.device),
                                        ex["explained"][ok], process=VISION_PROCESS,
                                        max_steps=ctx.task.perturbation_steps, batch_size=ctx.forward_batch_size)
            for k, i in enumerate(ok):
                rows[i] += area_rows(curves[k], VISION_PROCESS)
        if ok and "positional_share" in metrics:
            for i in ok:
                rows[i] += [("relevance_semantic", NO_VARIANT, SCALAR, float(ex["semantic_total"][i])),
                            ("relevance_positional", NO_VARIANT, SCALAR, float(ex["positional_total"][i])),
                            ("relevance_semantic_with_cls", NO_VARIANT, SCALAR,
                             float(ex["semantic_total_incl_prefix"][i])),
                            ("relevance_positional_with_cls", NO_VARIANT, SCALAR,
                             float(ex["positional_total_incl_prefix"][i]))]
        if ok and "segmentation" in metrics:
            if any(samples[i].mask is None for i in ok):
                raise BadInputError(f"task {ctx.task.name!r} has samples without a segmentation mask",
                                    "use a dataset with masks (imagenet_seg, synthetic_vision) for metric=segmentation")
            masks = torch.stack([torch.as_tensor(samples[i].mask) for i in ok])
            counts = segmentation_counts(ex["scores"][ok], masks, SEGMENTATION_THRESHOLD)
            variant = f"{SEGMENTATION_THRESHOLD}_threshold"
            for k, i in enumerate(ok):
                rows[i] += [("pix_correct", variant, SCALAR, float(counts.correct[k])),
                            ("pix_labeled", variant, SCALAR, float(counts.labeled[k])),
                            ("inter_bg", variant, SCALAR, float(counts.intersection[k, 0])),
                            ("union_bg", variant, SCALAR, float(counts.union[k, 0])),
                            ("inter_fg", variant, SCALAR, float(counts.intersection[k, 1])),
                            ("union_fg", variant, SCALAR, float(counts.union[k, 1])),
                            ("ap", variant, SCALAR, float(counts.average_precision[k]))]
        if ok and MAP_SENSITIVITY_METRIC in metrics:  # the predicted-class map from the model's float64 copy
            pixels = resolve_normalization(bundle.model)(images[ok]).to(bundle.device)
            target = ex["explained"][ok].to(bundle.device)
            sensitivity = sensitivity_rows(ex["scores"][ok], lambda model: self._explain(
                bundle, pixels.to(torch.float64), ctx, target=target, model=model).scores, bundle)
            for k, i in enumerate(ok):
                rows[i] += sensitivity[k]
        results = []
        for i, sample in enumerate(samples):
            if i not in rows:
                results.append(nonfinite_result(sample.sample_id, infos[i]))
                continue
            if sample.label is not None:
                rows[i].append((CORRECT_METRIC, NO_VARIANT, SCALAR, float(infos[i]["explained"] == sample.label)))
            results.append(SampleResult(sample.sample_id, rows[i], infos[i], arrays[i]))
        return results
