"""The public entry point ``palrp_bench.explain``: one explanation of a batch with a table-row method.

It puts the layers together (docs/architecture.md): the method (:mod:`palrp_bench.methods`) says which composite
and which sinks, the twin (:mod:`palrp_bench.models`) provides the LRP-aware forward,
:func:`palrp_bench.lrp.attribution.attribute` runs one forward and one backward, and the method's aggregation turns
semantic and positional relevance into the final scores (docs/protocol.md section 1). Methods that are not one LRP
pass (Integrated Gradients, SmoothGrad, rollout, Grad-CAM, AtMan; docs/baselines.md) go to their attributor in
:mod:`palrp_bench.attributors` and return the same :class:`~palrp_bench.lrp.explanation.Explanation`.
"""
from __future__ import annotations

import torch

from .attributors import run_attributor
from .errors import BadInputError
from .lrp.attribution import absorbed_relevance, attribute
from .lrp.composites import get_composite
from .lrp.explanation import Explanation
from .lrp.recompute import check_checkpoint
from .lrp.stabilizers import NONE, Stabilizers, resolve_stabilizers
from .methods.pixel_aggregation import patch_positional, signed_pixel_map
from .methods.registry import get_method
from .methods.token_aggregation import aggregate_tokens, check_embeddings, embeddings_switch_applies, token_terms
from .models.registry import TWINS, twin_for
from .protocol import check_protocol

__all__ = ["explain", "stabilizers_used", "embeddings_used"]


def _correct_sign(parts: dict, logit: torch.Tensor) -> None:
    """The IMDB sign fix (docs/protocol.md section 2): when the explained logit is negative, the signed semantic
    and positional terms are multiplied by -1 before aggregation, so positive scores always mean "supports the
    explained output". In place on ``parts``."""
    sign = torch.where(logit < 0, -1.0, 1.0).to(device=parts["semantic"].device, dtype=parts["semantic"].dtype)
    parts["semantic"] = parts["semantic"] * sign[:, None]
    parts["positional"] = parts["positional"] * sign[:, None, None, None]


def _stabilizers(twin, model, m, composite, choice: str | Stabilizers | None, protocol: str) -> Stabilizers:
    """The epsilon-rule stabilisers one explanation uses (:func:`palrp_bench.lrp.stabilizers.resolve_stabilizers`
    with the twin's official set and whether the official code ran its family; twins without a set take none):
    always :data:`NONE` for methods that are not one LRP pass and for composites that take none (``composite``:
    None for those methods)."""
    def families() -> str:  # named only in the refusal
        return "; ".join(cls.family() for cls in TWINS if getattr(cls, "official_stabilizers", None) is not None)

    stab = resolve_stabilizers(choice, protocol=protocol, official=twin.official_stabilizers,
                               official_code_ran=bool(twin.official_code_ran),
                               model=type(model).__name__, families=families)
    return stab if m.is_lrp and composite.stabilizable else NONE


def stabilizers_used(model, method="pa_lrp", *, rules=None, protocol="official",
                     stabilizers: str | Stabilizers | None = None) -> str:
    """The name of the stabilisers ``explain(model, ..., method=method, rules=rules, protocol=protocol,
    stabilizers=stabilizers)`` uses (the ``stabilizers`` of its result), without explaining anything; the
    same refusals as :func:`explain`."""
    protocol = check_protocol(protocol)
    m = get_method(method)
    twin = twin_for(model)
    composite = get_composite(rules or m.composite or twin.default_composite) if m.is_lrp else None
    return _stabilizers(twin, model, m, composite, stabilizers, protocol).name


def embeddings_used(model, method="attnlrp", embeddings: str = "full") -> str | None:
    """What ``explain(model, ..., method=method, embeddings=embeddings)`` records in ``extras["embeddings"]``,
    without explaining anything: ``embeddings`` where the switch applies (a text model with learned absolute
    positions and a method that scores the semantic part alone), None where it changes nothing."""
    m = get_method(method)
    twin = twin_for(model)
    check_embeddings(embeddings)
    return embeddings if embeddings_switch_applies(m, twin.positional.name, twin.modality) else None


