"""Segmentation protocol driver (docs/protocol.md section 4; paper Table 5): feeds maps and masks to the metrics.

Thin on purpose: the explaining (map for the predicted class, ``Resize((224, 224))`` images, nearest-resized
masks) happens in the methods / data layers; this module only streams batches into a
:class:`~palrp_bench.metrics.segmentation.SegmentationAccumulator`, with a progress bar, and returns it
(``.result()`` for the dataset numbers, ``.counts.records()`` for per-image rows).
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch

from ...data.base import ImageSample
from ...errors import BadInputError
from ...metrics.segmentation import SegmentationAccumulator, segmentation_counts
from ...rundir import SCALAR
from ..explained import PixelBatch
from . import register_procedure

__all__ = ["segmentation_protocol", "segmentation_protocol_on_samples", "SEGMENTATION_THRESHOLD"]


def segmentation_protocol(batches: Iterable[tuple], *, threshold: str = "mean",
                          accumulator: SegmentationAccumulator | None = None, total: int | None = None,
                          progress: bool = True) -> SegmentationAccumulator:
    """Feed ``(maps, masks)`` or ``(maps, masks, sample_ids)`` batches into an accumulator and return it.

    ``maps`` ``[B, H, W]`` relevance of the predicted class (normalised inside), ``masks`` ``[B, H, W]``
    binary. ``accumulator``: continue an existing one (e.g. a resumed shard); its threshold wins.
    ``total``: number of batches, for the progress bar only.
    """
    acc = accumulator if accumulator is not None else SegmentationAccumulator(threshold)
    if accumulator is not None and accumulator.threshold != threshold:
        raise BadInputError(f"accumulator uses threshold {accumulator.threshold!r}, asked for {threshold!r}",
                            "pass the same threshold or a fresh accumulator")
    iterator = batches
    if progress:
        from tqdm.auto import tqdm
        iterator = tqdm(batches, total=total, desc=f"segmentation ({threshold})", unit="batch")
    for batch in iterator:
        if len(batch) not in (2, 3):
            raise BadInputError(f"a segmentation batch has {len(batch)} parts",
                                "yield (maps, masks) or (maps, masks, sample_ids)")
        acc.update(*batch)
    return acc


def segmentation_protocol_on_samples(samples: Iterable[ImageSample], explain_maps: Callable[[torch.Tensor],
                                     torch.Tensor], *, batch_size: int = 1, threshold: str = "mean",
                                     accumulator: SegmentationAccumulator | None = None,
                                     progress: bool = True) -> SegmentationAccumulator:
    """Batch :class:`~palrp_bench.data.base.ImageSample` s (image + mask), explain each batch with
    ``explain_maps(images [B, 3, H, W] raw in [0, 1]) -> maps [B, H, W]`` and score the maps.

    Sample ids travel to the per-image counts. Every sample must carry a ``mask``.
    """
    if batch_size < 1:
        raise BadInputError(f"batch_size={batch_size}", "pass a positive batch size")

    def batches():
        buffer: list[ImageSample] = []
        for sample in samples:
            if sample.mask is None:
                raise BadInputError(f"sample {sample.sample_id!r} has no segmentation mask",
                                    "use the ImageNet-segmentation dataset (gtsegs_ijcv.mat) for this protocol")
            buffer.append(sample)
            if len(buffer) == batch_size:
                yield _explain(buffer)
                buffer = []
        if buffer:
            yield _explain(buffer)

    def _explain(buffer: Sequence[ImageSample]) -> tuple:
        images = torch.stack([s.image for s in buffer])
        masks = torch.stack([torch.as_tensor(s.mask) for s in buffer])
        maps = explain_maps(images)
        return maps.detach(), masks, [s.sample_id for s in buffer]

    return segmentation_protocol(batches(), threshold=threshold, accumulator=accumulator, progress=progress)


# ------------------------------------------------------------------------------------- the procedure of a cell
#: how the predicted-class map is thresholded into a foreground (docs/protocol.md section 4)
SEGMENTATION_THRESHOLD = "mean"


@register_procedure("segmentation", applies_to=("image_segmentation",),
                    description="foreground = map > mean(map); pooled pixel accuracy and mIoU (x100), mean AP")
def run_segmentation(batch: PixelBatch, ctx) -> None:
    """Per-image pixel counts of the mean-thresholded predicted-class map against the mask (``pix_correct``,
    ``pix_labeled``, ``inter_bg`` ... ``union_fg``) and its ``ap``
    (:func:`palrp_bench.metrics.segmentation.segmentation_counts`), variant ``mean_threshold``."""
    ok = batch.ok
    if any(batch.masks[i] is None for i in ok):
        raise BadInputError(f"task {ctx.task.name!r} has samples without a segmentation mask",
                            "use a dataset with masks (imagenet_seg, synthetic_vision) for metric=segmentation")
    masks = torch.stack([torch.as_tensor(batch.masks[i]) for i in ok])
    counts = segmentation_counts(batch.scores[ok], masks, SEGMENTATION_THRESHOLD)
    variant = f"{SEGMENTATION_THRESHOLD}_threshold"
    for k, i in enumerate(ok):
        batch.rows[i] += [("pix_correct", variant, SCALAR, float(counts.correct[k])),
                          ("pix_labeled", variant, SCALAR, float(counts.labeled[k])),
                          ("inter_bg", variant, SCALAR, float(counts.intersection[k, 0])),
                          ("union_bg", variant, SCALAR, float(counts.union[k, 0])),
                          ("inter_fg", variant, SCALAR, float(counts.intersection[k, 1])),
                          ("union_fg", variant, SCALAR, float(counts.union[k, 1])),
                          ("ap", variant, SCALAR, float(counts.average_precision[k]))]
