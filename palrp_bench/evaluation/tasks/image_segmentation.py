"""``kind: image_segmentation``: ImageNet-segmentation (Table 5; docs/protocol.md section 4) and the embedded synthetic
shapes with their object masks."""
from __future__ import annotations

from . import register_task
from .vision_common import VisionAdapter


@register_task("image_segmentation")
class ImageSegmentationAdapter(VisionAdapter):
    """ImageNet-segmentation (Table 5), embedded synthetic shapes with their object masks."""
