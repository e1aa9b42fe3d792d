"""Loading the model of a cell onto its worker's device (DESIGN.md data flow: "per shard: load model").

A :class:`ModelBundle` is what task adapters receive: the library model object (or None for the self-test),
its tokenizer (text) and the device. Loading is delegated to the architecture modules
(:func:`palrp_bench.models.llama.load_llama`, the DeiT loader, the embedded tiny models of
:mod:`palrp_bench.data`); their one-line :class:`~palrp_bench.errors.MissingDataError` pass through, and any
other failure to read a checkpoint is turned into one.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..errors import MissingDataError, PalrpError
from .schema import Family, ModelConfig

log = logging.getLogger(__name__)


@dataclass
class ModelBundle:
    config: ModelConfig
    model: Any
    tokenizer: Any
    device: str
    extras: dict = field(default_factory=dict)


def _load_llama(cfg: ModelConfig, device: str):
    from ..models.llama import load_llama

    quant = None if cfg.quantization.value == "none" else cfg.quantization.value
    device_map = None
    if quant is not None:
        device_map = {"": device if device != "cpu" else "cpu"}
    model = load_llama(cfg.source, kind=cfg.kind.value, dtype=cfg.dtype.value, quantization=quant,
                       device_map=device_map)
    if quant is None:
        model = model.to(device)
    tokenizer = _load_tokenizer(cfg.tokenizer or cfg.source)
    return model, tokenizer


def _load_tokenizer(name_or_path: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as err:
        raise MissingDataError(f"cannot load tokenizer {name_or_path!r}: {str(err).splitlines()[0]}",
                               "check model.tokenizer / model.source, log in with `hf auth login` for gated "
                               "LLaMA repos, or pre-download it and pass the local folder") from None


def _load_deit(cfg: ModelConfig, device: str):
    from ..models.deit import load_deit

    return load_deit(cfg.source, checkpoint=cfg.checkpoint).to(device).eval(), None


def _load_tiny_text(cfg: ModelConfig, device: str):
    from ..data import synthetic_text

    model = synthetic_text.load_tiny_text_model(cfg.source)
    return model.to(device).eval(), synthetic_text.load_tiny_tokenizer()


def _load_tiny_vit(cfg: ModelConfig, device: str):
    from ..data import synthetic_vision

    return synthetic_vision.load_tiny_vit().to(device).eval(), None


_LOADERS = {
    Family.llama: _load_llama,
    Family.deit: _load_deit,
    Family.tiny_text: _load_tiny_text,
    Family.tiny_vit: _load_tiny_vit,
}


def load_bundle(cfg: ModelConfig, device: str) -> ModelBundle:
    """Load the model of ``cfg`` onto ``device``."""
    if cfg.family == Family.selftest:
        return ModelBundle(cfg, None, None, device)
    log.info("loading model %s (%s) on %s", cfg.name, cfg.source, device)
    try:
        model, tokenizer = _LOADERS[cfg.family](cfg, device)
    except PalrpError:
        raise
    except (OSError, RuntimeError, ValueError, KeyError) as err:
        raise MissingDataError(f"cannot read the checkpoint of model {cfg.name} ({cfg.source}): "
                               f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
                               "check model.source points at a complete, readable checkpoint") from None
    return ModelBundle(cfg, model, tokenizer, device)


class BundleCache:
    """Keeps the most recently loaded model of a worker (jobs are grouped by model, so each loads once)."""

    def __init__(self):
        self._key = None
        self._bundle: ModelBundle | None = None

    def get(self, cfg: ModelConfig, device: str) -> ModelBundle:
        key = (repr(cfg), device)
        if key != self._key:
            self._bundle = None  # free the previous model first
            self._bundle = load_bundle(cfg, device)
            self._key = key
        return self._bundle
