"""What every attributor receives and returns, and the model access they share (docs/baselines.md).

An attributor is a function ``fn(call: AttributorCall) -> AttributorResult``. It sees the model only through the
twin of :mod:`palrp_bench.models` and the helpers here, which are the same for language models (the input is the
``[B, T, D]`` embedding output, the features are tokens) and vision transformers (the input is the normalised
``[B, 3, H, W]`` image, the features are pixels or patch tokens):

* :func:`input_of` / :func:`logits_from`: the model input and the plain forward from any input of that shape
  (the twin's forward under the ``grad_x_input`` composite, i.e. ordinary autograd; its logits equal the
  library's, tests/models/), for every twin family;
* :func:`explained_of`: the explained value of each row, the target logit or, with a foil, the difference
  ``logit[target] - logit[foil]`` (a contrastive explanation: every gradient an attributor takes is the gradient of
  that value, docs/engine.md "Contrastive explanations");
* :func:`select_rows`: the prepared inputs of chosen samples, repeated as needed (batched multi-pass methods);
* :func:`attention_row`: the query row of the explained output in the attention matrices (the last real token of
  a decoder, the CLS token of a ViT) and :func:`prefix_tokens` (tokens of a ViT that are not patches);
* encoder-decoders (T5), whose scores are over the encoder tokens and whose explained logit is the decoder's:
  :func:`feature_attention_sites` (the attention calls whose queries and keys are both encoder tokens: the encoder
  self-attention), :func:`feature_key_sites` (those whose keys are: encoder self- and cross-attention) and
  :func:`decoder_tokens` (the real decoder tokens).

:func:`run_attributor` turns the result into an :class:`~palrp_bench.lrp.explanation.Explanation`: per-token scores
``[B, T]`` (signed, zero at padding), or per-pixel maps ``[B, H, W]`` where ``scores`` is ReLU'd like every vision
map of the PA-LRP protocol and ``extras["scores_signed"]`` keeps the signed map; per-patch results are spread over
their pixels with :func:`palrp_bench.methods.pixel_aggregation.paint_patches` (patch-constant maps, the
checkerboard the AttnLRP paper's Figure 6 shows for rollout and AtMan). ``forward_passes`` and ``backward_passes``
record each sample's cost; ``logit`` is the explained value and ``extras["foil"]`` the
foil of a contrastive explanation.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UnsupportedModelError
from ..lrp.attribution import explained_output, resolve_foil, resolve_target
from ..lrp.composites import GRAD_X_INPUT
from ..lrp.explanation import Explanation
from ..methods.pixel_aggregation import paint_patches
from ..methods.registry import Method

__all__ = ["AttributorCall", "AttributorResult", "input_of", "logits_from", "explained_of", "select_rows",
           "attention_row", "feature_attention_sites", "feature_key_sites",
           "prefix_tokens", "patch_grid", "patch_embeddings", "per_patch", "valid_tokens", "decoder_tokens",
           "sample_seed",
           "explanation_of"]


@dataclass
class AttributorCall:
    """One explanation request: the twin and its prepared inputs, the method and its resolved hyperparameters, the
    explained output per sample (``target`` ``[B]``), the plain logits ``[B, C]`` and the explained position of a
    language model (``explained_index`` ``[B]``, None for images), the twin options (``causal`` for decoders), the
    most rows per forward for multi-pass methods (``batch_size``; None = all at once) and the foil of a
    contrastive explanation (``foil`` ``[B]`` on the model's device, None without one: the explained value is
    then ``logit[target] - logit[foil]``, :func:`explained_of`)."""

    twin: Any
    prepared: Any
    method: Method
    params: dict
    target: torch.Tensor
    logits: torch.Tensor
    explained_index: torch.Tensor | None
    options: dict
    batch_size: int | None = None
    foil: torch.Tensor | None = None

    @property
    def batch(self) -> int:
        return int(self.target.shape[0])

    @property
    def modality(self) -> str:
        return self.twin.modality


@dataclass
class AttributorResult:
    """Per-feature relevance and cost of a batch.

    ``relevance``: ``[B, T]`` per token (modality ``tokens``), ``[B, H, W]`` per pixel, or ``[B, Hp, Wp]`` per patch
    (``per_patch=True``; painted over the pixels). ``forward_passes`` / ``backward_passes``: ``[B]`` model passes
    spent on each sample (a batched pass over ``k`` rows of one sample counts ``k``). ``extras``: further per-sample
    tensors ``[B, ...]`` the method reports (copied into ``Explanation.extras``)."""

    relevance: torch.Tensor
    forward_passes: torch.Tensor
    backward_passes: torch.Tensor
    per_patch: bool = False
    extras: dict = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ model access
def input_of(twin, prepared) -> torch.Tensor:
    """The model input the attributions are taken with respect to: the ``[B, T, D]`` word embeddings of a language
    model (AttnLRP paper: "on the embedding output"), the normalised ``[B, 3, H, W]`` pixels of a ViT. Detached."""
    if twin.modality == "tokens":
        return twin.embed(prepared.input_ids).detach()
    return prepared.pixels.detach()


def forward_from(twin, prepared, x: torch.Tensor, composite=GRAD_X_INPUT, **options):
    """The twin's forward record (``.logits`` ``[B, C]`` at the explained position) from the input ``x`` (shape of
    :func:`input_of`) with the rows of ``prepared`` (attention mask, explained position); under ``grad_x_input``
    this is the library's own function (the twins' parity tests). ``options``: the twin's forward options."""
    if twin.modality == "tokens":
        return twin.run(dataclasses.replace(prepared, embeds=x), composite, positional_sinks=False, **options)
    return twin.forward(x, composite, **options)