def _prepare(twin, model, m, decoder_input_ids, decoder_attention_mask):
    """``twin.prepare`` with the decoder inputs where the twin is an encoder-decoder (T5); elsewhere decoder inputs
    are refused, as is a method that refuses encoder-decoders (``Method.refused_model_kinds["seq2seq"]``: ALTI
    and ALTI-Logit decompose one residual stream; docs/baselines.md, "T5"), one line each."""
    name = type(model).__name__
    if not twin.encoder_decoder:
        if decoder_input_ids is not None or decoder_attention_mask is not None:
            raise BadInputError(f"{name} is not an encoder-decoder: it takes no decoder_input_ids / "
                                "decoder_attention_mask", "drop them")
        return twin.prepare
    m.check_model_kind("seq2seq", name)

    def prepare(inputs, attention_mask):
        return twin.prepare(inputs, attention_mask, decoder_input_ids, decoder_attention_mask)
    return prepare


def explain(model, inputs, attention_mask=None, method="pa_lrp", target=None, aggregation="official", *,
            decoder_input_ids=None, decoder_attention_mask=None, foil=None, embeddings: str = "full", rules=None, protocol="official",
            stabilizers: str | Stabilizers | None = None,
            correct_sign: bool | None = None, params: dict | None = None, batch_size: int | None = None,
            checkpoint: str = "none", **options) -> Explanation:
    """Explain a batch of inputs of ``model`` with ``method``.

    Args:
        model: the library model object as the user loaded it: a Hugging Face causal LM or sequence classifier of
            a decoder family (LLaMA, Mistral, Qwen2/2.5, Qwen3, Gemma 2/3, Phi-3, GPT-NeoX; incl. bitsandbytes
            4-bit), GPT-2, OPT, BLOOM, BERT or RoBERTa heads, the encoder-decoder ``T5ForConditionalGeneration``
            (T5, T5 v1.1, Flan-T5), a timm ``VisionTransformer`` / DeiT or RoPE ViT (the README's support table
            lists what each family supports).
        inputs: ``input_ids`` ``[B, T]`` for language models, normalised ``pixel_values`` ``[B, 3, H, W]`` for
            vision transformers; or what the tokenizer / image processor returns (a mapping such as
            ``BatchEncoding``: ``tokenizer(texts, return_tensors="pt")``), from which every family takes
            ``input_ids``, ``attention_mask``, ``token_type_ids`` where it has token types (BERT, RoBERTa; an all-zero
            one is ignored by the families whose library forward takes none), ``decoder_input_ids`` /
            ``decoder_attention_mask`` (encoder-decoders) or ``pixel_values``; anything else in it is refused in one
            line naming what to pass (:func:`palrp_bench.models.token_inputs.model_inputs`). Encoder-decoders: the
            encoder's ``input_ids`` ``[B, T_enc]``.
        attention_mask: ``[B, T]`` (language models; left or right padding), unless the mapping holds it.
        decoder_input_ids: encoder-decoders only, and required there: ``[B, T_dec]``, the decoder start token
            followed by the answer so far; the explained logit is the one at the last real decoder position
            (docs/engine.md, "T5"). ``scores``, ``semantic`` and ``positional`` are then over the encoder tokens,
            the decoder tokens' in ``extras["decoder_scores"]`` (:meth:`palrp_bench.models.t5.T5Twin.split`; the
            baselines hold the decoder inputs fixed and score the encoder tokens only, docs/baselines.md "T5";
            ``alti`` / ``alti_logit`` refuse).
        decoder_attention_mask: ``[B, T_dec]`` (encoder-decoders; None = no decoder padding).
        method: ``attnlrp`` | ``pe_only`` | ``pa_lrp`` | ``pa_lrp_no_multisink`` | ``grad_x_input`` | ``cp_lrp``,
            the AttnLRP paper's ViT composites ``attnlrp_gamma_b4`` | ``cp_lrp_gamma_b4``, or a baseline
            ``integrated_gradients`` | ``smoothgrad`` | ``attn_rollout`` | ``grad_attn_rollout`` | ``grad_cam`` |
            ``atman`` | ``alti_logit`` | ``alti`` (see :mod:`palrp_bench.methods.registry`, docs/baselines.md).
        target: ``None`` explains the arg-max (predicted class / next token after the last non-pad position);
            an int or a ``[B]`` tensor selects another output.
        foil: ``None``, or an int or ``[B]`` tensor of contrast class / token ids: the explained output becomes
            ``logit[target] - logit[foil]`` (a contrastive explanation; the backward is seeded with +1 at the target
            logit and -1 at the foil logit, docs/engine.md "Contrastive explanations"). Every method takes it: the
            gradient methods differentiate the difference, AtMan measures its change, ``attn_rollout`` ignores it
            (as it ignores the target). A foil out of range, of the wrong batch size or equal to the target is a
            one-line error.
        aggregation: ``official`` (the official code's token aggregation, default) or ``eq11`` (paper Eq. 11).
        embeddings: ``full`` (default) or ``partial``: on a text model with a learned absolute position embedding
            (GPT-2, OPT, BERT, RoBERTa), whether ``attnlrp``, ``cp_lrp`` and ``grad_x_input`` score each token's full
            embedding (token + position; the relevance ``pa_lrp`` adds up, BERT's token types left out) or its token
            embedding alone (every earlier release); recorded in ``extras["embeddings"]`` where it applies. RoPE,
            ALiBi, vision models and the other methods: no effect (docs/positional.md, "Full and partial
            embeddings").
        rules: composite name overriding an LRP method's default (``attnlrp``, ``cp_lrp``, ``grad_x_input``,
            ``official_vit``, ``attnlrp_gamma``, ...); methods that are not one LRP pass ignore it.
        protocol: ``official`` (reproduce the published tables) or ``corrected`` (named corrections on).
        stabilizers: ``official`` (the official code's epsilon-rule stabilisers for the model family: every
            decoder family and the timm ViT/DeiT have a set) or ``none`` (exact rules, eps -> 0); ``None`` = the
            default: under ``protocol="official"`` the official set for the families the official code ran (LLaMA-2,
            LLaMA-3.x, TinyLlama; DeiT, i.e. every timm ViT but the torchvision one) and ``none`` for every other
            family (Mistral, Qwen, Gemma, Phi-3, GPT-NeoX, ...: AttnLRP as ``lxt`` computes it); ``none`` under
            ``protocol="corrected"``. The forward is the same for either. Plain Gradient x Input and the baselines
            never take them; families without an official set (GPT-2, OPT, BERT, RoBERTa, BLOOM, RoPE ViTs)
            refuse ``official``. The two on the attention scores apply with ``attention="eager"`` only. The name
            used is the result's ``stabilizers`` (:func:`stabilizers_used` says it beforehand); see
            :mod:`palrp_bench.lrp.stabilizers`.
        correct_sign: the IMDB sign fix for sequence classifiers; ``None`` = on under ``protocol="corrected"``.
        params: hyperparameters of a baseline overriding the method's defaults (``Method.params``, e.g.
            ``{"sigma": 0.1}`` for SmoothGrad); an unknown key is an error.
        batch_size: most rows per forward of multi-pass baselines (IG, SmoothGrad, AtMan); None = all at once.
        checkpoint: ``none`` (default: the backward reads every layer's stored activations) or ``layers`` (only
            each layer's input is kept and the layer is recomputed in the backward, the position-wise part in token
            chunks: memory for long sequences, the same relevance to float rounding, about one more forward of
            time; docs/engine.md "Long contexts"). Text models only (decoders, GPT-2, OPT, BLOOM, BERT, RoBERTa,
            T5); vision transformers refuse it.
        options: passed to the twin's forward (language: ``causal``, ``attention`` = sdpa|eager; masked LMs:
            ``position``; ALiBi models: ``alibi_rule`` = paper|relative_half; T5: ``relative_bias_rule`` =
            relative_half|key; vision: ``attention``).

    Inputs, ``attention_mask``, token types and ``target`` may be on any device (CPU ids for a CUDA model): the
    twin's ``prepare`` checks them where they are and moves them to the model's device, the target follows the
    logits (docs/engine.md, "What explain returns").

    Returns:
        :class:`~palrp_bench.lrp.explanation.Explanation` with ``scores``, ``semantic``, ``positional``,
        ``logit`` (the explained value: the target logit, or the difference with a foil), ``target``,
        ``extras["foil"]`` (with a foil) (shapes documented there), on the model's device. LRP methods also return
        ``extras["absorbed"]`` ``[B]``: the starting relevance that reached no part of the explanation (what the
        softmax rules, the biases and a constant position encoding absorbed;
        :func:`~palrp_bench.lrp.attribution.absorbed_relevance`), so the parts and it add up to the starting
        relevance (the logit for language models; before the sign correction of ``correct_sign``).
    """
    protocol = check_protocol(protocol)
    check_embeddings(embeddings)
    m = get_method(method)
    twin = twin_for(model)
    if not m.is_lrp and twin.modality == "image_text":  # text-only inputs: the language model's own twin
        twin = twin.language_twin(inputs)
    m.check_modality(twin.modality)
    if check_checkpoint(checkpoint) != "none":  # a twin option; left out where it is the default
        if not getattr(twin, "checkpointing", False):
            raise BadInputError(f"checkpoint={checkpoint!r}: {type(model).__name__} has no layer-wise recomputation",
                                "use checkpoint='none' (it is for long token sequences of text models)")
        options["checkpoint"] = checkpoint
    resolved = m.resolved_params(params)
    prepare = _prepare(twin, model, m, decoder_input_ids, decoder_attention_mask)
    if not m.is_lrp:
        _stabilizers(twin, model, m, None, stabilizers, protocol)  # its refusals only: baselines take none
        e = run_attributor(twin, prepare(inputs, attention_mask), m, resolved, target, options, aggregation,
                           batch_size, foil=foil)
        e.stabilizers = NONE.name
        return e
    m.check_positional(twin.positional.name, type(model).__name__)
    composite = get_composite(rules or m.composite or twin.default_composite)
    stab = _stabilizers(twin, model, m, composite, stabilizers, protocol)
    if twin.official_stabilizers is not None:  # a twin that places stabilisers
        options["stabilizers"] = stab
    if correct_sign is None:
        correct_sign = protocol == "corrected" and twin.is_classifier
    prepared = prepare(inputs, attention_mask)
    sinks = m.positional_sinks or twin.positional.read_always
    attribution = attribute(lambda: twin.run(prepared, composite, positional_sinks=sinks, **options), target,
                            starting_relevance=twin.starting_relevance, foil=foil)
    parts = twin.summarize(prepared, attribution)
    if twin.modality != "pixels":  # text and vision-language models: scores per token
        if correct_sign:
            _correct_sign(parts, attribution.logit)
        switched = embeddings_switch_applies(m, twin.positional.name, twin.modality)
        scores = aggregate_tokens(m, aggregation, semantic=parts["semantic"], semantic_relu=parts["semantic_relu"],
                                  positional=parts["positional"], positional_relu=parts["positional_relu"],
                                  positional_shared_relu=parts["positional_shared_relu"], valid=parts["valid"],
                                  multi_sink=twin.positional.multi_sink,
                                  full_embeddings=switched and embeddings == "full")
        terms = token_terms(m, aggregation, semantic=parts["semantic"], semantic_relu=parts["semantic_relu"],
                            positional=parts["positional"], positional_relu=parts["positional_relu"],
                            positional_shared_relu=parts["positional_shared_relu"],
                            multi_sink=twin.positional.multi_sink)
        semantic_term, positional_term = (torch.where(parts["valid"], t, torch.zeros_like(t)) for t in terms)
        extras = {"semantic_relu": parts["semantic_relu"], "positional_relu": parts["positional_relu"],
                  "positional_shared_relu": parts["positional_shared_relu"], "semantic_term": semantic_term,
                  "positional_term": positional_term, **parts["extras"]}
        if switched:
            extras["embeddings"] = embeddings
    else:
        signed = signed_pixel_map(m, aggregation, semantic=parts["semantic"], positional=parts["positional"],
                                  patch_size=twin.patch_size)
        scores = signed.clamp(min=0)
        extras = {**parts["extras"], "scores_signed": signed, "positional_term": patch_positional(m, parts["positional"])}
    one_pass = torch.ones(scores.shape[0], dtype=torch.long)  # one forward, one backward per sample
    extras["absorbed"] = absorbed_relevance(attribution, twin.starting_relevance)
    if attribution.foil is not None:
        extras["foil"] = attribution.foil
    e = Explanation(scores=scores, semantic=parts["semantic"], positional=parts["positional"],
                    logit=attribution.logit, target=attribution.target, method=m.name, rules=composite.name,
                    aggregation=aggregation, attention_mask=parts.get("attention_mask"), extras=extras,
                    stabilizers=stab.name, forward_passes=one_pass, backward_passes=one_pass.clone())
    return twin.split(e)
