"""GPT-2 and OPT twins: decoders whose position enters as a learned absolute embedding added to the tokens.

Both are pre-norm decoders with LayerNorm, an ungated MLP (GPT-2: GELU-tanh, OPT: ReLU) and biases. The twin calls
the model's own modules (GPT-2's ``Conv1D`` projections, OPT's ``Linear`` ones, the LM head / ``score``) and
re-implements the wiring with the rules of :mod:`palrp_bench.lrp.rules`: LayerNorm with the standard deviation
constant, the activation under the identity rule, attention through :func:`palrp_bench.lrp.rules.attention`.

Positions (``learned_absolute`` kind of :mod:`palrp_bench.lrp.positional`, paper Eq. 5 as for DeiT): the rows
``P = wpe[position_ids]`` are one per-sample leaf, ``z = E + P`` under the epsilon rule, so ``R(P) = P * grad_z``;
a single sink, read in every pass (it changes no other relevance). Positions are counted over real tokens, so
left padding does not shift them (OPT counts the same way; GPT-2's library forward numbers padded positions too,
which only matters for left padding: pass ``position_ids`` to it to compare). OPT's table is read at
``position + 2`` (its offset).

Refused with one line: GPT-2 cross-attention (``add_cross_attention``); OPT layer drop in eval is a no-op, OPT
without a final LayerNorm after pre-norm layers (``_remove_final_layer_norm``) is handled, ``project_in`` /
``project_out`` (OPT-350m) are plain linear maps.
"""
from __future__ import annotations

import torch

from ..lrp import recompute, rules
from ..lrp.attribution import Attribution
from ..lrp.composites import Composite
from ..lrp.positional import LearnedAbsolute, PositionalRelevance
from .loading import keep_4bit_differentiable
from .registry import register_twin
from .text_twin import TextForward, TextInputs, TextTwin
from .token_inputs import key_padding_mask

__all__ = ["Gpt2Twin", "OptTwin"]


class LearnedPositionDecoder(TextTwin):
    """What GPT-2 and OPT share: ``E + P`` with one learned position sink, pre-norm blocks, the head at the
    explained position. Subclasses read their modules in ``_wire`` and say how a block computes."""

    positional = LearnedAbsolute()
    position_offset = 0

    def position_table(self) -> torch.Tensor:
        raise NotImplementedError

    def project_in(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def final(self, x: torch.Tensor, composite: Composite) -> torch.Tensor:
        """Final norm (and projection) before the head."""
        raise NotImplementedError

    def block(self, layer, x, mask, composite, causal, attention, recorder) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, inputs: TextInputs, explained_index: torch.Tensor, composite: Composite, *,
                positional_sinks: bool = True, causal: bool = True, attention: str = "sdpa", recorder=None,
                return_all_logits: bool = False, checkpoint: str = "none") -> TextForward:
        """One LRP-aware forward from the word-embedding leaf to the logits at ``explained_index``.

        ``causal=False`` reproduces the official code's non-causal runs (docs/protocol.md section 2).
        ``attention="eager"`` materialises the attention weights (same relevance; needed by ``recorder``).
        ``checkpoint="layers"``: each block recomputed in the backward (:mod:`palrp_bench.lrp.recompute`)."""
        ids, mask = inputs.input_ids, inputs.mask
        b = ids.shape[0]
        embeds = self.embed_inputs(inputs)
        pos = self.positional.rows(self.position_table(), self.count_positions(mask) + self.position_offset)
        x = self.project_in(embeds) + pos
        attn_mask = key_padding_mask(mask)
        for layer in self.layers:
            x = recompute.layer(self.block, layer, x, attn_mask, composite, causal, attention, recorder,
                                checkpoint=checkpoint, recorder=recorder)
        hidden = x[torch.arange(b, device=x.device), explained_index]
        logits = self.head(self.final(hidden, composite))
        all_logits = self.head(self.final(x, composite)) if return_all_logits else None
        return TextForward(logits, embeds, explained_index, {"positions": pos}, all_logits)

    def positional_parts(self, inputs: TextInputs, attribution: Attribution, like: torch.Tensor
                         ) -> tuple[PositionalRelevance, dict]:
        return self.positional.token_relevance(attribution.relevance["positions"]), {}

    @staticmethod
    def attend(q, k, v, mask, composite: Composite, causal: bool, scale: float, attention: str, recorder):
        """Multi-head attention ``[B, H, T, d]`` -> ``[B, T, H * d]`` under the composite's shares."""
        o = rules.attention(q, k, v, mask=mask, causal=causal, scale=scale,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder)
        b, h, t, d = o.shape
        return o.transpose(1, 2).reshape(b, t, h * d)


