"""Decoder twins driven by a declarative spec: one generic LRP-aware forward for pre-norm decoder LLMs.

A *twin* wraps a loaded Hugging Face model without touching it. It calls the model's own linear modules
(``q_proj``, ``gate_proj``, ``lm_head``, ``score``, ...; bitsandbytes ``Linear4bit`` works unchanged) and its own
rotary module (so every rope scaling type the library supports is honoured), and re-implements only the wiring
with the rules of :mod:`palrp_bench.lrp.rules` under a :class:`~palrp_bench.lrp.composites.Composite`:

* the norm with its normaliser constant (identity rule), the MLP activation under the identity rule, the gated
  product under the uniform rule;
* the positional encoding of the spec's kind (:mod:`palrp_bench.lrp.positional`; RoPE: per-layer (cos, sin)
  sinks when asked for, constants otherwise);
* attention through fused SDPA with gradient scaling (or an eager path with explicit weights for the ledger).

What differs between families is data: a :class:`DecoderSpec` names the modules, the norm, the MLP and the
positional kind, and :func:`register_decoder` makes it known. A new family is one spec in its own module of this
package (e.g. ``models/llama.py``) plus its tests; the twin registry imports every module of the package.

Parity tests pin each spec's logits to the library's forward (tests/models/).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import BadInputError, UnsupportedModelError
from ..lrp import rules
from ..lrp.attribution import Attribution
from ..lrp.composites import Composite
from ..lrp.positional import get_positional
from .loading import keep_4bit_differentiable
from .registry import discover, register_twin

__all__ = ["DecoderSpec", "DECODER_SPECS", "register_decoder", "spec_for", "DecoderTwin", "DecoderInputs",
           "TwinOutput", "HEADS"]

#: Hugging Face head classes a decoder twin explains, by class-name suffix: "causal" (next-token logits at the last
#: real position) and "classifier" (sequence classification pooled at the last real token)
HEADS = {"ForCausalLM": "causal", "ForSequenceClassification": "classifier"}


@dataclass(frozen=True)
class DecoderSpec:
    """A pre-norm decoder family, declaratively.

    * ``family``: its name; ``model_types``: the ``config.model_type`` values it covers.
    * ``norm``: ``"rms"`` (RMSNorm, HF-style float32 statistics); ``norm_eps``: None = the module's own epsilon.
    * ``mlp``: ``"gated"`` (``down(act(gate(h)) * up(h))``).
    * ``positional``: a kind of :mod:`palrp_bench.lrp.positional` (``"rope"``).
    * module names on the Hugging Face model: ``backbone`` (``model.model``), ``embed_tokens``, ``layers``,
      ``final_norm``, ``rotary``, the attention block and its projections, the two norms of a layer, the MLP and
      its projections, and the heads (``lm_head`` / ``classifier_head``).
    * ``checks``: functions of the config returning a reason when a configuration is not supported (refused with
      one line).
    """

    family: str
    model_types: tuple[str, ...]
    norm: str = "rms"
    norm_eps: float | None = None
    mlp: str = "gated"
    positional: str = "rope"
    backbone: str = "model"
    embed_tokens: str = "embed_tokens"
    layers: str = "layers"
    final_norm: str = "norm"
    rotary: str = "rotary_emb"
    attention: str = "self_attn"
    q_proj: str = "q_proj"
    k_proj: str = "k_proj"
    v_proj: str = "v_proj"
    o_proj: str = "o_proj"
    attention_norm: str = "input_layernorm"
    mlp_norm: str = "post_attention_layernorm"
    mlp_block: str = "mlp"
    gate_proj: str = "gate_proj"
    up_proj: str = "up_proj"
    down_proj: str = "down_proj"
    activation: str = "act_fn"
    lm_head: str = "lm_head"
    classifier_head: str = "score"
    checks: tuple[Callable[[object], str | None], ...] = field(default=())


DECODER_SPECS: dict[str, DecoderSpec] = {}


def register_decoder(spec: DecoderSpec) -> DecoderSpec:
    """Make a decoder family known to the twin registry."""
    DECODER_SPECS[spec.family] = spec
    return spec


def spec_for(model) -> DecoderSpec | None:
    """The spec covering a Hugging Face model object (by ``config.model_type``), or None."""
    discover()
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    for spec in DECODER_SPECS.values():
        if model_type in spec.model_types:
            return spec
    return None


def head_of(model) -> str | None:
    """``"causal"`` / ``"classifier"`` from the model class name, or None for other heads."""
    name = type(model).__name__
    return next((kind for suffix, kind in HEADS.items() if name.endswith(suffix)), None)


def _norm_eps(module, spec: DecoderSpec) -> float:
    if spec.norm_eps is not None:
        return spec.norm_eps
    eps = getattr(module, "variance_epsilon", None)
    return float(eps if eps is not None else module.eps)


@dataclass
class TwinOutput:
    """What one LRP-aware forward produces.

    ``logits``: ``[B, C]`` classifier logits (pooled at the last non-pad token) or next-token logits at the last
    non-pad position for a causal LM. ``embeds``: the ``[B, T, D]`` input-embedding leaf (semantic sink).
    ``cos``/``sin``: one leaf per layer (``[B, T, head_dim]``) when positional sinks are on, else empty lists.
    ``all_logits``: ``[B, T, V]`` only when requested (parity tests).
    """

    logits: torch.Tensor
    embeds: torch.Tensor
    cos: list
    sin: list
    last_index: torch.Tensor
    all_logits: torch.Tensor | None = None

    @property
    def sinks(self) -> dict:
        return {"embeds": self.embeds, "cos": self.cos, "sin": self.sin}


@dataclass
class DecoderInputs:
    """Validated inputs of one explanation: ``input_ids`` ``[B, T]``, ``attention_mask`` ``[B, T]`` or None, and
    the explained position per sample."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    last_index: torch.Tensor


