"""Evaluation procedures: drive a model through perturbations and hand the outcomes to the metric functions.

* :func:`nlp_perturbation_curves` -- generation / pruning curves of Tables 1-3 (docs/protocol.md section 2);
* :func:`vision_perturbation_curves` -- positive / negative pixel perturbation of Table 4 (section 3);
* :func:`segmentation_protocol` -- streaming maps and masks into the Table 5 metrics (section 4);
* :mod:`.tasks` -- one adapter per task kind, used by the runner.
"""
from .procedures.nlp_perturbation import nlp_perturbation_curves, readout_logits
from .procedures.segmentation import segmentation_protocol, segmentation_protocol_on_samples
from .procedures.vision_perturbation import perturbed_logits, tie_order_device, vision_perturbation_curves

__all__ = ["nlp_perturbation_curves", "readout_logits", "vision_perturbation_curves", "perturbed_logits",
           "tie_order_device",
           "segmentation_protocol", "segmentation_protocol_on_samples"]
