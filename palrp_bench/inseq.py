"""palrp-bench's LRP methods as inseq feature-attribution methods (docs/captum.md, "inseq")::

    import inseq
    from palrp_bench.inseq import register_inseq_methods

    register_inseq_methods()                                  # pa_lrp, attnlrp, pe_only, ... become inseq methods
    model = inseq.load_model(hf_model, "pa_lrp", tokenizer=tokenizer)
    out = model.attribute("The capital of France is", generation_args={"max_new_tokens": 3})

inseq (optional: ``pip install inseq``) attributes a generation step by step; at each step the registered method
runs the Captum-style class of :mod:`palrp_bench.captum` on the prefix token ids with the generated token as
``target`` (one :func:`palrp_bench.explain` call), and hands inseq one score per prefix token (a coarse, per-token
attribution, as inseq's occlusion does). Decoder-only models only (LLaMA, Qwen, Mistral, GPT-2, ...): inseq gives an
encoder-decoder's source and target apart, which one explanation of T5 does not split the same way. What is
explained is the logit of the generated token (LRP's starting relevance); inseq's ``attributed_fn`` is not used.
"""
from __future__ import annotations

from .captum import LRPAttribution
from .errors import BadInputError
from .methods.registry import METHODS

__all__ = ["register_inseq_methods", "INSEQ_METHODS"]

#: the methods registered by default: the one-pass LRP rows (inseq has its own gradient baselines)
INSEQ_METHODS = ("pa_lrp", "attnlrp", "pe_only", "pa_lrp_no_multisink", "cp_lrp", "grad_x_input")
_REGISTERED: dict[str, type] = {}


def register_inseq_methods(methods=INSEQ_METHODS) -> dict[str, type]:
    """Define one inseq ``FeatureAttribution`` per method name in ``methods`` (its inseq ``method_name`` is the
    same name; defining the class is what registers it with inseq); returns name -> class. Idempotent."""
    try:
        from inseq.attr.feat import FeatureAttribution
        from inseq.data import CoarseFeatureAttributionStepOutput
    except ImportError:
        raise BadInputError("inseq is not installed", "pip install inseq (it keeps this torch and transformers)"
                            ) from None
    for name in methods:
        if name not in METHODS or "tokens" not in METHODS[name].modalities:
            raise BadInputError(f"{name!r} is no palrp-bench method for language models",
                                f"use some of: {', '.join(INSEQ_METHODS)}")
        if name in _REGISTERED:
            continue

        def __init__(self, attribution_model, _name=name, **kwargs):
            FeatureAttribution.__init__(self, attribution_model, hook_to_model=False)
            if attribution_model.is_encoder_decoder:
                raise BadInputError(f"inseq's {_name} attributes decoder-only models",
                                    "use palrp_bench.explain (or palrp_bench.captum) on encoder-decoders")
            self.attribute_batch_ids = True  # inputs: the prefix token ids, not embeddings
            self.forward_batch_embeds = False
            self.method = LRPAttribution(attribution_model.model, method=_name)
            self.hook(**kwargs)

        def attribute_step(self, attribute_fn_main_args, attribution_args={}):
            (input_ids,) = attribute_fn_main_args["inputs"]
            # inseq's decoder-only arguments: (input ids, target ids [B, 1], attributed fn, attention mask, ...)
            extra = attribute_fn_main_args["additional_forward_args"]
            target, attention_mask = extra[1].reshape(-1), extra[3]
            scores = self.method.attribute(input_ids, target=target, additional_forward_args=(attention_mask,),
                                           **attribution_args)
            return CoarseFeatureAttributionStepOutput(source_attributions=None,
                                                      target_attributions=scores.detach().to("cpu"))

        _REGISTERED[name] = type(f"PalrpInseq_{name}", (FeatureAttribution,), {
            "method_name": name, "__init__": __init__, "attribute_step": attribute_step,
            "__doc__": f"palrp-bench's {name} ({METHODS[name].description}) as an inseq attribution method."})
    return {name: _REGISTERED[name] for name in methods}
