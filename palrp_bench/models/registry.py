"""Registry of LRP model twins (timm-style: registered by decorator, looked up by the model object).

A *twin* is our LRP-aware forward of one architecture family. It reuses the loaded library modules for the
linear projections (so bitsandbytes 4-bit layers work unchanged) and re-implements only the wiring (attention,
positional encoding, norms, activations, residuals) with the rules of :mod:`palrp_bench.lrp.rules`.

Each twin class provides::

    @classmethod
    def supports(cls, model) -> bool             # is this library model object one of ours?
    def __init__(self, model)                    # wraps it (never modifies it)
    default_composite(protocol) -> str            # e.g. "attnlrp" (LLaMA), "official_vit" (DeiT, official)
    explain(inputs, *, method, composite, target, aggregation, attention_mask=None, **options) -> Explanation
"""
from __future__ import annotations

from ..errors import UnsupportedModelError

TWINS: list[type] = []


def register_twin(cls: type) -> type:
    """Class decorator: make a twin discoverable by :func:`twin_for`."""
    TWINS.append(cls)
    return cls


def twin_for(model):
    """Return the twin wrapping ``model``, or raise a one-line :class:`UnsupportedModelError`."""
    _import_builtin_twins()
    for cls in TWINS:
        if cls.supports(model):
            return cls(model)
    supported = ", ".join(getattr(c, "family", c.__name__) for c in TWINS)
    raise UnsupportedModelError(f"no LRP twin for model class {type(model).__name__}",
                                f"supported families: {supported}")


def _import_builtin_twins() -> None:
    # Imported lazily so that importing palrp_bench stays light.
    from . import llama  # noqa: F401
    try:
        from . import deit  # noqa: F401
    except ImportError:  # pragma: no cover - deit.py needs timm, a core dependency
        pass
