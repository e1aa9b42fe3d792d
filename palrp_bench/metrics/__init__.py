"""Pure metric functions on curves and maps (docs/architecture.md "Layers", metrics/); no models in here.

* :mod:`.auc`          -- AUC conventions (grids, scales) shared by every curve metric.
* :mod:`.nlp`          -- AUAC, AU-MSE (docs/protocol.md section 2).
* :mod:`.perturbation` -- vision pixel order (documented tie-break), removal masks, x100 AUC (section 3).
* :mod:`.segmentation` -- pixel accuracy, mIoU, mAP with dataset pooling and a streaming accumulator (section 4).
* :mod:`.share`        -- Appendix F positional share of the total relevance.
* :mod:`.evidence`     -- PG, MRR, RMA, PTA of token scores against annotated evidence, with both tie rules
  (docs/evaluation.md "Evidence metrics").
* :mod:`.registry`     -- every table metric's direction, convention, inputs and function (registered by the
  module that defines the function).
* :mod:`.table`        -- per-sample rows -> ``metrics.csv`` (the one path to table numbers).
* :mod:`.published`    -- the papers' numbers (package data ``palrp_bench/paper/*.csv``) attached to ``metrics.csv``
  rows (``paper_table``, ``published``, ``difference``).
* :mod:`.metrics_json` -- ``metrics.csv`` and ``metrics.json`` written (the same rows plus the run's summary,
  lm-evaluation-harness style), by the merge and by the report's refresh.
* :mod:`.maps`         -- per-image min-max normalisation shared by the vision metrics.
"""
from .nlp import au_mse, auac
from .perturbation import perturbation_auc, perturbation_masks, pixel_order
from .registry import METRICS, get_metric, higher_is_better, metric_specs
from .segmentation import SegmentationAccumulator, segmentation_scores
from .share import positional_share

__all__ = ["auac", "au_mse", "perturbation_auc", "pixel_order", "perturbation_masks", "segmentation_scores",
           "SegmentationAccumulator", "positional_share", "METRICS", "get_metric", "higher_is_better", "metric_specs"]
