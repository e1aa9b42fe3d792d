"""Task adapters of the vision tasks: pixel perturbation + positional share, and segmentation (PROTOCOL.md 3, 4).

Per batch: raw images in [0, 1] are normalised with the model's mean/std and explained for the predicted class
(``palrp_bench.explain``); when every sample has a label, a second explanation for the ground-truth class.
Then, by the cell's metrics:

* ``vision_perturbation`` (Table 4): rows ``agreement`` (predicted-class map, agreement with the original
  prediction) and ``accuracy`` (ground-truth map, top-1 accuracy), variants ``positive`` / ``negative``, steps
  ``p = 0.1..0.9`` (:func:`palrp_bench.evaluation.vision_perturbation.vision_perturbation_curves`);
* ``positional_share`` (Appendix F): signed totals ``relevance_semantic`` / ``relevance_positional`` (patches
  only, what the maps use) and ``..._with_cls`` (CLS terms added), from the predicted-class pass;
* ``segmentation`` (Table 5): per-image pixel counts of the mean-thresholded predicted-class map against the
  mask (``pix_correct``, ``pix_labeled``, ``inter_bg`` ... ``union_fg``) and its ``ap``
  (:func:`palrp_bench.metrics.segmentation.segmentation_counts`), variant ``mean_threshold``;

plus ``correct`` (prediction == label). Datasets (``task.dataset``): ``synthetic_vision`` (options ``n``,
``seed``, ``split``), ``imagenet``, ``imagenet_seg``.
"""
from __future__ import annotations

import torch

from ..data.base import ImageSample
from ..errors import BadInputError
from .schema import TaskKind
from .tasks import CORRECT_METRIC, NO_VARIANT, SCALAR, JobContext, SampleResult, nonfinite_result, register_adapter

SEGMENTATION_THRESHOLD = "mean"


def _load_image_pool(task) -> list[ImageSample]:
    options = dict(task.options)
    if task.dataset == "synthetic_vision":
        from ..data.synthetic_vision import make_synthetic_vision

        return make_synthetic_vision(int(options.get("n", 64)), int(options.get("seed", 0)),
                                     options.get("split", "test"))
    if task.dataset == "imagenet":
        from ..data.imagenet import load_imagenet

        return load_imagenet(task.path, **options)
    if task.dataset == "imagenet_seg":
        from ..data.imagenet_seg import load_imagenet_seg

        return load_imagenet_seg(task.path, **options)
    raise BadInputError(f"unknown image dataset {task.dataset!r}", "use synthetic_vision, imagenet or imagenet_seg")


def _image(sample: ImageSample) -> torch.Tensor:
    image = sample.image() if callable(sample.image) else sample.image
    return torch.as_tensor(image, dtype=torch.float32)


