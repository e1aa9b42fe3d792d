"""Registry of LRP model twins (timm-style: registered by decorator, looked up by the model object).

A *twin* is our LRP-aware forward of one architecture family. It reuses the loaded library modules for the
linear projections (so bitsandbytes 4-bit layers work unchanged) and re-implements only the wiring (attention,
positional encoding, norms, activations, residuals) with the rules of :mod:`palrp_bench.lrp.rules`.

Each twin class provides (the explanation protocol :func:`palrp_bench.explain` drives)::

    family() -> str                                   # what it covers (for error messages)
    supports(model) -> bool                           # is this library model object one of ours?
    __init__(model)                                   # wraps it (never modifies it)
    modality: "tokens" | "pixels"; starting_relevance: "logit" | "unit"; default_composite: str
    positional: a kind of palrp_bench.lrp.positional
    positional_kind_for(model_type) -> str | None     # optional (text twins): the kind's name for a Hugging Face
                                                      # config.model_type it covers, else None
    prepare(inputs, attention_mask) -> inputs record  # validated, on the model's device
    run(inputs, composite, *, positional_sinks, **options) -> forward record with .logits and .sinks
    summarize(inputs, attribution) -> dict            # semantic / positional parts
    official_stabilizers: Stabilizers | None          # optional: the official code's eps per place
                                                      # (palrp_bench.lrp.stabilizers); when set, run() takes
                                                      # stabilizers=...; absent / None: no official counterpart
    official_code_ran: bool                           # optional: the official code ran this family, so
                                                      # protocol=official defaults to official_stabilizers
                                                      # (absent: False)

Every module of this package is imported when the registry is first used, so a new family (one module with its
spec or twin class) needs no edit anywhere else. Modules must stay cheap to import (library imports inside
functions).
"""
from __future__ import annotations

from ..discovery import import_package_modules
from ..errors import UnsupportedModelError

TWINS: list[type] = []


def register_twin(cls: type) -> type:
    """Class decorator: make a twin discoverable by :func:`twin_for`."""
    TWINS.append(cls)
    return cls


def discover() -> None:
    """Import every module of ``palrp_bench.models`` once (their decorators register twins and specs)."""
    import_package_modules(__package__)


def twin_class_for(model) -> type | None:
    """The twin class that covers ``model`` (also a model built on the meta device, without weights), or None."""
    discover()
    return next((cls for cls in TWINS if cls.supports(model)), None)


def twin_for(model):
    """Return the twin wrapping ``model``, or raise a one-line :class:`UnsupportedModelError`."""
    cls = twin_class_for(model)
    if cls is not None:
        return cls(model)
    supported = "; ".join(cls.family() for cls in TWINS)
    raise UnsupportedModelError(f"no LRP twin for model class {type(model).__name__}",
                                f"supported families: {supported}")


def positional_kind_of(model_type: str) -> str | None:
    """The positional kind (a name of :mod:`palrp_bench.lrp.positional`) of the text twin covering Hugging Face
    ``config.model_type`` ``model_type``, or None when no text twin does (read before a model loads:
    :func:`palrp_bench.models.loading.positional_kind_of_config`)."""
    discover()
    for cls in TWINS:
        kind_for = getattr(cls, "positional_kind_for", None)
        kind = kind_for(model_type) if kind_for is not None else None
        if kind is not None:
            return kind
    return None
