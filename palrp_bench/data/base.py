"""Sample types shared by every dataset module (docs/architecture.md "Layers", data/: every sample has a stable
sample_id)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import BadInputError


@dataclass
class TextSample:
    """One text sample. ``input_ids`` already include BOS; ``label`` is the gold class (IMDB), the answer
    letter index (MCQA) or None (Wikipedia next-token). ``sample_id`` is stable across runs and machines."""

    sample_id: str
    input_ids: list[int]
    label: int | None = None
    meta: dict = field(default_factory=dict)


@dataclass
class ImageSample:
    """One image: ``image`` raw pixels ``[3, H, W]`` in [0, 1] (normalisation is the model's job), ``label``
    the ImageNet class index (or None), ``mask`` the ``[H, W]`` {0,1} foreground mask for segmentation."""

    sample_id: str
    image: torch.Tensor
    label: int | None = None
    mask: torch.Tensor | None = None
    meta: dict = field(default_factory=dict)


def loaded(sample):
    """A sample ready to evaluate: a lazy sample (one with a ``load()`` method, e.g. an image read from disk when
    used) loaded, any other sample as it is."""
    load = getattr(sample, "load", None)
    return load() if callable(load) else sample


def load_positions(source, positions) -> list:
    """The samples at ``positions`` of the sequence ``source``, loaded (:func:`loaded`); a pool that loads many
    samples together (``source.load_many(positions)``: a :class:`~palrp_bench.data.text_common.TextPool` tokenises
    them in one tokenizer call per chunk) does so."""
    many = getattr(source, "load_many", None)
    if callable(many):
        return list(many(list(positions)))
    return [loaded(source[p]) for p in positions]


def needs_loading(source, positions) -> bool:
    """Whether :func:`load_positions` does work for ``source`` (a pool that loads, or lazy samples) rather than
    hand back samples already in memory; judged without loading anything."""
    if callable(getattr(source, "load_many", None)):
        return True
    return bool(len(positions)) and callable(getattr(source[positions[0]], "load", None))


def check_generator_args(n, seed, split: str, splits) -> None:
    """Validate the arguments of a synthetic-data generator (one-line :class:`BadInputError` otherwise)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise BadInputError(f"n must be a non-negative int, got {n!r}", "pass the number of samples, e.g. n=256")
    if split not in splits:
        raise BadInputError(f"unknown synthetic split {split!r}", f"use one of {sorted(splits)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise BadInputError(f"seed must be a non-negative int, got {seed!r}", "pass e.g. seed=0")

