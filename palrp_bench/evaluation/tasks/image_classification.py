"""``kind: image_classification``: ImageNet-val pixel perturbation and the positional share (Table 4, Appendix F;
docs/protocol.md section 3), and the embedded synthetic shapes."""
from __future__ import annotations

from . import register_task
from .vision_common import VisionAdapter


@register_task("image_classification")
class ImageClassificationAdapter(VisionAdapter):
    """ImageNet-val perturbation and positional share (Table 4, Appendix F), embedded synthetic shapes."""
