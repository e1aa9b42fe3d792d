"""Loading the model of a cell onto its worker's device (docs/architecture.md "Data flow of one run": "per shard:
load model").

Task adapters receive a :class:`~palrp_bench.evaluation.tasks.base.ModelBundle`: the library model object (None
for the self-test), its tokenizer (text) and the device. Loading itself is :func:`palrp_bench.models.loading.
load_model` (by ``model.loader``); its one-line :class:`~palrp_bench.errors.MissingDataError` pass through, and
any other failure to read a checkpoint is turned into one.
"""
from __future__ import annotations

import logging

from ..errors import MissingDataError, PalrpError
from ..evaluation.tasks.base import ModelBundle
from ..schema import ModelConfig

log = logging.getLogger(__name__)


def load_bundle(cfg: ModelConfig, device: str) -> ModelBundle:
    """Load the model of ``cfg`` onto ``device``."""
    from ..models.loading import load_model, weights_description

    log.info("loading model %s (%s) on %s", cfg.name, weights_description(cfg), device)
    try:
        model, tokenizer = load_model(cfg, device)
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
