"""BLOOM twin: a decoder whose position enters every layer as an additive attention bias (ALiBi).

BLOOM embeds the tokens, normalises them (``word_embeddings_layernorm``), and runs pre-norm blocks with LayerNorm,
a fused ``query_key_value`` projection, GELU-tanh MLPs and biases; the score of query ``i`` and key ``j`` in head
``h`` is ``q_i k_j / sqrt(d) + m_h * j`` (positions counted from 0 over real tokens). The twin calls the model's own
linear modules and head and re-implements the wiring with the rules of :mod:`palrp_bench.lrp.rules`.

Positions: the ``alibi`` kind of :mod:`palrp_bench.lrp.positional`. The bias is written in its distance form
``m_h (j - i)`` (BLOOM's ``m_h j`` plus a row constant, which softmax ignores), as two extra query/key dimensions
per head whose position operands are per-layer sinks. Two rules (``alibi_rule=``, docs/positional.md "ALiBi"):
``paper`` (default: the conserving reading of the paper's Appendix B, all positional relevance on the keys) and
``relative_half`` (each bias term's relevance split evenly between its query and its key). The bias is added under
the epsilon rule, so the semantic relevance does not depend on the rule and positional relevance is read in every
pass. The ALiBi slopes are the library's (read off ``build_alibi_tensor``).

``Explanation.positional`` is ``[B, L, 1, T]`` (query and key sides summed per layer); ``extras`` hold
``alibi_query`` and ``alibi_key`` ``[B, L, T]`` apart.

Refused with one line: ``pretraining_tp > 1`` with ``slow_but_exact`` (the library slices the last matmuls).
"""
from __future__ import annotations

import torch

from ..lrp import recompute, rules
from ..lrp.attribution import Attribution
from ..lrp.composites import Composite
from ..lrp.positional import ALiBi, PositionalRelevance
from .loading import keep_4bit_differentiable
from .registry import register_twin
from .text_twin import TextForward, TextInputs, TextTwin
from .token_inputs import key_padding_mask

__all__ = ["BloomTwin"]


@register_twin
class BloomTwin(TextTwin):
    """BLOOM (``BloomForCausalLM``, ``BloomForSequenceClassification``; module docstring)."""

    model_types = ("bloom",)
    family_name = "bloom"
    positional = ALiBi()

    def _wire(self, model) -> None:
        cfg = model.config
        if getattr(cfg, "pretraining_tp", 1) > 1 and getattr(cfg, "slow_but_exact", False):
            self.refuse("pretraining_tp > 1 with slow_but_exact is not supported (set slow_but_exact=False)")
        base = model.transformer
        self.word_embeddings, self.embed_norm, self.layers, self.ln_f = base.word_embeddings, \
            base.word_embeddings_layernorm, base.h, base.ln_f
        self.num_heads = int(cfg.n_head)
        self.post_norm_residual = bool(cfg.apply_residual_connection_post_layernorm)
        self.head = model.score if self.is_classifier else model.lm_head
        keep_4bit_differentiable(model)

    @property
    def embedding_table(self):
        return self.word_embeddings

    def slopes(self) -> torch.Tensor:
        """The per-head ALiBi slopes ``m_h`` ``[H]`` as the library computes them (float32)."""
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor

        two = torch.ones(1, 2, dtype=torch.long, device=self.device)
        return build_alibi_tensor(two, self.num_heads, torch.float32)[:, 0, 1]

    def forward(self, inputs: TextInputs, explained_index: torch.Tensor, composite: Composite, *,
                positional_sinks: bool = True, causal: bool = True, attention: str = "sdpa", recorder=None,
                return_all_logits: bool = False, alibi_rule: str = "paper",
                positions: torch.Tensor | None = None, checkpoint: str = "none") -> TextForward:
        """One LRP-aware forward from the word-embedding leaf to the logits at ``explained_index``.

        ``alibi_rule``: ``paper`` or ``relative_half``. ``positions``: ``[B, T]`` the positions the bias uses
        (default: counted from 0 over real tokens, as BLOOM); shifting them all by a constant changes no logit and,
        under ``relative_half``, no relevance. ``checkpoint="layers"``: each block recomputed in the backward
        (:mod:`palrp_bench.lrp.recompute`; the layer's position sinks are created outside it)."""
        rule = self.positional.check_rule(alibi_rule)
        ids, mask = inputs.input_ids, inputs.mask
        b, t = ids.shape
        embeds = self.embed_inputs(inputs)
        if positions is None:
            positions = self.positional.positions(mask)
        slopes = self.slopes()
        attn_mask = key_padding_mask(mask)
        x = self.norm(self.embed_norm, embeds, composite)
        sinks: dict[str, list] = {}
        for layer in self.layers:
            layer_sinks = self.positional.layer_sinks(positions, self.num_heads, rule, positional_sinks, x.dtype)
            for name, leaf in layer_sinks.leaves().items():
                sinks.setdefault(name, []).append(leaf)
            x = recompute.layer(self.block, layer, x, layer_sinks, slopes, rule, attn_mask, composite, causal,
                                attention, recorder, checkpoint=checkpoint, recorder=recorder)
        hidden = x[torch.arange(b, device=x.device), explained_index]
        logits = self.head(self.norm(self.ln_f, hidden, composite))
        all_logits = self.head(self.norm(self.ln_f, x, composite)) if return_all_logits else None
        return TextForward(logits, embeds, explained_index, sinks, all_logits)

    def block(self, layer, x, layer_sinks, slopes, rule, mask, composite, causal, attention, recorder):
        attn = layer.self_attention
        b, t, _ = x.shape
        h = self.norm(layer.input_layernorm, x, composite)
        residual = h if self.post_norm_residual else x
        qkv = attn.query_key_value(h).view(b, t, self.num_heads, 3, attn.head_dim)
        q, k, v = (qkv[..., i, :].transpose(1, 2) for i in range(3))
        q, k, v = self.positional.augment(q, k, v, layer_sinks, slopes, attn.inv_norm_factor, rule,
                                          composite.attn_qk_share)
        o = rules.attention(q, k, v, mask=mask, causal=causal, scale=attn.inv_norm_factor,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder)
        o = o[..., :attn.head_dim].transpose(1, 2).reshape(b, t, -1)
        x = attn.dense(o) + residual
        mlp = layer.mlp

        def tail(x):  # position-wise (recompute.tokenwise)
            h = self.norm(layer.post_attention_layernorm, x, composite)
            residual = h if self.post_norm_residual else x
            return mlp.dense_4h_to_h(rules.activation(mlp.dense_h_to_4h(h), mlp.gelu_impl,
                                                      composite.ungated_activation)) + residual
        return recompute.tokenwise(tail, x)

    def positional_parts(self, inputs: TextInputs, attribution: Attribution, like: torch.Tensor
                         ) -> tuple[PositionalRelevance, dict]:
        b, t = inputs.input_ids.shape
        relevance, query, key = self.positional.reduce(attribution.relevance, len(self.layers), b, t, like)
        return relevance, {"alibi_query": query, "alibi_key": key}