@register_twin
class Gpt2Twin(LearnedPositionDecoder):
    """GPT-2 (``GPT2LMHeadModel``, ``GPT2ForSequenceClassification``; module docstring)."""

    model_types = ("gpt2",)
    family_name = "gpt2"
    library_embeds_token_types = True  # GPT2Model adds wte(token_type_ids)

    def _wire(self, model) -> None:
        cfg = model.config
        if getattr(cfg, "add_cross_attention", False):
            self.refuse("cross-attention (add_cross_attention) is not supported")
        base = model.transformer
        self.wte, self.wpe, self.layers, self.ln_f = base.wte, base.wpe, base.h, base.ln_f
        self.head = model.score if self.is_classifier else model.lm_head
        keep_4bit_differentiable(model)

    @property
    def embedding_table(self):
        return self.wte

    @property
    def max_positions(self) -> int:
        return self.wpe.num_embeddings

    def position_table(self) -> torch.Tensor:
        return self.wpe.weight

    def final(self, x, composite):
        return self.norm(self.ln_f, x, composite)

    def block(self, layer, x, mask, composite, causal, attention, recorder):
        attn = layer.attn
        b, t, _ = x.shape
        h = self.norm(layer.ln_1, x, composite)
        q, k, v = (s.view(b, t, -1, attn.head_dim).transpose(1, 2)
                   for s in attn.c_attn(h).split(attn.split_size, dim=2))
        o = self.attend(q, k, v, mask, composite, causal, attn.scaling, attention, recorder)
        x = rules.residual(x, rules.output_projection(o, attn.c_proj))
        mlp = layer.mlp

        def tail(x):  # position-wise (recompute.tokenwise)
            h = self.norm(layer.ln_2, x, composite)
            return rules.residual(x, mlp.c_proj(rules.activation(mlp.c_fc(h), mlp.act, composite.ungated_activation)))
        return recompute.tokenwise(tail, x)


@register_twin
class OptTwin(LearnedPositionDecoder):
    """OPT (``OPTForCausalLM``, ``OPTForSequenceClassification``; module docstring). Position rows are read at
    ``position + 2`` (OPT's offset); pre-norm and post-norm layers (``do_layer_norm_before``) both work."""

    model_types = ("opt",)
    family_name = "opt"
    position_offset = 2

    def _wire(self, model) -> None:
        decoder = model.model.decoder
        self.embed_tokens, self.embed_positions, self.layers = decoder.embed_tokens, decoder.embed_positions, \
            decoder.layers
        self.final_layer_norm, self.proj_in, self.proj_out = decoder.final_layer_norm, decoder.project_in, \
            decoder.project_out
        self.pre_norm = bool(model.config.do_layer_norm_before)
        self.head = model.score if self.is_classifier else model.lm_head
        keep_4bit_differentiable(model)

    @property
    def embedding_table(self):
        return self.embed_tokens

    @property
    def max_positions(self) -> int:
        return self.embed_positions.num_embeddings - self.position_offset

    def position_table(self) -> torch.Tensor:
        return self.embed_positions.weight

    def project_in(self, x):
        return x if self.proj_in is None else self.proj_in(x)

    def final(self, x, composite):
        if self.final_layer_norm is not None:
            x = self.norm(self.final_layer_norm, x, composite)
        return x if self.proj_out is None else self.proj_out(x)

    def block(self, layer, x, mask, composite, causal, attention, recorder):
        attn = layer.self_attn
        b, t, _ = x.shape
        h = self.norm(layer.self_attn_layer_norm, x, composite) if self.pre_norm else x
        q, k, v = (proj(h).view(b, t, -1, attn.head_dim).transpose(1, 2)
                   for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        o = self.attend(q, k, v, mask, composite, causal, attn.scaling, attention, recorder)
        x = rules.residual(x, rules.output_projection(o, attn.out_proj))
        if not self.pre_norm:
            x = self.norm(layer.self_attn_layer_norm, x, composite)

        def tail(x):  # position-wise (recompute.tokenwise)
            h = self.norm(layer.final_layer_norm, x, composite) if self.pre_norm else x
            x = rules.residual(x, layer.fc2(rules.activation(layer.fc1(h), layer.activation_fn,
                                                             composite.ungated_activation)))
            return x if self.pre_norm else self.norm(layer.final_layer_norm, x, composite)
        return recompute.tokenwise(tail, x)