def logits_from(twin, prepared, x: torch.Tensor, composite=GRAD_X_INPUT, **options) -> torch.Tensor:
    """``[B, C]`` logits of :func:`forward_from`."""
    return forward_from(twin, prepared, x, composite, **options).logits


def explained_of(call: "AttributorCall", logits: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """``[R]`` explained value of each row of ``logits`` ``[R, C]``: row ``r`` belongs to sample ``rows[r]``
    (None: row ``r`` is sample ``r``); the target logit, minus the foil logit for a contrastive call
    (:func:`palrp_bench.lrp.attribution.explained_output`). Differentiable."""
    target, foil = call.target, call.foil
    if rows is not None:
        target = target.index_select(0, rows.to(target.device))
        foil = None if foil is None else foil.index_select(0, rows.to(foil.device))
    return explained_output(logits, target, foil)


def select_rows(prepared, rows: torch.Tensor):
    """The prepared inputs of samples ``rows`` (a ``[R]`` index tensor; repeats allowed), same type."""
    values = {}
    for f in dataclasses.fields(prepared):
        v = getattr(prepared, f.name)
        values[f.name] = v.index_select(0, rows.to(v.device)) if isinstance(v, torch.Tensor) and v.dim() else v
    return type(prepared)(**values)


def attention_row(call: "AttributorCall") -> torch.Tensor:
    """``[B]`` query row of the explained output in the attention matrices: the explained token of a language
    model, the CLS token (row 0) of a ViT that classifies from it (others are refused in one line)."""
    if call.modality == "tokens":
        return call.explained_index
    if getattr(call.twin.model, "global_pool", "token") != "token":
        raise UnsupportedModelError(f"{call.method.name} reads the CLS row of the attention, but this ViT pools "
                                    f"{call.twin.model.global_pool!r}", "use a ViT that classifies from its CLS token")
    return torch.zeros(call.batch, dtype=torch.long, device=call.prepared.pixels.device)


def feature_attention_sites(twin) -> tuple[str, ...] | None:
    """The ``site`` labels (:attr:`palrp_bench.lrp.rules.AttentionRecorder.sites`) of the attention calls whose
    queries and keys are both the feature tokens: T5's ``encoder`` self-attention; None = every call (decoders,
    encoders, ViTs: one stack)."""
    return twin.feature_attention_sites


def feature_key_sites(twin) -> tuple[str, ...] | None:
    """The ``site`` labels of the attention calls whose keys are the feature tokens: T5's ``encoder`` self- and
    ``cross``-attention (not the decoder's self-attention, whose keys are decoder tokens); None = every call."""
    return twin.feature_key_sites


def prefix_tokens(twin) -> int:
    """Tokens in front of the features: the CLS (and distillation / register) tokens of a ViT, none for text."""
    return 0 if twin.modality == "tokens" else int(twin.num_prefix)


def patch_grid(twin, prepared) -> tuple[int, int]:
    """``(Hp, Wp)``: the patch grid of a ViT batch."""
    (h, w), (ph, pw) = prepared.pixels.shape[-2:], twin.patch_size
    return h // ph, w // pw


def patch_embeddings(twin, pixels: torch.Tensor) -> torch.Tensor:
    """``[B, Hp * Wp, D]`` output of the ViT's own patch-embedding module (before the position embedding)."""
    with torch.no_grad():
        tokens = twin.patch_embed(pixels)
    return tokens.reshape(tokens.shape[0], -1, tokens.shape[-1])


def per_patch(twin, prepared, token_relevance: torch.Tensor) -> torch.Tensor:
    """``[B, Hp, Wp]`` from relevance of every ViT token ``[B, P + Hp * Wp]`` (the prefix tokens dropped)."""
    hp, wp = patch_grid(twin, prepared)
    return token_relevance[:, prefix_tokens(twin):].reshape(-1, hp, wp)


def valid_tokens(twin, prepared) -> torch.Tensor:
    """``[B, T]`` bool: the real tokens of a decoder batch (all tokens of a ViT)."""
    if twin.modality == "tokens":
        mask = prepared.attention_mask
        return torch.ones_like(prepared.input_ids, dtype=torch.bool) if mask is None else mask.bool()
    raise ValueError("valid_tokens is defined for token models")


def decoder_tokens(twin, prepared) -> torch.Tensor:
    """``[B, Td]`` bool: the real decoder tokens of an encoder-decoder batch (T5's ``decoder_attention_mask``)."""
    if not twin.encoder_decoder:
        raise ValueError("decoder_tokens is defined for encoder-decoders")
    return prepared.decoder_mask.bool()


def sample_seed(twin, prepared, index: int, seed: int) -> int:
    """A seed that depends only on sample ``index``'s own input and ``seed`` (never on the batch it shares), so
    stochastic methods give each sample the same noise in any batch or shard."""
    import hashlib

    if twin.modality == "tokens":
        ids = prepared.input_ids[index]
        if prepared.attention_mask is not None:
            ids = ids[prepared.attention_mask[index].bool()]
        data = ids.detach().cpu().numpy().astype("int64").tobytes()
    else:
        data = prepared.pixels[index].detach().float().cpu().numpy().tobytes()
    digest = hashlib.blake2b(data + int(seed).to_bytes(8, "little", signed=True), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


# ---------------------------------------------------------------------------------------------------- output
def explanation_of(call: AttributorCall, result: AttributorResult, aggregation: str) -> Explanation:
    """The :class:`Explanation` of an attributor result (module docstring)."""
    twin, prepared = call.twin, call.prepared
    acc = torch.promote_types(input_of(twin, prepared).dtype, torch.float32)  # float32 at least, float64 stays
    relevance = result.relevance.detach().to(acc)
    logit = explained_of(call, call.logits).detach().to(acc)
    extras: dict = dict(result.extras)
    passes = {"forward_passes": result.forward_passes.detach().cpu(),
              "backward_passes": result.backward_passes.detach().cpu()}
    if call.foil is not None:
        extras["foil"] = call.foil
    if twin.modality == "tokens":
        valid = valid_tokens(twin, prepared)
        scores = torch.where(valid, relevance, torch.zeros_like(relevance))
        positional = scores.new_zeros(scores.shape[0], 0, 2, scores.shape[1])
        extras["explained_index"] = call.explained_index
        return Explanation(scores=scores, semantic=scores, positional=positional, logit=logit, target=call.target,
                           method=call.method.name, rules=call.method.attributor, aggregation=aggregation,
                           attention_mask=prepared.attention_mask, extras=extras, **passes)
    image_size = tuple(prepared.pixels.shape[-2:])
    signed = paint_patches(relevance, twin.patch_size, image_size) if result.per_patch else relevance
    hp, wp = patch_grid(twin, prepared)
    zeros = signed.new_zeros(signed.shape[0])
    total = signed.sum((1, 2))
    extras.update(scores_signed=signed, semantic_total=total, positional_total=zeros,
                  semantic_total_incl_prefix=total, positional_total_incl_prefix=zeros, cls_semantic=zeros,
                  cls_positional=zeros, patch_size=twin.patch_size)
    return Explanation(scores=signed.clamp(min=0), semantic=signed, positional=signed.new_zeros(signed.shape[0], hp, wp),
                       logit=logit, target=call.target, method=call.method.name, rules=call.method.attributor,
                       aggregation=aggregation, extras=extras, **passes)


def make_call(twin, prepared, method: Method, params: dict, target, options: dict,
              batch_size: int | None, foil=None) -> AttributorCall:
    """Resolve the explained output (arg-max unless ``target`` says otherwise) and the foil (checked:
    :func:`palrp_bench.lrp.attribution.resolve_foil`) with one plain forward."""
    with torch.no_grad():
        out = forward_from(twin, prepared, input_of(twin, prepared), **options)
    index = None
    if twin.modality == "tokens":
        index = getattr(out, "explained_index", None)
        index = getattr(out, "last_index", None) if index is None else index
        if options.get("position") is not None:  # a masked LM's position, now per row of the prepared inputs
            prepared = dataclasses.replace(prepared, explained_index=index)
            options = {k: v for k, v in options.items() if k != "position"}
    logits = out.logits.to(torch.promote_types(out.logits.dtype, torch.float32))  # float32 at least, float64 stays
    tgt = resolve_target(target, logits)
    return AttributorCall(twin, prepared, method, params, tgt, logits, index, options, batch_size,
                          resolve_foil(foil, tgt, logits))
