"""Segmentation metrics of relevance maps: pixel accuracy, mIoU, mAP (docs/protocol.md section 4; Table 5).

Per image (as the official ``evaluate_segmentation.py`` + ``utils/metrices.py``):

1. ``M`` = the map min-max normalised on its own (no ReLU), in the map's dtype (at least float32).
2. Threshold ``t``: ``"mean"`` = mean of ``M`` (the published setting); ``"otsu"`` = Otsu's threshold on a
   256-bin histogram of ``M`` over [0, 1], returned as the centre of the best bin.
   Foreground prediction = ``M > t``; background = ``M <= t``.
3. Counts: correct pixels, labelled pixels (all pixels: the masks carry no ignore label), and per class
   (background 0, foreground 1) the intersection and union of prediction and ground truth.
4. Average precision of the *soft* map, 2-channel form: the scores ``[1 - M, M]`` are flattened together
   (``2 * H * W`` entries) against the one-hot ground truth ``[mask == 0, mask == 1]`` and scored with the
   non-interpolated AP of ``sklearn.metrics.average_precision_score``:
   ``AP = sum_n (R_n - R_{n-1}) P_n`` over the distinct score thresholds in decreasing order (tied scores
   form one threshold). Implemented here in numpy; a test pins it to sklearn.

Dataset (pooled, not averaged per image):

* pixel accuracy = total correct / total labelled;
* IoU_c = total intersection_c / total union_c (0 when a class never occurs in prediction or ground truth),
  mIoU = mean of IoU_background and IoU_foreground;
* mAP = mean over images of the per-image AP.

All three are returned x100. Streaming over batches with :class:`SegmentationAccumulator` gives exactly the
one-shot result (integer counts are summed; the AP list is concatenated).

Degenerate (constant) maps: the official code divides 0 by 0; its NaN then compares false against the
threshold (so the image is predicted all background) and is zeroed in both AP channels (AP = the positive
rate of the 2-channel target, 0.5). Both behaviours are reproduced.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import BadInputError
from .maps import as_map_batch, minmax_per_image
from .registry import MetricSource, MetricSpec, register_metric

__all__ = ["THRESHOLDS", "average_precision", "otsu_threshold", "SegmentationCounts", "segmentation_counts",
           "pixel_accuracy", "mean_iou", "mean_average_precision", "pooled_scores", "segmentation_scores",
           "SegmentationAccumulator"]

#: Supported foreground thresholds (the paper's Table 5 uses "mean").
THRESHOLDS = ("mean", "otsu")


def average_precision(y_true: np.ndarray, scores: np.ndarray) -> float:
    """Non-interpolated average precision (the definition of ``sklearn.metrics.average_precision_score``).

    ``y_true`` {0,1} and ``scores`` are 1-D of equal length. Tied scores are one threshold. With no positive
    entry the result is 0.0 (sklearn warns and returns a non-finite value that the official code zeroes).
    """
    y_true = np.asarray(y_true).reshape(-1).astype(np.float64)
    scores = np.asarray(scores).reshape(-1)
    if y_true.shape != scores.shape:
        raise BadInputError(f"labels ({y_true.size}) and scores ({scores.size}) differ in length",
                            "pass one score per label")
    order = np.argsort(scores)[::-1]  # tie order is irrelevant: ties form one threshold
    s_sorted = scores[order]
    y_sorted = y_true[order]
    # last index of each run of equal scores = one threshold
    last_of_run = np.r_[np.flatnonzero(np.diff(s_sorted)), y_sorted.size - 1]
    true_pos = np.cumsum(y_sorted)[last_of_run]
    total_pos = true_pos[-1] if true_pos.size else 0.0
    if total_pos == 0:
        return 0.0
    predicted_pos = last_of_run + 1.0
    precision = true_pos / predicted_pos
    recall = true_pos / total_pos
    recall_steps = np.diff(np.r_[0.0, recall])
    return float(np.sum(recall_steps * precision))


def otsu_threshold(normalised_map: np.ndarray) -> float:
    """Otsu's threshold of a map normalised to [0, 1] (256 bins over [0, 1]; returns the best bin's centre).

    Between-class variance for a split after bin ``i``: ``w_low(i) * w_high(i+1) * (mu_low(i) -
    mu_high(i+1))^2`` with bin counts as weights and bin centres as values; the first maximiser wins.
    Meant for min-max normalised maps (first and last bin occupied). As in the official code, an empty first
    bin makes the low-class mean 0/0 = NaN there and ``argmax`` then returns bin 0 (threshold 1/512).
    """
    values = np.asarray(normalised_map).reshape(-1)  # keep float32 maps float32, as the official code
    counts, edges = np.histogram(values, bins=256, range=(0.0, 1.0))
    counts = counts.astype(np.float64)
    centres = (edges[:-1] + edges[1:]) / 2.0
    weight_low = np.cumsum(counts)
    weight_high = np.cumsum(counts[::-1])[::-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_low = np.cumsum(counts * centres) / weight_low
        mean_high = (np.cumsum((counts * centres)[::-1]) / weight_high[::-1])[::-1]
    between = weight_low[:-1] * weight_high[1:] * (mean_low[:-1] - mean_high[1:]) ** 2
    return float(centres[int(np.argmax(between))])


@dataclass
class SegmentationCounts:
    """Per-image counts of a batch (docs/protocol.md section 4), the unit that is stored and pooled.

    ``correct``, ``labeled``: int64 ``[B]``; ``intersection``, ``union``: int64 ``[B, 2]`` (background,
    foreground); ``average_precision``: float64 ``[B]`` (fraction, not x100); ``sample_ids``: optional labels.
    """

    correct: np.ndarray
    labeled: np.ndarray
    intersection: np.ndarray
    union: np.ndarray
    average_precision: np.ndarray
    sample_ids: list = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.correct.shape[0])

    @staticmethod
    def concatenate(parts: list["SegmentationCounts"]) -> "SegmentationCounts":
        """Join the counts of several batches (order kept)."""
        if not parts:
            return SegmentationCounts(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2), np.int64),
                                      np.zeros((0, 2), np.int64), np.zeros(0, np.float64), [])
        ids: list = []
        for p in parts:
            ids.extend(p.sample_ids if p.sample_ids else [None] * len(p))
        return SegmentationCounts(np.concatenate([p.correct for p in parts]),
                                  np.concatenate([p.labeled for p in parts]),
                                  np.concatenate([p.intersection for p in parts]),
                                  np.concatenate([p.union for p in parts]),
                                  np.concatenate([p.average_precision for p in parts]),
                                  ids if any(i is not None for i in ids) else [])

    def records(self) -> list[dict]:
        """One dict per image (``sample_id``, ``pix_correct``, ``pix_labeled``, ``inter``, ``union``, ``ap``)."""
        ids = self.sample_ids if self.sample_ids else [None] * len(self)
        return [{"sample_id": ids[i], "pix_correct": int(self.correct[i]), "pix_labeled": int(self.labeled[i]),
                 "inter": [int(v) for v in self.intersection[i]], "union": [int(v) for v in self.union[i]],
                 "ap": float(self.average_precision[i])} for i in range(len(self))]


def _as_mask_batch(masks, shape: torch.Size) -> torch.Tensor:
    if not isinstance(masks, torch.Tensor):
        masks = torch.as_tensor(masks)
    if masks.dim() == 4 and masks.shape[1] == 1:
        masks = masks[:, 0]
    if tuple(masks.shape) != tuple(shape):
        raise BadInputError(f"masks have shape {tuple(masks.shape)} but maps have {tuple(shape)}",
                            "resize the masks (nearest) to the map size, one [H, W] mask per map")
    values = torch.unique(masks)
    if not bool(((values == 0) | (values == 1)).all()):
        raise BadInputError(f"masks contain values {values.tolist()[:6]} outside {{0, 1}}",
                            "pass binary foreground masks (1 = object, 0 = background)")
    return masks.to(torch.bool)


def segmentation_counts(maps, masks, threshold: str = "mean", sample_ids: list | None = None
                        ) -> SegmentationCounts:
    """Per-image counts and AP of ``maps [B, H, W]`` against binary ``masks [B, H, W]`` (module docstring)."""
    if threshold not in THRESHOLDS:
        raise BadInputError(f"unknown segmentation threshold {threshold!r}", f"use one of: {', '.join(THRESHOLDS)}")
    maps = as_map_batch(maps)
    gt = _as_mask_batch(masks, maps.shape).cpu()
    if sample_ids is not None and len(sample_ids) != maps.shape[0]:
        raise BadInputError(f"{len(sample_ids)} sample ids for {maps.shape[0]} maps", "pass one id per map")
    normalised, degenerate = minmax_per_image(maps, relu=False)
    normalised = normalised.detach().cpu()
    batch = maps.shape[0]
    correct = np.zeros(batch, np.int64)
    labeled = np.zeros(batch, np.int64)
    inter = np.zeros((batch, 2), np.int64)
    union = np.zeros((batch, 2), np.int64)
    ap = np.zeros(batch, np.float64)
    for i in range(batch):
        m = normalised[i]
        g = gt[i]
        if bool(degenerate[i]):
            fg = torch.zeros_like(g)
        elif threshold == "mean":
            fg = m > m.mean()
        else:
            fg = m > otsu_threshold(m.numpy())
        correct[i] = int((fg == g).sum())
        labeled[i] = g.numel()
        for c, (pred_c, gt_c) in enumerate(((~fg, ~g), (fg, g))):
            inter[i, c] = int((pred_c & gt_c).sum())
            union[i, c] = int((pred_c | gt_c).sum())
        # 2-channel AP: scores [1 - M, M] against one-hot truth [background, foreground]
        soft = m.numpy().reshape(-1)
        if bool(degenerate[i]):  # official: NaN map, zeroed in both channels
            scores = np.zeros(2 * soft.size, dtype=soft.dtype)
        else:
            scores = np.concatenate([(1 - m).numpy().reshape(-1), soft])
        truth = g.numpy().reshape(-1)
        ap[i] = average_precision(np.concatenate([~truth, truth]), scores)
    return SegmentationCounts(correct, labeled, inter, union, ap, list(sample_ids) if sample_ids else [])


def pixel_accuracy(correct, labeled) -> np.ndarray | float:
    """Dataset pixel accuracy x100 from per-image counts ``[..., n]``: total correct / total labelled (pooled, not
    a mean of per-image accuracies; docs/protocol.md section 4). Vectorised over leading axes."""
    correct = np.asarray(correct, dtype=np.float64)
    labeled = np.asarray(labeled, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100.0 * correct.sum(axis=-1) / labeled.sum(axis=-1)


def mean_iou(intersection, union) -> np.ndarray | float:
    """Dataset mIoU x100 from per-image counts ``[..., n, 2]`` (background, foreground): per class total
    intersection / total union (0 when a class never occurs in prediction or ground truth), then the mean of the
    two classes (docs/protocol.md section 4). Vectorised over leading axes."""
    inter = np.asarray(intersection, dtype=np.float64).sum(axis=-2)
    union = np.asarray(union, dtype=np.float64).sum(axis=-2)
    iou = np.divide(inter, union, out=np.zeros(np.broadcast(inter, union).shape), where=union > 0)
    return 100.0 * iou.mean(axis=-1)


def mean_average_precision(average_precision) -> np.ndarray | float:
    """mAP x100: the mean over images ``[..., n]`` of the per-image average precision (docs/protocol.md section 4)."""
    return 100.0 * np.asarray(average_precision, dtype=np.float64).mean(axis=-1)


def pooled_scores(counts: SegmentationCounts) -> dict:
    """Dataset metrics from per-image counts, x100: ``pixel_accuracy``, ``miou``, ``map`` (:func:`pixel_accuracy`,
    :func:`mean_iou`, :func:`mean_average_precision`), plus ``iou`` (background, foreground) x100 and
    ``n_images``."""
    if len(counts) == 0:
        raise BadInputError("no images were evaluated", "feed at least one (map, mask) pair before result()")
    iou = [mean_iou(counts.intersection[:, [c, c]], counts.union[:, [c, c]]) for c in (0, 1)]
    return {"pixel_accuracy": float(pixel_accuracy(counts.correct, counts.labeled)),
            "miou": float(mean_iou(counts.intersection, counts.union)),
            "map": float(mean_average_precision(counts.average_precision)),
            "iou": [float(v) for v in iou],
            "n_images": len(counts)}


def segmentation_scores(maps, masks, threshold: str = "mean") -> dict:
    """One-shot segmentation metrics of a set of maps (all x100): ``pixel_accuracy``, ``miou``, ``map``."""
    return pooled_scores(segmentation_counts(maps, masks, threshold))


class SegmentationAccumulator:
    """Streams :func:`segmentation_counts` over batches; :meth:`result` equals the one-shot scores.

    ``update(maps, masks)`` per batch, ``merge(other)`` to combine shards, ``result()`` for the dataset
    metrics, ``counts`` for the per-image rows.
    """

    def __init__(self, threshold: str = "mean"):
        if threshold not in THRESHOLDS:
            raise BadInputError(f"unknown segmentation threshold {threshold!r}",
                                f"use one of: {', '.join(THRESHOLDS)}")
        self.threshold = threshold
        self._parts: list[SegmentationCounts] = []

    def update(self, maps, masks, sample_ids: list | None = None) -> SegmentationCounts:
        """Score one batch, keep its counts and return them."""
        part = segmentation_counts(maps, masks, self.threshold, sample_ids)
        self._parts.append(part)
        return part

    def add(self, counts: SegmentationCounts) -> None:
        """Add counts computed elsewhere (e.g. loaded from a result store)."""
        self._parts.append(counts)

    def merge(self, other: "SegmentationAccumulator") -> "SegmentationAccumulator":
        """Absorb another accumulator's counts (shards); thresholds must agree."""
        if other.threshold != self.threshold:
            raise BadInputError(f"cannot merge threshold {other.threshold!r} into {self.threshold!r}",
                                "merge only runs made with the same threshold")
        self._parts.extend(other._parts)
        return self

    @property
    def counts(self) -> SegmentationCounts:
        return SegmentationCounts.concatenate(self._parts)

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts)

    def result(self) -> dict:
        return pooled_scores(self.counts)


_POOLED = "dataset-pooled pixel counts (sum over images, then ratio), x100"
_VARIANTS = tuple(f"{t}_threshold" for t in THRESHOLDS)

register_metric(MetricSpec("pixel_accuracy", True, _POOLED, "segmentation pixel accuracy of the thresholded map",
                           "4", "%", _VARIANTS, (MetricSource(("pix_correct", "pix_labeled")),),
                           lambda c: pixel_accuracy(c[..., 0], c[..., 1])))
register_metric(MetricSpec("miou", True, _POOLED + "; mean over {background, foreground}",
                           "segmentation mean intersection over union", "4", "%", _VARIANTS,
                           (MetricSource(("inter_bg", "inter_fg", "union_bg", "union_fg")),),
                           lambda c: mean_iou(c[..., 0:2], c[..., 2:4])))
register_metric(MetricSpec("map", True, "mean over images of the per-image 2-channel average precision, x100",
                           "segmentation mean average precision of the soft map (computed, not in the paper)", "4",
                           "%", _VARIANTS, (MetricSource(("ap",)),), lambda c: mean_average_precision(c[..., 0])))
