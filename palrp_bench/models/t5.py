"""T5 twin: the encoder-decoder ``T5ForConditionalGeneration`` (the original T5, T5 v1.1, Flan-T5; docs/engine.md,
"T5").

The twin wraps the loaded model without touching it, calls its own linear modules (``q``, ``k``, ``v``, ``o``,
``wi`` / ``wi_0`` / ``wi_1``, ``wo``, ``lm_head``; bitsandbytes layers work unchanged) and its own
``compute_bias`` (the library's bucketing: bidirectional in the encoder, causal in the decoder), and re-implements
the wiring with the rules of :mod:`palrp_bench.lrp.rules`:

* T5LayerNorm (RMS, no mean, no bias) with the normaliser constant (identity rule), its statistics in float32 at
  least and its cast to a half-precision weight's dtype, as the library does;
* attention without ``1 / sqrt(d)`` scaling (the library's ``scaling = 1``) through
  :func:`palrp_bench.lrp.rules.attention` (fused SDPA by default): the encoder's and the decoder's self-attention
  add their stack's relative position bias, computed once by the first layer of the stack and used by every layer;
  the decoder's cross-attention has none (the library adds zeros there);
* the feed-forward block: gated (``act(wi_0 h) * wi_1 h``, gelu_new in v1.1 / Flan-T5; identity rule on the
  activation, uniform rule on the product) or not (``act(wi h)``, ReLU in the original T5), its input cast to
  ``wo``'s dtype where the library keeps ``wo`` in float32 (``_keep_in_fp32_modules``), so the residual stream of a
  bfloat16 checkpoint is float32 after the first block, as in the library;
* residual sums (epsilon rule), and before the head the rescale ``d_model ** -0.5`` of the original T5's tied
  embeddings (``config.scale_decoder_outputs``; a constant factor, relevance passes unchanged). Dropout is off
  (eval).

Relevance flows from the explained logit through the decoder (self- and cross-attention) into the encoder and the
decoder's own input tokens. Sinks: the encoder's token embeddings (``embeds``, the semantic sink of
``Explanation.semantic``), the decoder's (``decoder_embeds``), and the relative position bias of every layer of
each stack (:class:`~palrp_bench.lrp.positional.RelativeBias`: ``encoder_bias_query`` / ``encoder_bias_key`` and
``decoder_bias_query`` / ``decoder_bias_key``, lists per layer of ``[B, H, T]``).

Inputs (:meth:`T5Twin.prepare`): the encoder's ``input_ids`` / ``attention_mask`` and the decoder's
``decoder_input_ids`` (required: one-line error without them) / ``decoder_attention_mask``; the explained output is
the vocabulary logits at the last real decoder position. What :func:`palrp_bench.explain` returns is documented in
:meth:`T5Twin.split`. For the methods that are not one LRP pass (:mod:`palrp_bench.attributors`): the model input is
the encoder's token embeddings (``T5Inputs.embeds``; the decoder's stay the lookup of its ids), the attention calls
carry the ``site`` labels ``encoder``, ``decoder`` (the decoder's self-attention) and ``cross``
(:attr:`palrp_bench.lrp.rules.AttentionRecorder.sites`), in the order: every encoder layer, then per decoder layer
its self- then its cross-attention.

Refused with one line: float16 weights (T5 overflows in float16 and the library clamps infinite hidden states,
which the twin does not reproduce: use bfloat16 or float32) and a stack whose first layer has no relative
attention bias.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..errors import BadInputError
from ..lrp import recompute, rules
from ..lrp.attribution import Attribution, embedding_sink
from ..lrp.composites import Composite
from ..lrp.explanation import Explanation
from ..lrp.positional import PositionalRelevance, RelativeBias
from .loading import keep_4bit_differentiable
from .registry import register_twin
from .text_twin import TextForward, TextTwin
from .token_inputs import attention_mask_of, key_padding_mask, last_real_index, model_inputs, token_batch

__all__ = ["T5Twin", "T5Inputs", "T5Forward", "SITES"]

HALF = (torch.float16, torch.bfloat16)
#: the ``site`` labels of T5's attention calls (:func:`palrp_bench.lrp.rules.attention`)
SITES = ("encoder", "decoder", "cross")
#: sink-name prefixes of the two stacks' relative position bias
STACKS = ("encoder_bias", "decoder_bias")


@dataclass
class T5Inputs:
    """Validated inputs: the encoder's ``input_ids`` / ``attention_mask`` ``[B, Te]`` and the decoder's
    ``decoder_input_ids`` / ``decoder_attention_mask`` ``[B, Td]`` (masks None = no padding), the explained decoder
    position ``explained_index`` ``[B]``, and embeddings to run from instead of the lookups (``embeds``: the encoder's,
    an attributor's perturbed or interpolated input; ``decoder_embeds``: the decoder's)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    decoder_input_ids: torch.Tensor
    decoder_attention_mask: torch.Tensor | None
    explained_index: torch.Tensor
    embeds: torch.Tensor | None = None
    decoder_embeds: torch.Tensor | None = None

    @property
    def mask(self) -> torch.Tensor:
        return self.attention_mask if self.attention_mask is not None else torch.ones_like(self.input_ids)

    @property
    def decoder_mask(self) -> torch.Tensor:
        return (self.decoder_attention_mask if self.decoder_attention_mask is not None
                else torch.ones_like(self.decoder_input_ids))


