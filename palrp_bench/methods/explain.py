"""The public entry point: ``palrp_bench.explain`` (issue "LRP engine", public API; PROTOCOL.md section 1)."""
from __future__ import annotations

from ..errors import BadInputError
from ..lrp.composites import get_composite
from ..lrp.explanation import Explanation
from ..models.registry import twin_for
from .registry import get_method

PROTOCOLS = ("official", "corrected")


def explain(model, inputs, attention_mask=None, method="pa_lrp", target=None, aggregation="official", *,
            rules=None, protocol="official", **options) -> Explanation:
    """Explain a batch of inputs of ``model`` with ``method``.

    Args:
        model: the library model object as the user loaded it (Hugging Face ``LlamaForCausalLM`` /
            ``LlamaForSequenceClassification``, incl. bitsandbytes 4-bit; timm ``VisionTransformer`` / DeiT).
        inputs: ``input_ids`` ``[B, T]`` for language models, normalised ``pixel_values`` ``[B, 3, H, W]`` for
            vision transformers.
        attention_mask: ``[B, T]`` (language models; left or right padding).
        method: ``attnlrp`` | ``pe_only`` | ``pa_lrp`` | ``pa_lrp_no_multisink`` | ``grad_x_input`` | ``cp_lrp``
            (see :mod:`palrp_bench.methods.registry`).
        target: ``None`` explains the arg-max (predicted class / next token after the last non-pad position);
            an int or a ``[B]`` tensor selects another output.
        aggregation: ``official`` (the official code's token aggregation, default) or ``eq11`` (paper Eq. 11).
        rules: composite name overriding the method's default (``attnlrp``, ``cp_lrp``, ``grad_x_input``,
            ``official_vit``).
        protocol: ``official`` (reproduce the published tables) or ``corrected`` (named corrections on, e.g.
            the IMDB sign fix for language models).
        options: passed to the twin (language: ``causal``, ``attention`` = sdpa|eager, ``correct_sign``).

    Returns:
        :class:`~palrp_bench.lrp.explanation.Explanation` with ``scores``, ``semantic``, ``positional``,
        ``logit``, ``target`` (shapes documented there).
    """
    if protocol not in PROTOCOLS:
        raise BadInputError(f"unknown protocol {protocol!r}", f"use one of: {', '.join(PROTOCOLS)}")
    m = get_method(method)
    twin = twin_for(model)
    composite = get_composite(rules or m.composite or twin.default_composite(protocol))
    if protocol == "corrected" and getattr(twin, "is_classifier", False):
        options.setdefault("correct_sign", True)
    return twin.explain(inputs, method=m, composite=composite, target=target, aggregation=aggregation,
                        attention_mask=attention_mask, **options)
