"""palrp-bench: faithfulness benchmarks for attribution methods on Transformers (PA-LRP, AttnLRP).

Public API::

    from palrp_bench import explain
    rel = explain(model, input_ids, attention_mask=None, method="pa_lrp", target=None, aggregation="official")

``explain`` is :func:`palrp_bench.api.explain`, imported on first access so that the command line starts without
paying for torch/transformers before it needs them (PEP 562).
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["explain", "__version__"]


def __getattr__(name):
    if name == "explain":
        from .api import explain
        return explain
    raise AttributeError(f"module 'palrp_bench' has no attribute {name!r}")
