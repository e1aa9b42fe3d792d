"""Registry of LRP model twins (timm-style: registered by decorator, looked up by the model object).

A *twin* is our LRP-aware forward of one architecture family. It reuses the loaded library modules for the
linear projections (so bitsandbytes 4-bit layers work unchanged) and re-implements only the wiring (attention,
positional encoding, norms, activations, residuals) with the rules of :mod:`palrp_bench.lrp.rules`.

Each twin class extends :class:`Twin`, the interface :func:`palrp_bench.explain` and the attributors drive:
``family()``, ``supports(model)``, ``__init__(model)`` (wraps it, never modifies it), ``modality`` / ``positional`` /
``default_composite`` / ``starting_relevance``, ``prepare``, ``run`` (a forward record with ``.logits`` and
``.sinks``), ``summarize``; its optional members (official stabilisers, encoder-decoder, classifier head, soft-capping,
feature sites) have their defaults there.

Every module of this package is imported when the registry is first used, so a new family (one module with its
spec or twin class) needs no edit anywhere else. Modules must stay cheap to import (library imports inside
functions).
"""
from __future__ import annotations

from typing import Any, ClassVar, Protocol

from ..discovery import import_package_modules
from ..errors import UnsupportedModelError

__all__ = ["Twin", "TWINS", "register_twin", "discover", "twin_class_for", "twin_for", "positional_kind_of"]


class Twin(Protocol):
    """The interface of an LRP model twin (module docstring). Twin classes extend it, so the optional members below
    exist on every twin with their defaults (a decoder-only or vision twin keeps them; T5 sets the encoder-decoder
    ones)."""

    modality: ClassVar[str]
    starting_relevance: ClassVar[str]
    default_composite: ClassVar[str]
    positional: ClassVar[Any]
    model: Any
    #: the official code's epsilon-rule stabilisers of this family (None: it places none)
    official_stabilizers: ClassVar[Any] = None
    #: the official code ran this family, so ``protocol=official`` defaults to :attr:`official_stabilizers`
    official_code_ran: bool = False
    #: an encoder-decoder: scores over the encoder tokens, the explained logit the decoder's (:meth:`split`)
    encoder_decoder: ClassVar[bool] = False
    #: the model has a classification head (sign correction under ``protocol=corrected``)
    is_classifier: bool = False
    #: ``c`` of the final logit soft-capping (None: none)
    final_softcap: float | None = None
    #: the attention sites whose queries and keys (:attr:`feature_attention_sites`) or keys alone
    #: (:attr:`feature_key_sites`) are the feature tokens (None: every site; T5: the encoder's, and cross-attention)
    feature_attention_sites: ClassVar[tuple[str, ...] | None] = None
    feature_key_sites: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def family(cls) -> str: ...

    @classmethod
    def supports(cls, model) -> bool: ...

    @classmethod
    def positional_kind_for(cls, model_type: str) -> str | None:
        """The positional kind's name for a Hugging Face ``config.model_type`` this twin covers (text twins), else
        None."""
        return None

    def prepare(self, inputs, attention_mask): ...

    def run(self, inputs, composite, *, positional_sinks: bool, **options): ...

    def summarize(self, inputs, attribution) -> dict: ...

    def split(self, explanation):
        """An encoder-decoder's explanation split into its encoder and decoder parts; others as they are."""
        return explanation


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


def twin_for(model) -> Twin:
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
    return next((kind for kind in (cls.positional_kind_for(model_type) for cls in TWINS) if kind is not None), None)