@dataclass
class T5Forward(TextForward):
    """One LRP-aware forward (:class:`~palrp_bench.models.text_twin.TextForward`: ``logits`` ``[B, V]`` at the
    explained decoder position, the encoder's embedding leaf, the relative-bias sinks by name, lists per layer, every
    decoder position's logits ``[B, Td, V]`` when requested) with the decoder's embedding leaf ``decoder_embeds``."""

    decoder_embeds: torch.Tensor | None = None

    @property
    def sinks(self) -> dict:
        return {"embeds": self.embeds, "decoder_embeds": self.decoder_embeds, **self.other_sinks}


@register_twin
class T5Twin(TextTwin):
    """``T5ForConditionalGeneration`` (module docstring)."""

    model_types = ("t5",)
    family_name = "t5"
    heads = ("seq2seq",)
    positional = RelativeBias()
    #: explains a decoder logit from encoder and decoder inputs (``explain(..., decoder_input_ids=...)``)
    encoder_decoder = True
    #: the attention sites whose queries and keys are both encoder tokens (the tokens the scores are over)
    feature_attention_sites = ("encoder",)
    #: the attention sites whose keys are encoder tokens
    feature_key_sites = ("encoder", "cross")

    @classmethod
    def family(cls) -> str:
        return "t5 (T5ForConditionalGeneration: T5, T5 v1.1, Flan-T5)"

    def _wire(self, model) -> None:
        cfg = model.config
        if model.shared.weight.dtype == torch.float16:
            self.refuse("float16 is not supported (T5 overflows in float16 and the library clamps infinite hidden "
                        "states); load it in bfloat16 or float32")
        self.encoder, self.decoder, self.lm_head = model.encoder, model.decoder, model.lm_head
        for name, stack in (("encoder", self.encoder), ("decoder", self.decoder)):
            if not getattr(stack.block[0].layer[0].SelfAttention, "has_relative_attention_bias", False):
                self.refuse(f"the first {name} layer has no relative attention bias")
        self.num_heads, self.head_dim = int(cfg.num_heads), int(cfg.d_kv)
        scale = getattr(cfg, "scale_decoder_outputs", None)  # transformers 5: the original T5's tied-head rescale
        self.scale_outputs = bool(cfg.tie_word_embeddings if scale is None else scale)
        self.model_dim = int(cfg.d_model)
        keep_4bit_differentiable(model)

    @property
    def embedding_table(self):
        return self.encoder.embed_tokens

    @property
    def num_layers(self) -> tuple[int, int]:
        """Encoder and decoder layers."""
        return len(self.encoder.block), len(self.decoder.block)

    # ------------------------------------------------------------------ inputs
    def prepare(self, inputs, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None) -> T5Inputs:
        """Check the encoder and decoder inputs where the caller keeps them and move them to the model's device.

        ``inputs``: the encoder's ``input_ids`` ``[B, Te]`` (or ``[Te]``), or a mapping with ``input_ids`` and
        optionally ``attention_mask``, ``decoder_input_ids``, ``decoder_attention_mask``. ``decoder_input_ids``
        ``[B, Td]`` is required: the decoder start token (``config.decoder_start_token_id``) followed by the answer
        so far; the logit explained is the next token's at the last real decoder position."""
        found = model_inputs(inputs, attention_mask, model=type(self.model).__name__, zero_token_types=True,
                             takes=("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask"))
        inputs, attention_mask = found["input_ids"], found["attention_mask"]
        for name, given in (("decoder_input_ids", decoder_input_ids), ("decoder_attention_mask",
                                                                       decoder_attention_mask)):
            if found[name] is not None and given is not None:
                raise BadInputError(f"{name} was given twice: in the inputs mapping and as an argument",
                                    "pass it once")
        decoder_input_ids = found["decoder_input_ids"] if decoder_input_ids is None else decoder_input_ids
        decoder_attention_mask = (found["decoder_attention_mask"] if decoder_attention_mask is None
                                  else decoder_attention_mask)
        vocab = self.embedding_table.num_embeddings
        ids = token_batch(inputs, vocab_size=vocab, max_positions=None, device=self.device)
        mask = attention_mask_of(attention_mask, ids)
        if decoder_input_ids is None:
            start = getattr(self.config, "decoder_start_token_id", 0)
            raise BadInputError(f"{type(self.model).__name__} explains a decoder logit: decoder_input_ids is required",
                                f"pass decoder_input_ids, e.g. [[{start}]] per sample (the decoder start token: "
                                "explains the first answer token) or the start token and the answer so far")
        dec = token_batch(decoder_input_ids, vocab_size=vocab, max_positions=None, device=self.device,
                          name="decoder_input_ids")
        if dec.shape[0] != ids.shape[0]:
            raise BadInputError(f"decoder_input_ids has {dec.shape[0]} rows but input_ids has {ids.shape[0]}",
                                "pass one decoder sequence per input")
        dmask = attention_mask_of(decoder_attention_mask, dec, "decoder_attention_mask")
        index = last_real_index(dec, dmask, pad_token_id=None, pool_by_pad=False)
        return T5Inputs(ids, mask, dec, dmask, index)

    # ------------------------------------------------------------------ forward
    def run(self, inputs: T5Inputs, composite: Composite, *, positional_sinks: bool, attention: str = "sdpa",
            relative_bias_rule: str = "relative_half", causal: bool | None = None, checkpoint: str = "none",
            **options) -> T5Forward:
        """The LRP-aware forward of :func:`palrp_bench.lrp.attribution.attribute` (fresh sinks).

        ``attention``: ``sdpa`` or ``eager``; ``relative_bias_rule``: ``relative_half`` (default) or ``key``
        (docs/positional.md); ``causal`` is accepted and ignored (the encoder is bidirectional, the decoder causal,
        whatever a task says, as for BERT); ``checkpoint``: ``none`` or ``layers`` (:meth:`forward`)."""
        if options:
            raise BadInputError(f"{type(self.model).__name__} takes no option {', '.join(sorted(options))}",
                                "options of the t5 twin: attention, relative_bias_rule, checkpoint")
        if attention not in ("sdpa", "eager"):
            raise BadInputError(f"unknown attention implementation {attention!r}", "use sdpa or eager")
        return self.forward(inputs, composite, positional_sinks=positional_sinks, attention=attention,
                            relative_bias_rule=relative_bias_rule, checkpoint=checkpoint)

    def forward(self, inputs: T5Inputs, composite: Composite, *, positional_sinks: bool = True,
                attention: str = "sdpa", recorder=None, relative_bias_rule: str = "relative_half",
                return_all_logits: bool = False, checkpoint: str = "none") -> T5Forward:
        """One LRP-aware forward from the embedding leaves of both stacks to the logits at the explained decoder
        position (module docstring). ``attention="eager"`` materialises the weights (same relevance; needed by
        ``recorder``). ``checkpoint="layers"``: each block of both stacks recomputed in the backward
        (:mod:`palrp_bench.lrp.recompute`; the bias sinks are created outside the blocks). The stacks' ``[H, T,
        T]`` position bias is kept whole either way (docs/engine.md, "Long contexts")."""
        rule = self.positional.check_rule(relative_bias_rule)
        ids, dec = inputs.input_ids, inputs.decoder_input_ids
        b, te = ids.shape
        td = dec.shape[1]
        embeds = inputs.embeds if inputs.embeds is not None else embedding_sink(self.encoder.embed_tokens, ids)
        dembeds = (inputs.decoder_embeds if inputs.decoder_embeds is not None
                   else embedding_sink(self.decoder.embed_tokens, dec))
        sinks: dict[str, list] = {}
        options = dict(composite=composite, attention=attention, recorder=recorder)

        def layer_sinks(bias, stack, queries):
            s = self.positional.layer_sinks(b, self.num_heads, queries, queries, rule, positional_sinks,
                                            bias.dtype, bias.device)
            for name, leaf in s.leaves(stack).items():
                sinks.setdefault(name, []).append(leaf)
            return self.positional.factors(s, composite.product)

        enc_mask = key_padding_mask(inputs.mask)
        bias = self.stack_bias(self.encoder, te, enc_mask, causal=False)
        x = embeds

        def encoder_block(layer, x, bias, bias_sinks):
            x = self.self_attention(layer.layer[0], x, bias, bias_sinks, enc_mask, False, "encoder", **options)
            return self.feed_forward(layer.layer[-1], x, composite)

        for layer in self.encoder.block:
            x = recompute.layer(encoder_block, layer, x, bias, layer_sinks(bias, STACKS[0], te),
                                checkpoint=checkpoint, recorder=recorder)
        encoded = self.norm(self.encoder.final_layer_norm, x, composite)

        dec_mask = key_padding_mask(inputs.decoder_mask)
        bias = self.stack_bias(self.decoder, td, dec_mask, causal=True)
        cross_mask = None if inputs.attention_mask is None or bool(inputs.attention_mask.all()) \
            else inputs.attention_mask.bool()[:, None, None, :]
        y = dembeds

        def decoder_block(layer, y, encoded, bias, bias_sinks):
            y = self.self_attention(layer.layer[0], y, bias, bias_sinks, dec_mask, True, "decoder", **options)
            y = self.cross_attention(layer.layer[1], y, encoded, cross_mask, **options)
            return self.feed_forward(layer.layer[-1], y, composite)

        for layer in self.decoder.block:
            y = recompute.layer(decoder_block, layer, y, encoded, bias, layer_sinks(bias, STACKS[1], td),
                                checkpoint=checkpoint, recorder=recorder)
        h = self.norm(self.decoder.final_layer_norm, y, composite)
        index = inputs.explained_index
        logits = self.head(h[torch.arange(b, device=h.device), index])
        return T5Forward(logits, embeds, index, sinks, self.head(h) if return_all_logits else None,
                         decoder_embeds=dembeds)

    # ------------------------------------------------------------------ pieces
    def stack_bias(self, stack, length: int, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """The stack's relative position bias ``[1 or B, H, T, T]`` from its first layer's ``compute_bias`` (the
        library's buckets and table), with ``finfo.min`` where ``mask`` / ``causal`` hide a pair: built once per
        stack and used by every layer, as the library does (:func:`palrp_bench.lrp.rules.attention`, ``bias``)."""
        attn = stack.block[0].layer[0].SelfAttention
        device = attn.relative_attention_bias.weight.device
        with torch.no_grad():
            bias = attn.compute_bias(length, length, device=device)
            valid = mask
            if causal:
                tril = torch.ones(length, length, dtype=torch.bool, device=device).tril()
                valid = tril if valid is None else valid & tril
            if valid is not None:
                bias = torch.where(valid, bias, torch.finfo(bias.dtype).min)
        return bias

    def norm(self, module, x: torch.Tensor, composite: Composite) -> torch.Tensor:
        """T5LayerNorm under the composite's norm rule: float32 statistics at least, the normalised input cast to a
        half-precision weight's dtype before the gain (the library's order)."""
        w = module.weight
        out = w.dtype if w.dtype in HALF else torch.promote_types(x.dtype, torch.float32)
        return rules.rms_norm(x, w, module.variance_epsilon, composite.norm, output_dtype=out)

    def heads_of(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, -1, self.head_dim).transpose(1, 2)

    def attend(self, attn, q, k, v, mask, causal, composite, attention, recorder, bias=None, bias_sinks=None,
               site=None):
        """Heads ``[B, H, Tq, d]`` attended under the composite's shares, merged and projected by ``attn.o``."""
        o = rules.attention(q, k, v, mask=mask, causal=causal, scale=float(getattr(attn, "scaling", 1.0)),
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder,
                            bias=bias, bias_sinks=bias_sinks, site=site)
        b, _, t, _ = o.shape
        return rules.output_projection(o.transpose(1, 2).reshape(b, t, -1), attn.o)

    def self_attention(self, sub, x, bias, bias_sinks, mask, causal, site, *, composite, attention, recorder):
        """One self-attention sub-layer; ``bias`` the stack's, ``bias_sinks`` this layer's ones (query, key)."""
        attn = sub.SelfAttention
        h = self.norm(sub.layer_norm, x, composite)
        q, k, v = (self.heads_of(proj(h)) for proj in (attn.q, attn.k, attn.v))
        return rules.residual(x, self.attend(attn, q, k, v, mask, causal, composite, attention, recorder, bias,
                                             bias_sinks, site))

    def cross_attention(self, sub, y, encoded, mask, *, composite, attention, recorder):
        attn = sub.EncDecAttention
        h = self.norm(sub.layer_norm, y, composite)
        q, k, v = self.heads_of(attn.q(h)), self.heads_of(attn.k(encoded)), self.heads_of(attn.v(encoded))
        return rules.residual(y, self.attend(attn, q, k, v, mask, False, composite, attention, recorder,
                                             site="cross"))

    def feed_forward(self, sub, x, composite: Composite) -> torch.Tensor:
        """The feed-forward sub-layer with its residual sum: position-wise (:func:`recompute.tokenwise`), the last
        operation of a block."""
        ff = sub.DenseReluDense

        def tail(x):
            h = self.norm(sub.layer_norm, x, composite)
            if hasattr(ff, "wi_0"):  # T5DenseGatedActDense (v1.1, Flan-T5)
                gate = rules.activation(ff.wi_0(h), ff.act, composite.activation)
                z = rules.product(gate, ff.wi_1(h), rule=composite.product)
            else:                    # T5DenseActDense (the original T5)
                z = rules.activation(ff.wi(h), ff.act, composite.ungated_activation)
            w = ff.wo.weight
            if isinstance(w, torch.Tensor) and z.dtype != w.dtype and w.dtype != torch.int8:  # the library's cast
                z = z.to(w.dtype)
            return rules.residual(x, ff.wo(z))
        return recompute.tokenwise(tail, x)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.scale_outputs:  # the original T5's tied embeddings: a constant factor before the head
            hidden = hidden * (self.model_dim ** -0.5)
        return self.lm_head(hidden)

    # ------------------------------------------------------------------ what explain returns
    def summarize(self, inputs: T5Inputs, attribution: Attribution) -> dict:
        """The parts over the encoder tokens followed by the decoder tokens, ``[B, Te + Td]`` (positional
        ``[B, Le + Ld, 1, Te + Td]``, each stack's layers on its own tokens, zeros elsewhere), so that one token
        aggregation scores both on one scale; :meth:`split` then separates them."""
        r = attribution.relevance
        b, te = inputs.input_ids.shape
        td = inputs.decoder_input_ids.shape[1]
        le, ld = self.num_layers
        enc_sem, dec_sem = r["embeds"].sum(-1), r["decoder_embeds"].sum(-1)
        like = enc_sem
        enc_pos, enc_q, enc_k = self.positional.reduce(r, STACKS[0], le, b, te, like)
        dec_pos, dec_q, dec_k = self.positional.reduce(r, STACKS[1], ld, b, td, like)

        def blocks(enc: torch.Tensor, dec: torch.Tensor) -> torch.Tensor:      # [B, L, C, T] block diagonal
            top = torch.cat([enc, enc.new_zeros(*enc.shape[:-1], td)], -1)
            bottom = torch.cat([dec.new_zeros(*dec.shape[:-1], te), dec], -1)
            return torch.cat([top, bottom], 1)

        valid = torch.cat([inputs.mask.bool(), inputs.decoder_mask.bool()], -1)
        return {"semantic": torch.cat([enc_sem, dec_sem], -1),
                "semantic_relu": torch.cat([r["embeds"].clamp(min=0).sum(-1),
                                            r["decoder_embeds"].clamp(min=0).sum(-1)], -1),
                "positional": blocks(enc_pos.per_sink, dec_pos.per_sink),
                "positional_relu": blocks(enc_pos.per_sink_relu, dec_pos.per_sink_relu),
                "positional_shared_relu": torch.cat([enc_pos.shared_relu, dec_pos.shared_relu], -1),
                "valid": valid, "attention_mask": inputs.attention_mask,
                "extras": {"explained_index": attribution.forward.explained_index,
                           "decoder_attention_mask": inputs.decoder_attention_mask,
                           "relative_bias_query": enc_q, "relative_bias_key": enc_k,
                           "decoder_relative_bias_query": dec_q, "decoder_relative_bias_key": dec_k,
                           "encoder_tokens": te}}

    def split(self, e: Explanation) -> Explanation:
        """The explanation of :meth:`summarize`'s joint parts, split into the encoder's and the decoder's.

        * ``scores``, ``semantic`` ``[B, Te]``, ``positional`` ``[B, Le, 1, Te]``: the encoder tokens (what the
          perturbation protocols perturb); positional = the encoder self-attention's bias relevance, query and key
          sides summed per layer;
        * ``extras["decoder_scores"]``, ``["decoder_semantic"]`` ``[B, Td]``, ``["decoder_positional"]``
          ``[B, Ld, 1, Td]``: the decoder tokens, on the same scale as ``scores`` (one aggregation over both: PA-LRP
          divides both by the largest score of either);
        * ``extras["relative_bias_query"]`` / ``["relative_bias_key"]`` ``[B, Le, Te]`` and
          ``["decoder_relative_bias_query"]`` / ``["decoder_relative_bias_key"]`` ``[B, Ld, Td]``: the two sides
          apart; ``["semantic_relu"]``, ``["positional_relu"]``, ``["positional_shared_relu"]``,
          ``["semantic_term"]``, ``["positional_term"]`` of the encoder and their ``decoder_*`` twins (paper Eq. 11
          parts, the aggregation's per-token terms); ``["explained_index"]`` the explained decoder position,
          ``["decoder_attention_mask"]``.

        Accounting (float64, exact rules): ``logit = semantic.sum() + decoder_semantic.sum() + positional.sum() +
        decoder_positional.sum() + absorbed`` (the softmax rules' share; T5 has no biases)."""
        extras = dict(e.extras)
        te = extras.pop("encoder_tokens")
        le = self.num_layers[0]

        def enc(x):
            return x[..., :te]

        def dec(x):
            return x[..., te:]

        x = extras["semantic_relu"]
        extras["decoder_semantic_relu"], extras["semantic_relu"] = dec(x), enc(x)
        x = extras["positional_relu"]
        extras["decoder_positional_relu"], extras["positional_relu"] = dec(x[:, le:]), enc(x[:, :le])
        x = extras["positional_shared_relu"]
        extras["decoder_positional_shared_relu"], extras["positional_shared_relu"] = dec(x), enc(x)
        for name in ("semantic_term", "positional_term"):  # per token, over both stacks' tokens
            if name in extras:
                extras[f"decoder_{name}"], extras[name] = dec(extras[name]), enc(extras[name])
        extras.update(decoder_scores=dec(e.scores), decoder_semantic=dec(e.semantic),
                      decoder_positional=dec(e.positional[:, le:]))
        return replace(e, scores=enc(e.scores), semantic=enc(e.semantic), positional=enc(e.positional[:, :le]),
                       extras=extras)