@register_twin
class DecoderTwin:
    """LRP-aware forward of a Hugging Face decoder covered by a :class:`DecoderSpec` (module docstring)."""

    modality = "tokens"
    starting_relevance = "logit"
    default_composite = "attnlrp"

    @classmethod
    def family(cls) -> str:
        discover()
        return "decoders (" + ", ".join(sorted(DECODER_SPECS)) + "; *ForCausalLM, *ForSequenceClassification)"

    @classmethod
    def supports(cls, model) -> bool:
        if not type(model).__module__.startswith("transformers."):
            return False  # cheap check first
        return spec_for(model) is not None and head_of(model) is not None

    def __init__(self, model):
        spec = spec_for(model)
        head = head_of(model)
        if spec is None or head is None:
            raise UnsupportedModelError(f"no decoder spec for {type(model).__name__}",
                                        f"supported: {self.family()}")
        unsupported = ([f"norm {spec.norm!r}"] if spec.norm != "rms" else []) + \
                      ([f"mlp {spec.mlp!r}"] if spec.mlp != "gated" else [])
        if unsupported:
            raise UnsupportedModelError(f"decoder spec {spec.family}: {', '.join(unsupported)} not implemented",
                                        "use norm='rms' and mlp='gated'")
        for check in spec.checks:
            reason = check(model.config)
            if reason:
                raise UnsupportedModelError(f"{type(model).__name__}: {reason}",
                                            "use a configuration the twin reproduces (see docs/engine.md)")
        self.spec = spec
        self.model = model
        self.config = model.config
        self.is_classifier = head == "classifier"
        base = getattr(model, spec.backbone)
        self.embed_tokens = getattr(base, spec.embed_tokens)
        self.layers = getattr(base, spec.layers)
        self.final_norm = getattr(base, spec.final_norm)
        self.rotary = getattr(base, spec.rotary)
        self.head = getattr(model, spec.classifier_head if self.is_classifier else spec.lm_head)
        self.positional = get_positional(spec.positional)
        keep_4bit_differentiable(model)

    # ------------------------------------------------------------------ helpers
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Input-embedding leaf: the semantic sink (``R(E) = E * E.grad``)."""
        with torch.no_grad():
            e = self.embed_tokens(input_ids)
        return e.detach().requires_grad_(True)

    def position_ids(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Positions counted over real tokens only, so left padding does not shift them (batch invariance)."""
        return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)

    def last_index(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Index of the token whose output is explained: the last non-pad position.

        With an attention mask: the last position where the mask is 1 (works for left and right padding).
        Without one, a classifier pools like Hugging Face (last token that is not ``pad_token_id``) and a causal
        LM explains the last position.
        """
        b, t = input_ids.shape
        idx = torch.arange(t, device=input_ids.device)
        if attention_mask is not None:
            return (idx * attention_mask.long()).argmax(-1)
        pad = getattr(self.config, "pad_token_id", None)
        if self.is_classifier and pad is not None:
            return (idx * (input_ids != pad).long()).argmax(-1)
        return torch.full((b,), t - 1, device=input_ids.device, dtype=torch.long)

    # ------------------------------------------------------------------ explanation protocol
    def prepare(self, input_ids, attention_mask=None) -> DecoderInputs:
        """Check shapes, lengths and ids; move to the model's device (one-line errors for bad input)."""
        if not isinstance(input_ids, torch.Tensor):
            input_ids = torch.as_tensor(input_ids)
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        if input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
            raise BadInputError(f"input_ids must be an integer tensor [batch, tokens], got {tuple(input_ids.shape)} "
                                f"{input_ids.dtype}", "tokenize the text first (tokenizer(text, return_tensors='pt'))")
        if input_ids.shape[1] == 0 or input_ids.shape[0] == 0:
            raise BadInputError("empty input (no tokens)", "pass at least one token (a non-empty text)")
        max_len = getattr(self.config, "max_position_embeddings", None)
        if max_len is not None and input_ids.shape[1] > max_len:
            raise BadInputError(f"sequence of {input_ids.shape[1]} tokens is longer than the model context "
                                f"({max_len})", f"truncate to at most {max_len} tokens")
        vocab = self.embed_tokens.num_embeddings
        if int(input_ids.max()) >= vocab or int(input_ids.min()) < 0:
            raise BadInputError(f"token id out of range for a vocabulary of {vocab}",
                                "use the tokenizer that belongs to this model")
        input_ids = input_ids.to(device=self.device, dtype=torch.long)
        if attention_mask is not None:
            attention_mask = torch.as_tensor(attention_mask)
            if attention_mask.dim() == 1:
                attention_mask = attention_mask[None]
            if attention_mask.shape != input_ids.shape:
                raise BadInputError(f"attention_mask shape {tuple(attention_mask.shape)} differs from input_ids "
                                    f"{tuple(input_ids.shape)}", "pass the mask the tokenizer returned")
            attention_mask = attention_mask.to(device=self.device, dtype=torch.long)
            if bool((attention_mask.sum(-1) == 0).any()):
                raise BadInputError("a sample has no real token (attention_mask all zero)", "drop empty texts")
        return DecoderInputs(input_ids, attention_mask, self.last_index(input_ids, attention_mask))

    def run(self, inputs: DecoderInputs, composite: Composite, *, positional_sinks: bool, causal: bool = True,
            attention: str = "sdpa") -> TwinOutput:
        """The LRP-aware forward of :func:`palrp_bench.lrp.attribution.attribute` (fresh embedding leaf)."""
        return self.forward(self.embed(inputs.input_ids), inputs.attention_mask, inputs.last_index, composite,
                            positional_sinks=positional_sinks, causal=causal, attention=attention)

    def summarize(self, inputs: DecoderInputs, attribution: Attribution) -> dict:
        """Semantic and positional parts of the relevance (shapes: :class:`~palrp_bench.lrp.explanation.Explanation`)
        plus what the token aggregations need (``semantic_relu``, ``positional_relu``, ``positional_shared_relu``)."""
        r = attribution.relevance
        b, t = inputs.input_ids.shape
        semantic = r["embeds"].sum(-1)
        rope = self.positional.reduce(r["cos"], r["sin"], self.num_layers, b, t, semantic)
        valid = (inputs.attention_mask.bool() if inputs.attention_mask is not None
                 else torch.ones_like(semantic, dtype=torch.bool))
        return {"semantic": semantic, "semantic_relu": r["embeds"].clamp(min=0).sum(-1),
                "positional": rope.per_layer, "positional_relu": rope.per_layer_relu,
                "positional_shared_relu": rope.shared_relu, "valid": valid, "attention_mask": inputs.attention_mask,
                "extras": {"explained_index": inputs.last_index}}

    # ------------------------------------------------------------------ forward
    def forward(self, embeds: torch.Tensor, attention_mask: torch.Tensor | None, last_index: torch.Tensor,
                composite: Composite, *, positional_sinks: bool, causal: bool = True,
                attention: str = "sdpa", recorder: rules.AttentionRecorder | None = None,
                position_ids: torch.Tensor | None = None, return_all_logits: bool = False) -> TwinOutput:
        """One LRP-aware forward from the embedding leaf to the logits at ``last_index``.

        ``causal=False`` reproduces the official code's defect for ARC/Wikipedia (docs/protocol.md section 2:
        no causal mask reached the attention). ``attention="eager"`` materialises the attention weights
        (same relevance; required by ``recorder``).
        """
        b, t, _ = embeds.shape
        if attention_mask is None:
            attention_mask = torch.ones(b, t, dtype=torch.long, device=embeds.device)
        if position_ids is None:
            position_ids = self.position_ids(attention_mask)
        mask = _attention_mask(attention_mask)
        with torch.no_grad():
            cos, sin = self.rotary(embeds, position_ids)
        cos_leaves, sin_leaves = [], []
        x = embeds
        for layer in self.layers:
            c, s = self.positional.layer_sinks(cos, sin, positional_sinks)
            if positional_sinks:
                cos_leaves.append(c)
                sin_leaves.append(s)
            x = self._layer(layer, x, c, s, mask, composite, causal, attention, recorder)
        hidden = x[torch.arange(b, device=x.device), last_index]
        logits = self.head(self._norm(self.final_norm, hidden, composite))
        all_logits = self.head(self._norm(self.final_norm, x, composite)) if return_all_logits else None
        return TwinOutput(logits, embeds, cos_leaves, sin_leaves, last_index, all_logits)

    def _norm(self, module, x: torch.Tensor, composite: Composite) -> torch.Tensor:
        return rules.rms_norm(x, module.weight, _norm_eps(module, self.spec), composite.norm)

    def _layer(self, layer, x, cos, sin, mask, composite: Composite, causal, attention, recorder):
        spec = self.spec
        attn = getattr(layer, spec.attention)
        b, t, _ = x.shape
        h = self._norm(getattr(layer, spec.attention_norm), x, composite)
        hd = attn.head_dim
        q = getattr(attn, spec.q_proj)(h).view(b, t, -1, hd).transpose(1, 2)
        k = getattr(attn, spec.k_proj)(h).view(b, t, -1, hd).transpose(1, 2)
        v = getattr(attn, spec.v_proj)(h).view(b, t, -1, hd).transpose(1, 2)
        q = self.positional.apply(q, cos, sin, composite.product)
        k = self.positional.apply(k, cos, sin, composite.product)
        o = rules.attention(q, k, v, mask=mask, causal=causal, scale=attn.scaling,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder)
        x = x + getattr(attn, spec.o_proj)(o.transpose(1, 2).reshape(b, t, -1))
        h = self._norm(getattr(layer, spec.mlp_norm), x, composite)
        mlp = getattr(layer, spec.mlp_block)
        gate = rules.activation(getattr(mlp, spec.gate_proj)(h), getattr(mlp, spec.activation), composite.activation)
        up = getattr(mlp, spec.up_proj)(h)
        return x + getattr(mlp, spec.down_proj)(rules.product(gate, up, rule=composite.product))


def _attention_mask(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """Boolean ``[B, 1, T, T]`` key-padding mask (True = attend), or None when nothing is padded.

    Every query row keeps its own position so fully padded rows (left padding) never produce NaN; pad rows never
    influence real tokens because their keys are masked.
    """
    if bool(attention_mask.all()):
        return None
    keys = attention_mask.bool()[:, None, None, :]
    t = attention_mask.shape[1]
    eye = torch.eye(t, dtype=torch.bool, device=attention_mask.device)[None, None]
    return keys | eye
