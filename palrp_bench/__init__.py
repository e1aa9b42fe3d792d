"""palrp-bench: faithfulness benchmarks for attribution methods on Transformers (PA-LRP, AttnLRP).

Public API::

    from palrp_bench import explain
    rel = explain(model, input_ids, attention_mask=None, method="pa_lrp", target=None, aggregation="official")
"""
from __future__ import annotations

from .methods.explain import explain

__version__ = "0.1.0"

__all__ = ["explain", "__version__"]
