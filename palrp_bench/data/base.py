"""Sample types shared by every dataset module (DESIGN.md "data/": every sample has a stable sample_id)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


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
