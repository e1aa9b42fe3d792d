"""Pure metric functions on curves and maps (DESIGN.md "metrics/"); no models in here.

* :mod:`.auc`          -- AUC conventions (grids, scales) shared by every curve metric.
* :mod:`.nlp`          -- AUAC, AU-MSE (PROTOCOL.md section 2).
* :mod:`.perturbation` -- vision pixel order (documented tie-break), removal masks, x100 AUC (section 3).
* :mod:`.segmentation` -- pixel accuracy, mIoU, mAP with dataset pooling and a streaming accumulator (section 4).
* :mod:`.share`        -- Appendix F positional share of the total relevance.
* :mod:`.registry`     -- every metric's direction (higher_is_better), convention and description.
* :mod:`.maps`         -- per-image min-max normalisation shared by the vision metrics.
"""
from .nlp import au_mse, auac
from .perturbation import perturbation_auc, perturbation_masks, pixel_order
from .registry import HIGHER_IS_BETTER, METRICS, get_metric, higher_is_better
from .segmentation import SegmentationAccumulator, segmentation_scores
from .share import positional_share

__all__ = ["auac", "au_mse", "perturbation_auc", "pixel_order", "perturbation_masks", "segmentation_scores",
           "SegmentationAccumulator", "positional_share", "HIGHER_IS_BETTER", "METRICS", "get_metric",
           "higher_is_better"]
