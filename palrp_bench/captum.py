"""palrp-bench's methods as Captum attribution objects (docs/captum.md): PA-LRP and the rest callable where Captum's
are, so Captum's visualisation (``captum.attr.visualization``), its metrics (``captum.metrics.infidelity``,
``sensitivity_max``) and inseq's custom-attribution path (:mod:`palrp_bench.inseq`) take them::

    from palrp_bench.captum import PALRP
    attributions = PALRP(model).attribute(input_ids, target=label, additional_forward_args=(attention_mask,))

Each class is a :class:`captum.attr.Attribution` whose ``forward_func`` is the model and whose ``attribute`` runs
:func:`palrp_bench.explain` once. What it returns, shaped as Captum's attributions are (the shape of the input):

* token ids ``[B, T]`` -> ``[B, T]`` float, the method's per-token scores (``Explanation.scores``), as Captum's
  methods that take token ids return them (``FeatureAblation``, ``Occlusion``, ``LLMAttribution``). There is no
  per-embedding-dimension attribution like ``LayerIntegratedGradients`` returns: the positional part of PA-LRP sits
  on the RoPE sinks of every layer, not on a dimension of the input embedding, so only the per-token score holds
  all of it; Captum's ``visualize_text`` and inseq take per-token scores anyway (inseq sums a hidden dimension).
* pixel values ``[B, C, H, W]`` -> ``[B, C, H, W]``: the method's pixel map divided equally among the ``C``
  channels, so the channel sum (what ``visualize_image_attr`` shows and what ``infidelity`` multiplies with a
  perturbation that is equal over channels) is exactly the map ``explain`` returns.

``target`` is the explained output (class or next-token id; ``None``: the arg-max), as ``explain``'s ``target``;
``additional_forward_args`` are the model's further positional forward arguments (``attention_mask``, and for T5
``decoder_input_ids`` / ``decoder_attention_mask``), mapped by the names of ``model.forward``. The full explanation
(semantic and positional parts) of the last call is ``last_explanation``. The explained value is the target logit
(LRP's starting relevance), whatever function a caller would attribute otherwise.
"""
from __future__ import annotations

import inspect

import torch
from captum.attr import Attribution

from .api import explain
from .errors import BadInputError
from .lrp.explanation import Explanation
from .methods.registry import METHODS, get_method

__all__ = ["LRPAttribution", "PALRP", "PALRPNoMultiSink", "PEOnly", "AttnLRP", "CPLRP", "GradXInput",
           "FORWARD_ARGS"]

#: the model forward arguments ``additional_forward_args`` may carry (by their name in ``model.forward``)
FORWARD_ARGS = ("attention_mask", "decoder_input_ids", "decoder_attention_mask")


class LRPAttribution(Attribution):
    """Any method of :data:`palrp_bench.methods.registry.METHODS` as a Captum attribution (module docstring).

    ``model``: what :func:`palrp_bench.explain` takes (a Hugging Face model of a supported family, a timm ViT, ...);
    ``method``: a method name (the named subclasses fix it); ``explain_options``: further keywords of ``explain``
    for every call (``aggregation``, ``protocol``, ``rules``, ``stabilizers``, ``params``, ``batch_size``,
    ``causal``, ...); ``attribute`` takes more per call."""

    method: str | None = None

    def __init__(self, model, method: str | None = None, **explain_options) -> None:
        name = method or self.method
        if name is None:
            raise BadInputError("LRPAttribution needs a method", f"pass method= one of: {', '.join(sorted(METHODS))}")
        self.method_name = get_method(name).name
        super().__init__(model)
        self.model = model
        self.explain_options = explain_options
        self.last_explanation: Explanation | None = None

    @property
    def multiplies_by_inputs(self) -> bool:
        """LRP relevance (and Gradient x Input) is an input times a modified gradient: attributions scale with the
        input, as Captum's ``InputXGradient`` does."""
        return True

    def has_convergence_delta(self) -> bool:
        return False

    def _forward_args(self, additional_forward_args) -> dict:
        """``additional_forward_args`` (a value or a tuple, Captum's convention) as keywords of ``explain``, by the
        parameter names of ``model.forward`` after the input."""
        if additional_forward_args is None:
            return {}
        args = additional_forward_args if isinstance(additional_forward_args, tuple) else (additional_forward_args,)
        forward = getattr(self.model, "forward", self.model)
        names = [p.name for p in inspect.signature(forward).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
        if len(args) > len(names):
            raise BadInputError(f"{len(args)} additional_forward_args, but {type(self.model).__name__}.forward takes "
                                f"{len(names)} after the input", f"pass at most: {', '.join(names)}")
        out = {}
        for name, value in zip(names, args):
            if value is None:
                continue
            if name not in FORWARD_ARGS:
                raise BadInputError(f"additional_forward_args sets {name!r}, which palrp-bench's explanation does "
                                    "not take", f"pass only {', '.join(FORWARD_ARGS)} (None for the others)")
            out[name] = value
        return out

    def attribute(self, inputs, target=None, additional_forward_args=None, **explain_options):
        """Attributions of ``inputs`` (one tensor, or a 1-tuple, which is returned as a 1-tuple) for ``target``;
        shapes in the module docstring. ``explain_options`` override those given at construction."""
        as_tuple = isinstance(inputs, tuple)
        if as_tuple:
            if len(inputs) != 1:
                raise BadInputError(f"{len(inputs)} input tensors, palrp-bench explains one",
                                    "pass input_ids [B, T] or pixel_values [B, C, H, W]")
            inputs = inputs[0]
        if not isinstance(inputs, torch.Tensor):
            raise BadInputError(f"inputs is a {type(inputs).__name__}, not a tensor",
                                "pass input_ids [B, T] or pixel_values [B, C, H, W]")
        if isinstance(target, (tuple, list)) and any(isinstance(t, tuple) for t in target):
            raise BadInputError("tuple targets index several output dimensions; palrp-bench explains one logit",
                                "pass an int or one id per sample")
        if isinstance(target, list):
            target = torch.tensor(target)
        e = explain(self.model, inputs, method=self.method_name, target=target,
                    **{**self.explain_options, **explain_options, **self._forward_args(additional_forward_args)})
        self.last_explanation = e
        scores = e.scores
        if inputs.dim() == 4 and scores.dim() == 3:  # pixels: the map shared equally by the channels
            scores = (scores / inputs.shape[1]).unsqueeze(1).expand(-1, inputs.shape[1], -1, -1)
        attributions = scores.to(inputs.device)
        return (attributions,) if as_tuple else attributions


class PALRP(LRPAttribution):
    """PA-LRP ("Ours"): semantic + positional relevance, multi-sink (docs/protocol.md section 1)."""

    method = "pa_lrp"


class PALRPNoMultiSink(LRPAttribution):
    """PA-LRP's ablation "w/o multi-sink": per-layer positional terms summed signed (Table 2)."""

    method = "pa_lrp_no_multisink"


class PEOnly(LRPAttribution):
    """The positional relevance alone ("PE only")."""

    method = "pe_only"


class AttnLRP(LRPAttribution):
    """AttnLRP: semantic relevance with the positional encoding treated as constant."""

    method = "attnlrp"


class CPLRP(LRPAttribution):
    """CP-LRP: attention weights and gates held constant."""

    method = "cp_lrp"


class GradXInput(LRPAttribution):
    """Plain Gradient x Input through the same twin (the LRP methods' cost floor)."""

    method = "grad_x_input"