class _VisionAdapter:
    def load_samples(self, task, bundle) -> list[ImageSample]:
        return _load_image_pool(task)

    @torch.no_grad()
    def correct(self, bundle, samples, ctx) -> list[bool]:
        from ..evaluation.vision_perturbation import resolve_normalization

        images = torch.stack([_image(s) for s in samples])
        norm = resolve_normalization(bundle.model)
        logits = bundle.model(norm(images).to(bundle.device))
        return [s.label is not None and int(p) == s.label for s, p in zip(samples, logits.argmax(-1).cpu())]

    def _explain(self, bundle, pixels, ctx: JobContext, target=None):
        import palrp_bench

        cell = ctx.cell
        return palrp_bench.explain(bundle.model, pixels, method=cell.method, target=target,
                                   aggregation=cell.aggregation, rules=cell.rules, protocol=cell.protocol).to("cpu")

    def evaluate(self, bundle, samples, ctx) -> list[SampleResult]:
        from ..evaluation.vision_perturbation import resolve_normalization, vision_perturbation_curves
        from ..metrics.perturbation import VISION_FRACTIONS

        metrics = set(ctx.cell.metrics)
        images = torch.stack([_image(s) for s in samples])
        pixels = resolve_normalization(bundle.model)(images).to(bundle.device)
        rel = self._explain(bundle, pixels, ctx)
        labels = [s.label for s in samples]
        with_labels = all(label is not None for label in labels)
        rel_target = None
        if "vision_perturbation" in metrics and with_labels:
            rel_target = self._explain(bundle, pixels, ctx, target=torch.tensor(labels))
        finite = (torch.isfinite(rel.scores.float()).flatten(1).all(1)
                  & torch.isfinite(rel.positional.float()).flatten(1).all(1))
        if rel_target is not None:
            finite &= torch.isfinite(rel_target.scores.float()).flatten(1).all(1)
        infos = [{"rules": rel.rules, "aggregation": rel.aggregation, "explained": int(rel.target[i]),
                  "logit": float(rel.logit[i])} for i in range(len(samples))]
        ok = [i for i in range(len(samples)) if bool(finite[i])]
        rows: dict[int, list] = {i: [] for i in ok}
        if ok and "vision_perturbation" in metrics:
            for positive, variant in ((True, "positive"), (False, "negative")):
                agree = vision_perturbation_curves(bundle.model, images[ok], rel.scores[ok], None, positive,
                                                   batch_size=ctx.forward_batch_size)
                for k, i in enumerate(ok):
                    rows[i] += [("agreement", variant, p, float(v)) for p, v in zip(VISION_FRACTIONS, agree[k])]
                if rel_target is not None:
                    acc = vision_perturbation_curves(bundle.model, images[ok], rel_target.scores[ok],
                                                     torch.tensor([labels[i] for i in ok]), positive,
                                                     batch_size=ctx.forward_batch_size)
                    for k, i in enumerate(ok):
                        rows[i] += [("accuracy", variant, p, float(v)) for p, v in zip(VISION_FRACTIONS, acc[k])]
        if ok and "positional_share" in metrics:
            ex = rel.extras
            for i in ok:
                rows[i] += [("relevance_semantic", NO_VARIANT, SCALAR, float(ex["semantic_total"][i])),
                            ("relevance_positional", NO_VARIANT, SCALAR, float(ex["positional_total"][i])),
                            ("relevance_semantic_with_cls", NO_VARIANT, SCALAR,
                             float(ex["semantic_total_incl_prefix"][i])),
                            ("relevance_positional_with_cls", NO_VARIANT, SCALAR,
                             float(ex["positional_total_incl_prefix"][i]))]
        if ok and "segmentation" in metrics:
            from ..metrics.segmentation import segmentation_counts

            if any(samples[i].mask is None for i in ok):
                raise BadInputError(f"task {ctx.cell.task.name!r} has samples without a segmentation mask",
                                    "use a dataset with masks (imagenet_seg, synthetic_vision) for metric=segmentation")
            masks = torch.stack([torch.as_tensor(samples[i].mask) for i in ok])
            counts = segmentation_counts(rel.scores[ok], masks, SEGMENTATION_THRESHOLD)
            variant = f"{SEGMENTATION_THRESHOLD}_threshold"
            for k, i in enumerate(ok):
                rows[i] += [("pix_correct", variant, SCALAR, float(counts.correct[k])),
                            ("pix_labeled", variant, SCALAR, float(counts.labeled[k])),
                            ("inter_bg", variant, SCALAR, float(counts.intersection[k, 0])),
                            ("union_bg", variant, SCALAR, float(counts.union[k, 0])),
                            ("inter_fg", variant, SCALAR, float(counts.intersection[k, 1])),
                            ("union_fg", variant, SCALAR, float(counts.union[k, 1])),
                            ("ap", variant, SCALAR, float(counts.average_precision[k]))]
        results = []
        for i, sample in enumerate(samples):
            if i not in rows:
                results.append(nonfinite_result(sample.sample_id, infos[i]))
                continue
            if sample.label is not None:
                rows[i].append((CORRECT_METRIC, NO_VARIANT, SCALAR, float(int(rel.target[i]) == sample.label)))
            explanation = None
            if ctx.cache is not None:
                explanation = {"scores": rel.scores[i].float().numpy(),
                               "semantic": rel.semantic[i].float().numpy(),
                               "positional": rel.positional[i].float().numpy(),
                               "image": (images[i].clamp(0, 1) * 255).round().to(torch.uint8).numpy()}
            results.append(SampleResult(sample.sample_id, rows[i], infos[i], explanation))
        return results


@register_adapter(TaskKind.image_classification)
class ImageClassificationAdapter(_VisionAdapter):
    """ImageNet-val perturbation and positional share (Table 4, Appendix F), embedded synthetic shapes."""


@register_adapter(TaskKind.image_segmentation)
class ImageSegmentationAdapter(_VisionAdapter):
    """ImageNet-segmentation (Table 5), embedded synthetic shapes with their object masks."""

