"""Decoder twins driven by a declarative spec: one generic LRP-aware forward for pre-norm decoder LLMs.

A *twin* wraps a loaded Hugging Face model without touching it. It calls the model's own linear modules
(``q_proj``, ``gate_proj``, ``lm_head``, ``score``, ...; bitsandbytes ``Linear4bit`` works unchanged) and its own
rotary module (so every rope scaling type the library supports is honoured: linear, llama3, yarn, LongRoPE, ...),
and re-implements only the wiring with the rules of :mod:`palrp_bench.lrp.rules` under a
:class:`~palrp_bench.lrp.composites.Composite`:

* the norms with their normaliser constant (identity rule; RMSNorm, Gemma's ``(1 + w)`` RMSNorm, LayerNorm with
  bias), the MLP activation under the identity rule, the gated product under the uniform rule; sparse
  mixture-of-experts blocks through :mod:`palrp_bench.models.moe` (router, experts, shared experts);
* the positional encoding of the spec's kind (:mod:`palrp_bench.lrp.positional`; RoPE, full or partial: per-layer
  (cos, sin) sinks when asked for, constants otherwise; one table per layer type where the family has several);
* attention through fused SDPA with gradient scaling (or an eager path with explicit weights for the ledger, which
  soft-capped scores always take); sliding windows are part of the boolean mask; multi-head latent attention's
  queries, keys and values through :mod:`palrp_bench.models.latent_attention`;
* optional epsilon-rule stabilisers (:mod:`palrp_bench.lrp.stabilizers`; the official NLP set by default under
  ``protocol=official`` for the LLaMA family, on request for the others), at the same places for every family:
  ``linear`` on every projection output (q, k, v, o, gate, up, down, fused ones as a whole) and on the LM head /
  classifier, ``add`` on the RoPE sums and on the residual sums, ``av`` on ``A V``, with ``attention="eager"`` also
  ``qk`` on ``Q K^T`` and ``add`` on the masked scores; ``norm`` / ``final_norm`` on the norms inside the layers
  (incl. q/k and sandwich norms) / the final one.

What differs between families is data: a :class:`DecoderSpec` names the modules and says which of the options
below the family uses, and :func:`register_decoder` makes it known. A new family is one spec in its own module of
this package (e.g. ``models/llama.py``, ``models/gemma2.py``) plus its tests; the twin registry imports every module
of the package.

Parity tests pin each spec's logits to the library's forward (tests/models/).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Callable

import torch

from ..errors import BadInputError, UnsupportedModelError
from ..lrp import recompute, rules
from ..lrp.attribution import Attribution, embedding_sink
from ..lrp.composites import Composite
from ..lrp.positional import get_positional, real_token_positions
from ..lrp.stabilizers import NONE, OFFICIAL_NLP, Stabilizers
from .latent_attention import latent_qkv
from .loading import keep_4bit_differentiable
from .moe import MoeSpec, moe_block
from .token_inputs import attention_mask_of, key_padding_mask, last_real_index, model_inputs, token_batch
from .registry import Twin, discover, register_twin

__all__ = ["DecoderSpec", "DECODER_SPECS", "register_decoder", "spec_for", "DecoderTwin", "DecoderInputs",
           "TwinOutput", "HEADS", "layer_windows", "check_layer_types", "check_causal"]

#: Hugging Face head classes a decoder twin explains, by class-name suffix: "causal" (next-token logits at the last
#: real position; a multimodal ``*ForConditionalGeneration`` explained on text only) and "classifier" (sequence
#: classification pooled at the last real token)
HEADS = {"ForCausalLM": "causal", "ForConditionalGeneration": "causal", "ForSequenceClassification": "classifier"}

NORMS = ("rms", "layer")
MLPS = ("gated", "plain")
QKV_LAYOUTS = ("concat", "per_head")
QK_NORM_SCOPES = ("head", "projection")
ATTENTION_KINDS = ("standard", "latent")
SLIDING_WINDOWS = ("none", "all_layers", "layer_types")
ROPE_TABLES = ("single", "per_layer_type")


@dataclass(frozen=True)
class DecoderSpec:
    """A pre-norm decoder family, declaratively (every option is read off the family's Hugging Face modeling file).

    Identity and refusals:

    * ``family``: its name; ``model_types``: the ``config.model_type`` values it covers.
    * ``checks``: functions of the (text) config returning a reason when a configuration is not supported
      (refused with one line).
    * ``official_code_ran``: the official PA-LRP code ran this family (LLaMA only), so ``protocol=official`` defaults
      to its stabilisers (:mod:`palrp_bench.lrp.stabilizers`); every other family defaults to ``none`` and takes the
      official set on request.

    Norms:

    * ``norm``: ``"rms"`` (RMSNorm, float32 statistics at least) or ``"layer"`` (LayerNorm with weight and bias);
      ``norm_eps``: None = the module's own epsilon.
    * ``norm_offset``: the gain is ``norm_offset + weight`` (Gemma: ``1 + w``, weights stored centred on 0).
    * ``norm_weight_before_cast``: the gain multiplies in the statistics dtype before the cast back (Gemma:
      ``(x * w).to(dtype)``; LLaMA: ``w * x.to(dtype)``). Equal in float32, different in bfloat16.
    * ``qk_norm``: names of norms on queries and keys before the rotation (Qwen3, Gemma 3, OLMoE), or None;
      ``qk_norm_scope``: ``"head"`` (over each head's dimensions: Qwen3, Gemma 3) or ``"projection"`` (over the whole
      ``q_proj`` / ``k_proj`` output, all heads at once: OLMoE).
    * ``attention_out_norm`` / ``mlp_out_norm``: "sandwich" norms on the attention and MLP outputs before the
      residual add (Gemma 2/3: ``post_attention_layernorm``, ``post_feedforward_layernorm``), or None.

    Blocks:

    * ``mlp``: ``"gated"`` (``down(act(gate(h)) * up(h))``) or ``"plain"`` (``down(act(up(h)))``, GPT-NeoX);
      ``fused_gate_up``: name of one projection whose output halves are gate then up (Phi-3), or None.
    * ``moe``: a :class:`~palrp_bench.models.moe.MoeSpec` (router, experts, shared experts) for families whose MLP
      blocks are sparse mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V3), or None; a layer
      whose block has no router keeps the dense ``mlp`` (DeepSeek's first layers, Qwen2-MoE's ``mlp_only_layers``).
    * ``attention_kind``: ``"standard"`` (q/k/v projections as above) or ``"latent"`` (multi-head latent attention,
      DeepSeek-V3: :mod:`palrp_bench.models.latent_attention`, positional kind ``rope_decoupled``);
      ``rope_interleave``: the config flag saying the rotary dimensions are interleaved pairs (latent only), or None.
    * ``fused_qkv``: name of one projection computing q, k and v (or None: ``q_proj``, ``k_proj``, ``v_proj``);
      ``qkv_layout``: ``"concat"`` (``[q | k | v]``, Phi-3) or ``"per_head"`` (``[q_h k_h v_h]`` per head, GPT-NeoX).
    * ``head_dim_attr``: the attention module's head-size attribute.
    * ``parallel_residual``: name of the config flag switching GPT-NeoX's ``x + attn(ln1(x)) + mlp(ln2(x))`` on, or
      None (sequential residuals).

    Positions and attention:

    * ``positional``: a kind of :mod:`palrp_bench.lrp.positional` (``"rope"``; partial rotary follows from the width
      of the rotary module's tables).
    * ``rope_tables``: ``"single"`` (one rotary table) or ``"per_layer_type"`` (Gemma 3: ``rotary(x, pos,
      layer_type)``, a local and a global table; each layer's sinks are copies of its own table).
    * ``sliding_window``: ``"none"``, ``"all_layers"`` (``config.sliding_window`` on every layer when set: Mistral,
      Phi-3) or ``"layer_types"`` (on the layers whose ``config.layer_types`` entry is ``sliding_attention``).
    * ``attention_softcap`` / ``final_softcap``: names of config fields holding ``c`` of the soft-capping
      ``c * tanh(s / c)`` of attention scores / of the causal LM's logits (Gemma 2), or None. The attention scale is
      always the module's own ``scaling`` (Gemma: ``query_pre_attn_scalar ** -0.5``).

    Module names on the Hugging Face model: ``backbone`` (dotted path from the model, e.g. ``model`` or
    ``model.language_model``), ``embed_tokens`` (Gemma's scaled embedding module includes its ``sqrt(hidden)``
    factor, so the semantic sink is the scaled embedding: Gradient x Input is the same for either), ``layers``,
    ``final_norm``, ``rotary``, the attention block and its projections, the layer norms, the MLP and its
    projections, the activation, and the heads (``lm_head`` / ``classifier_head``).
    """

    family: str
    model_types: tuple[str, ...]
    norm: str = "rms"
    norm_eps: float | None = None
    norm_offset: float = 0.0
    norm_weight_before_cast: bool = False
    mlp: str = "gated"
    positional: str = "rope"
    rope_tables: str = "single"
    sliding_window: str = "none"
    attention_softcap: str | None = None
    final_softcap: str | None = None
    parallel_residual: str | None = None
    backbone: str = "model"
    embed_tokens: str = "embed_tokens"
    layers: str = "layers"
    final_norm: str = "norm"
    rotary: str = "rotary_emb"
    attention: str = "self_attn"
    head_dim_attr: str = "head_dim"
    q_proj: str = "q_proj"
    k_proj: str = "k_proj"
    v_proj: str = "v_proj"
    fused_qkv: str | None = None
    qkv_layout: str = "concat"
    qk_norm: tuple[str, str] | None = None
    qk_norm_scope: str = "head"
    attention_kind: str = "standard"
    rope_interleave: str | None = None
    o_proj: str = "o_proj"
    attention_norm: str = "input_layernorm"
    attention_out_norm: str | None = None
    mlp_norm: str = "post_attention_layernorm"
    mlp_out_norm: str | None = None
    mlp_block: str = "mlp"
    gate_proj: str = "gate_proj"
    up_proj: str = "up_proj"
    fused_gate_up: str | None = None
    down_proj: str = "down_proj"
    activation: str = "act_fn"
    lm_head: str = "lm_head"
    classifier_head: str = "score"
    moe: MoeSpec | None = None
    checks: tuple[Callable[[object], str | None], ...] = field(default=())
    official_code_ran: bool = False

    def problems(self) -> list[str]:
        """Options this twin does not implement (a spec typo), as readable phrases; empty when all is well."""
        out = []
        for name, value, allowed in (("norm", self.norm, NORMS), ("mlp", self.mlp, MLPS),
                                     ("qkv_layout", self.qkv_layout, QKV_LAYOUTS),
                                     ("sliding_window", self.sliding_window, SLIDING_WINDOWS),
                                     ("rope_tables", self.rope_tables, ROPE_TABLES),
                                     ("qk_norm_scope", self.qk_norm_scope, QK_NORM_SCOPES),
                                     ("attention_kind", self.attention_kind, ATTENTION_KINDS)):
            if value not in allowed:
                out.append(f"{name} {value!r} (expected one of {', '.join(allowed)})")
        if self.qk_norm_scope == "projection" and self.fused_qkv is not None:
            out.append("qk_norm_scope 'projection' with a fused q/k/v projection (expected separate projections)")
        if self.attention_kind == "latent" and self.positional != "rope_decoupled":
            out.append(f"attention_kind 'latent' with positional {self.positional!r} (expected rope_decoupled)")
        return out + (self.moe.problems() if self.moe is not None else [])


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


def layer_windows(spec: DecoderSpec, config, n_layers: int) -> list[int | None]:
    """The sliding-window size of each layer (None = full attention), as the family's modeling file decides it.

    A window ``w`` lets query ``i`` see keys ``j`` with ``i - w < j <= i`` (Hugging Face's sliding-window overlay).
    """
    window = getattr(config, "sliding_window", None)
    if spec.sliding_window == "none" or window is None:
        return [None] * n_layers
    if spec.sliding_window == "all_layers":
        return [int(window)] * n_layers
    types = list(getattr(config, "layer_types", None) or ["full_attention"] * n_layers)
    return [int(window) if kind == "sliding_attention" else None for kind in types[:n_layers]]


def check_layer_types(config) -> str | None:
    """Refusal reason for ``layer_types`` the twin cannot reproduce (a :attr:`DecoderSpec.checks` entry)."""
    types = getattr(config, "layer_types", None) or []
    other = sorted(set(types) - {"full_attention", "sliding_attention"})
    if other:
        return f"layer types {', '.join(other)} are not supported (only full_attention and sliding_attention)"
    if "sliding_attention" in types and getattr(config, "sliding_window", None) is None:
        return "layer_types has sliding_attention layers but config.sliding_window is None"
    return None


def check_causal(config) -> str | None:
    """Refusal reason for a decoder configured with bidirectional attention (embedding variants)."""
    if getattr(config, "use_bidirectional_attention", False):
        return "use_bidirectional_attention=True (an embedding model) is not supported; load a causal checkpoint"
    return None


def _norm_eps(module, spec: DecoderSpec) -> float:
    if spec.norm_eps is not None:
        return spec.norm_eps
    eps = getattr(module, "variance_epsilon", None)
    return float(eps if eps is not None else module.eps)


def _resolve(obj, dotted: str):
    return reduce(getattr, dotted.split("."), obj)


def _config_value(config, name: str | None):
    return None if name is None else getattr(config, name, None)


@dataclass
class TwinOutput:
    """What one LRP-aware forward produces.

    ``logits``: ``[B, C]`` classifier logits (pooled at the last non-pad token) or next-token logits at the last
    non-pad position for a causal LM. ``embeds``: the ``[B, T, D]`` input-embedding leaf (semantic sink).
    ``cos``/``sin``: one leaf per layer (``[B, T, rotary_dim]``; ``rotary_dim < head_dim`` for partial rotary) when
    positional sinks are on, else empty lists. ``all_logits``: ``[B, T, V]`` only when requested (parity tests).
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
    #: word embeddings ``[B, T, D]`` to run from instead of looking up ``input_ids`` (an attributor's perturbed or
    #: interpolated input, :func:`palrp_bench.attributors.base.forward_from`); None = the lookup (the semantic sink)
    embeds: torch.Tensor | None = None


@register_twin
class DecoderTwin(Twin):
    """LRP-aware forward of a Hugging Face decoder covered by a :class:`DecoderSpec` (module docstring)."""

    modality = "tokens"
    starting_relevance = "logit"
    default_composite = "attnlrp"
    #: the stabilisers of the official NLP code (``stabilizers="official"``), placed the same way in every decoder
    #: family; ``protocol=official`` defaults to them where the official code ran the family
    #: (:attr:`official_code_ran`)
    official_stabilizers = OFFICIAL_NLP
    #: takes ``checkpoint="layers"`` (:mod:`palrp_bench.lrp.recompute`)
    checkpointing = True

    @classmethod
    def family(cls) -> str:
        discover()
        return ("decoders (" + ", ".join(sorted(DECODER_SPECS)) + "; *ForCausalLM, *ForSequenceClassification, "
                "text-only *ForConditionalGeneration)")

    @classmethod
    def positional_kind_for(cls, model_type: str) -> str | None:
        """The positional kind of the spec covering ``model_type`` (registry protocol), or None."""
        discover()
        return next((spec.positional for spec in DECODER_SPECS.values() if model_type in spec.model_types), None)

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
        self._wrap(model, spec, head)

    def _wrap(self, model, spec: DecoderSpec, head: str) -> None:
        """Wrap ``model``'s language model as ``spec`` reads it, with a ``head`` of :data:`HEADS` (refusals in one
        line)."""
        unsupported = spec.problems()
        if unsupported:
            raise UnsupportedModelError(f"decoder spec {spec.family}: {', '.join(unsupported)} not implemented",
                                        "fix the spec's options (palrp_bench/models/decoder.py lists them)")
        config = model.config.get_text_config()
        for check in spec.checks:
            reason = check(config)
            if reason:
                raise UnsupportedModelError(f"{type(model).__name__}: {reason}",
                                            "use a configuration the twin reproduces (see docs/engine.md)")
        self.spec = spec
        self.model = model
        self.config = config
        self.is_classifier = head == "classifier"
        base = _resolve(model, spec.backbone)
        self.embed_tokens = getattr(base, spec.embed_tokens)
        self.layers = getattr(base, spec.layers)
        self.final_norm = getattr(base, spec.final_norm)
        self.rotary = getattr(base, spec.rotary)
        self.head = getattr(model, spec.classifier_head if self.is_classifier else spec.lm_head)
        self.positional = get_positional(spec.positional)
        self.windows = layer_windows(spec, config, len(self.layers))
        self.layer_types = (list(config.layer_types)[:len(self.layers)] if spec.rope_tables == "per_layer_type"
                            else [None] * len(self.layers))
        self.attention_softcap = _config_value(config, spec.attention_softcap)
        # only a *ForCausalLM head caps its logits (classifiers and the multimodal Gemma 3 head do not)
        self.final_softcap = (_config_value(config, spec.final_softcap)
                              if type(model).__name__.endswith("ForCausalLM") else None)
        self.parallel_residual = bool(_config_value(config, spec.parallel_residual))
        self.rope_interleave = bool(_config_value(config, spec.rope_interleave))
        if spec.moe is not None:
            for layer in self.layers:
                block = getattr(layer, spec.mlp_block)
                reason = spec.moe.refusal(block) if spec.moe.is_sparse(block) else None
                if reason:
                    raise UnsupportedModelError(f"{type(model).__name__}: {reason}",
                                                "use a configuration the twin reproduces (see docs/engine.md)")
        keep_4bit_differentiable(model)

    # ------------------------------------------------------------------ helpers
    @property
    def official_code_ran(self) -> bool:
        """Whether the official code ran this family (:attr:`DecoderSpec.official_code_ran`)."""
        return self.spec.official_code_ran

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Input-embedding leaf: the semantic sink (:func:`~palrp_bench.lrp.attribution.embedding_sink`)."""
        return embedding_sink(self.embed_tokens, input_ids)

    def embed_inputs(self, inputs) -> torch.Tensor:
        """The embeddings a forward starts from: ``inputs.embeds`` when given, else the semantic-sink leaf of
        ``inputs.input_ids``."""
        return inputs.embeds if inputs.embeds is not None else self.embed(inputs.input_ids)

    def position_ids(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Positions counted over real tokens only, so left padding does not shift them (batch invariance)."""
        return real_token_positions(attention_mask)

    def last_index(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Index of the token whose output is explained: the last non-pad position.

        With an attention mask: the last position where the mask is 1 (works for left and right padding).
        Without one, a classifier pools like Hugging Face (last token that is not ``pad_token_id``) and a causal
        LM explains the last position.
        """
        return last_real_index(input_ids, attention_mask, pad_token_id=getattr(self.config, "pad_token_id", None),
                               pool_by_pad=self.is_classifier)

    # ------------------------------------------------------------------ explanation protocol
    def prepare(self, input_ids, attention_mask=None) -> DecoderInputs:
        """Check shapes, lengths and ids; move to the model's device (one-line errors for bad input). ``input_ids``
        ``[B, T]`` (or ``[T]``), or a tokenizer's output mapping with ``input_ids`` and optionally
        ``attention_mask`` (an all-zero ``token_type_ids`` is ignored: :func:`~.token_inputs.model_inputs`)."""
        found = model_inputs(input_ids, attention_mask, takes=("input_ids", "attention_mask"),
                             model=type(self.model).__name__, zero_token_types=True)
        input_ids, attention_mask = found["input_ids"], found["attention_mask"]
        input_ids = token_batch(input_ids, vocab_size=self.embed_tokens.num_embeddings,
                                max_positions=getattr(self.config, "max_position_embeddings", None), device=self.device)
        attention_mask = attention_mask_of(attention_mask, input_ids)
        return DecoderInputs(input_ids, attention_mask, self.last_index(input_ids, attention_mask))

    def run(self, inputs: DecoderInputs, composite: Composite, *, positional_sinks: bool, causal: bool = True,
            attention: str = "sdpa", stabilizers: Stabilizers = NONE, checkpoint: str = "none") -> TwinOutput:
        """The LRP-aware forward of :func:`palrp_bench.lrp.attribution.attribute` (fresh embedding leaf, or
        ``inputs.embeds``)."""
        return self.forward(self.embed_inputs(inputs), inputs.attention_mask, inputs.last_index, composite,
                            positional_sinks=positional_sinks, causal=causal, attention=attention,
                            stabilizers=stabilizers, checkpoint=checkpoint)

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
                position_ids: torch.Tensor | None = None, return_all_logits: bool = False,
                stabilizers: Stabilizers = NONE, checkpoint: str = "none",
                image_groups: torch.Tensor | None = None) -> TwinOutput:
        """One LRP-aware forward from the embedding leaf to the logits at ``last_index``.

        ``causal=False`` reproduces the official code's defect for ARC/Wikipedia (docs/protocol.md section 2:
        no causal mask reached the attention; a sliding window then becomes the symmetric band ``|i - j| < w``).
        ``attention="eager"`` materialises the attention weights (same relevance; required by ``recorder``).
        ``stabilizers``: epsilon-rule stabilisers (module docstring); the forward values are the same for any.
        ``checkpoint="layers"``: each layer recomputed in the backward (:mod:`palrp_bench.lrp.recompute`); the head
        reads the explained positions only, so no ``[T, vocab]`` tensor exists (unless ``return_all_logits``).
        ``position_ids``: ``[B, T]``, or ``[3, B, T]`` for M-RoPE (the rotary module reads them); None = counted over
        real tokens. ``image_groups``: ``[B, T]`` long, the image each token belongs to (-1: none); the tokens of one
        image see each other whatever their order (Gemma 3's image blocks; causal attention otherwise).
        """
        stab = stabilizers
        b, t, _ = embeds.shape
        if attention_mask is None:
            attention_mask = torch.ones(b, t, dtype=torch.long, device=embeds.device)
        if position_ids is None:
            position_ids = self.position_ids(attention_mask)
        masks = {window: _attention_mask(attention_mask, window, causal, image_groups) for window in set(self.windows)}
        if image_groups is not None and causal:
            causal = False  # the masks hold the causal constraint with the image blocks
        with torch.no_grad():
            if self.spec.rope_tables == "per_layer_type":
                tables = {kind: self.rotary(embeds, position_ids, kind) for kind in set(self.layer_types)}
            else:
                tables = {None: self.rotary(embeds, position_ids)}
        cos_leaves, sin_leaves = [], []
        x = embeds
        for index, layer in enumerate(self.layers):
            c, s = self.positional.layer_sinks(*tables[self.layer_types[index]], positional_sinks)
            if positional_sinks:
                cos_leaves.append(c)
                sin_leaves.append(s)
            x = recompute.layer(self._layer, layer, x, c, s, masks[self.windows[index]], composite, causal,
                                attention, recorder, stab, checkpoint=checkpoint, recorder=recorder)
        hidden = x[torch.arange(b, device=x.device), last_index]
        logits = self._logits(hidden, composite, stab)
        all_logits = self._logits(x, composite, stab) if return_all_logits else None
        return TwinOutput(logits, embeds, cos_leaves, sin_leaves, last_index, all_logits)

    def _logits(self, hidden: torch.Tensor, composite: Composite, stab: Stabilizers) -> torch.Tensor:
        normed = self._norm(self.final_norm, hidden, composite, stab.final_norm)
        logits = rules.stabilize(self.head(normed), stab.linear)
        if self.final_softcap is not None:
            logits = rules.softcap(logits, float(self.final_softcap), composite.softcap)
        return logits

    def _norm(self, module, x: torch.Tensor, composite: Composite, eps: float = 0.0) -> torch.Tensor:
        """The spec's norm under ``composite.norm``; ``eps`` stabilises its output (0 = exact)."""
        spec = self.spec
        if spec.norm == "layer":
            y = rules.layer_norm(x, module.weight, module.bias, _norm_eps(module, spec), composite.norm)
        else:
            y = rules.rms_norm(x, module.weight, _norm_eps(module, spec), composite.norm, offset=spec.norm_offset,
                               weight_before_cast=spec.norm_weight_before_cast)
        return rules.stabilize(y, eps)

    def _qkv(self, attn, h: torch.Tensor, hd: int, composite: Composite, stab: Stabilizers):
        """Queries ``[B, H, T, d]``, keys and values ``[B, Hkv, T, d]`` from the attention input (norms over the whole
        projection already applied: ``qk_norm_scope="projection"``)."""
        spec = self.spec
        b, t, _ = h.shape

        def linear(name):
            return rules.stabilize(getattr(attn, name)(h), stab.linear)

        if spec.fused_qkv is None:
            q, k = linear(spec.q_proj), linear(spec.k_proj)
            if spec.qk_norm is not None and spec.qk_norm_scope == "projection":
                q = self._norm(getattr(attn, spec.qk_norm[0]), q, composite, stab.norm)
                k = self._norm(getattr(attn, spec.qk_norm[1]), k, composite, stab.norm)
            q = q.view(b, t, -1, hd).transpose(1, 2)
            k = k.view(b, t, -1, hd).transpose(1, 2)
            v = linear(spec.v_proj).view(b, t, -1, hd).transpose(1, 2)
            return q, k, v
        fused = linear(spec.fused_qkv)
        if spec.qkv_layout == "per_head":  # GPT-NeoX: [q_h | k_h | v_h] per head
            return fused.view(b, t, -1, 3 * hd).transpose(1, 2).chunk(3, dim=-1)
        n_q = self.config.num_attention_heads * hd
        n_kv = self.config.num_key_value_heads * hd
        q, k, v = fused[..., :n_q], fused[..., n_q:n_q + n_kv], fused[..., n_q + n_kv:]
        return tuple(y.view(b, t, -1, hd).transpose(1, 2) for y in (q, k, v))

    def _attention(self, layer, h, cos, sin, mask, composite: Composite, causal, attention, recorder,
                   stab: Stabilizers):
        spec = self.spec
        attn = getattr(layer, spec.attention)
        b, t, _ = h.shape
        if spec.attention_kind == "latent":
            q, k, v = latent_qkv(attn, h, cos, sin, self.config, composite, stab,
                                 lambda module, x: self._norm(module, x, composite, stab.norm), self.rope_interleave)
        else:
            q, k, v = self._qkv(attn, h, getattr(attn, spec.head_dim_attr), composite, stab)
            if spec.qk_norm is not None and spec.qk_norm_scope == "head":
                q = self._norm(getattr(attn, spec.qk_norm[0]), q, composite, stab.norm)
                k = self._norm(getattr(attn, spec.qk_norm[1]), k, composite, stab.norm)
            q = self.positional.apply(q, cos, sin, composite.product, eps=stab.add)
            k = self.positional.apply(k, cos, sin, composite.product, eps=stab.add)
        eager = attention == "eager"  # the score stabilisers need the materialised scores (lrp/stabilizers.py)
        o = rules.attention(q, k, v, mask=mask, causal=causal, scale=attn.scaling,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder,
                            qk_eps=stab.qk if eager else 0.0, mask_eps=stab.add if eager else 0.0, av_eps=stab.av,
                            score_softcap=self.attention_softcap, softcap_rule=composite.softcap)
        merged = o.transpose(1, 2).reshape(b, t, -1)
        out = rules.stabilize(rules.output_projection(merged, getattr(attn, spec.o_proj)), stab.linear)
        if spec.attention_out_norm is not None:
            out = self._norm(getattr(layer, spec.attention_out_norm), out, composite, stab.norm)
        return out

    def _mlp(self, layer, h, composite: Composite, stab: Stabilizers,
             recorder: rules.AttentionRecorder | None = None):
        """The layer's MLP branch: a sparse mixture-of-experts block (:func:`~palrp_bench.models.moe.moe_block`)
        or the dense MLP, then the sandwich norm where the family has one."""
        spec = self.spec
        block = getattr(layer, spec.mlp_block)
        if spec.moe is not None and spec.moe.is_sparse(block):
            out = moe_block(block, h, spec.moe, self.config, composite, stab,
                            lambda mlp, x: self._dense_mlp(mlp, x, composite, stab), recorder)
        else:
            out = self._dense_mlp(block, h, composite, stab)
        if spec.mlp_out_norm is not None:
            out = self._norm(getattr(layer, spec.mlp_out_norm), out, composite, stab.norm)
        return out

    def _dense_mlp(self, mlp, h, composite: Composite, stab: Stabilizers):
        """A dense MLP module of the spec's kind (``gated`` or ``plain``) applied to ``h``."""
        spec = self.spec
        act = getattr(mlp, spec.activation)

        def linear(name, x):
            return rules.stabilize(getattr(mlp, name)(x), stab.linear)

        if spec.mlp == "plain":
            return linear(spec.down_proj, rules.activation(linear(spec.up_proj, h), act, composite.ungated_activation))
        if spec.fused_gate_up is not None:
            gate, up = linear(spec.fused_gate_up, h).chunk(2, dim=-1)
        else:
            gate, up = linear(spec.gate_proj, h), None
        gate = rules.activation(gate, act, composite.activation)
        if up is None:
            up = linear(spec.up_proj, h)
        return linear(spec.down_proj, rules.product(gate, up, rule=composite.product))

    def _layer(self, layer, x, cos, sin, mask, composite: Composite, causal, attention, recorder,
               stab: Stabilizers = NONE):
        """One decoder layer; everything after the attention is position-wise (:func:`recompute.tokenwise`)."""
        spec = self.spec
        h = self._norm(getattr(layer, spec.attention_norm), x, composite, stab.norm)
        a = self._attention(layer, h, cos, sin, mask, composite, causal, attention, recorder, stab)

        def mlp_branch(stream):
            return self._mlp(layer, self._norm(getattr(layer, spec.mlp_norm), stream, composite, stab.norm), composite,
                             stab, recorder)

        if self.parallel_residual:  # GPT-NeoX: both branches read the layer input (summed in its order)
            return recompute.tokenwise(lambda x, a: rules.stabilize(mlp_branch(x) + a + x, stab.add), x, a)
        x = rules.residual(x, a, stab.add)
        return recompute.tokenwise(lambda x: rules.residual(x, mlp_branch(x), stab.add), x)


def _attention_mask(attention_mask: torch.Tensor, window: int | None = None, causal: bool = True,
                    groups: torch.Tensor | None = None) -> torch.Tensor | None:
    """Boolean ``[B, 1, T, T]`` mask (True = attend), or None when nothing is padded and there is no window.

    ``groups`` (``[B, T]`` long, -1 outside any group): with ``causal``, the mask holds the causal constraint itself,
    widened so that the tokens of one group see each other (the library's ``OR(causal, blockwise)``, Gemma 3's images);
    a window still bounds the keys from below (``AND(sliding_window, OR(causal, blockwise))``).

    Key padding: every query row keeps its own position so fully padded rows (left padding) never produce NaN; pad
    rows never influence real tokens because their keys are masked. Sliding window ``w`` (Hugging Face's overlay):
    query ``i`` sees keys ``j > i - w`` (with the causal constraint ``j <= i`` added by the attention rule), or the
    symmetric band ``|i - j| < w`` when attention is not causal. Indices, not positions: with contiguous padding
    the two differ by a constant per sample among real tokens.
    """
    t = attention_mask.shape[1]
    mask = key_padding_mask(attention_mask)
    if groups is not None and causal:
        i = torch.arange(t, device=attention_mask.device)
        same = (groups[:, :, None] == groups[:, None, :]) & (groups[:, :, None] >= 0)
        visible = ((i[:, None] >= i[None, :])[None] | same)[:, None]
        mask = visible if mask is None else mask & visible
    if window is not None:
        i = torch.arange(t, device=attention_mask.device)
        offset = i[:, None] - i[None, :]
        band = (offset < window) if causal else (offset.abs() < window)
        band = band[None, None]
        mask = band if mask is None else mask & band
    return mask
