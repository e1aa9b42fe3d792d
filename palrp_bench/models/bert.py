"""BERT and RoBERTa twins: bidirectional post-norm encoders with word + token-type + position embeddings.

The embeddings are summed and normalised (``E + T + P``, then LayerNorm); every block is post-norm
(``LN(x + attention(x))``, ``LN(h + MLP(h))``) with GELU and biases. The twin calls the model's own linear modules
and heads and re-implements the wiring with the rules of :mod:`palrp_bench.lrp.rules`: LayerNorm with the standard
deviation constant, GELU and the pooler's tanh under the identity rule, bidirectional attention through
:func:`palrp_bench.lrp.rules.attention` (keys of padding hidden).

Three sinks, one per embedding table, each a per-sample leaf of the rows used, added under the epsilon rule
(paper Eq. 5): the word embeddings are the semantic sink, the position embeddings the positional sink (the
``learned_absolute`` kind of :mod:`palrp_bench.lrp.positional`, a single sink), the token-type embeddings a third
one reported in ``extras["token_type"]`` ``[B, T]`` (neither semantic nor positional, so the aggregations do not
use it). Positions are counted over real tokens (RoBERTa: from ``padding_idx + 1``, as the library does).

Heads and the explained position: ``*ForSequenceClassification`` pools the first token ([CLS] / ``<s>``):
BERT through its pooler (dense + tanh) and classifier, RoBERTa through its classification head (dense + tanh +
out_proj); ``*ForMaskedLM`` explains the vocabulary logits at ``position=`` (or the first ``mask_token_id``
token; :meth:`~palrp_bench.models.text_twin.TextTwin.resolve_position`): BERT's prediction head (dense, GELU,
LayerNorm, decoder) or RoBERTa's ``lm_head``. Token types come from a tokenizer output mapping passed as inputs
(default: all 0).

Refused with one line: decoder configurations (``is_decoder``, cross-attention) and position embeddings other
than ``absolute``.
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

__all__ = ["BertTwin", "RobertaTwin"]


class EncoderTwin(TextTwin):
    """What BERT and RoBERTa share (module docstring); subclasses name the backbone and the heads."""

    positional = LearnedAbsolute()
    classifier_pooling = "first"
    heads = ("classifier", "masked_lm")
    backbone_name = ""

    def _wire(self, model) -> None:
        cfg = model.config
        if getattr(cfg, "is_decoder", False) or getattr(cfg, "add_cross_attention", False):
            self.refuse("decoder configurations (is_decoder / add_cross_attention) are not supported")
        if getattr(cfg, "position_embedding_type", "absolute") not in (None, "absolute"):
            self.refuse(f"position_embedding_type={cfg.position_embedding_type!r} is not supported (absolute only)")
        base = getattr(model, self.backbone_name)
        emb = base.embeddings
        self.word_embeddings, self.position_embeddings, self.type_embeddings, self.embed_norm = \
            emb.word_embeddings, emb.position_embeddings, emb.token_type_embeddings, emb.LayerNorm
        self.layers = base.encoder.layer
        self._wire_heads(model, base)
        keep_4bit_differentiable(model)

    def _wire_heads(self, model, base) -> None:
        raise NotImplementedError

    def head_logits(self, hidden: torch.Tensor, composite: Composite) -> torch.Tensor:
        raise NotImplementedError

    @property
    def embedding_table(self):
        return self.word_embeddings

    @property
    def type_vocab_size(self) -> int:
        return self.type_embeddings.num_embeddings

    @property
    def position_start(self) -> int:
        return 0

    @property
    def max_positions(self) -> int:
        return self.position_embeddings.num_embeddings - self.position_start

    def forward(self, inputs: TextInputs, explained_index: torch.Tensor, composite: Composite, *,
                positional_sinks: bool = True, causal: bool = False, attention: str = "sdpa", recorder=None,
                return_all_logits: bool = False, checkpoint: str = "none") -> TextForward:
        """One LRP-aware forward from the three embedding leaves to the logits at ``explained_index``. An encoder
        is bidirectional: ``causal`` is ignored (the task default ``causal=True`` concerns decoders only).
        ``checkpoint="layers"``: each block recomputed in the backward (:mod:`palrp_bench.lrp.recompute`)."""
        ids, mask = inputs.input_ids, inputs.mask
        b = ids.shape[0]
        types = inputs.token_type_ids if inputs.token_type_ids is not None else torch.zeros_like(ids)
        embeds = self.embed_inputs(inputs)
        pos = self.positional.rows(self.position_embeddings.weight, self.count_positions(mask) + self.position_start)
        token_type = LearnedAbsolute.rows(self.type_embeddings.weight, types)
        x = self.norm(self.embed_norm, embeds + token_type + pos, composite)
        attn_mask = key_padding_mask(mask)
        for layer in self.layers:
            x = recompute.layer(self.block, layer, x, attn_mask, composite, attention, recorder, checkpoint=checkpoint,
                                recorder=recorder)
        hidden = x[torch.arange(b, device=x.device), explained_index]
        logits = self.head_logits(hidden, composite)
        all_logits = self.head_logits(x, composite) if return_all_logits else None
        return TextForward(logits, embeds, explained_index, {"positions": pos, "token_type": token_type},
                           all_logits)

    def block(self, layer, x, mask, composite, attention, recorder):
        sa, b, t = layer.attention.self, x.shape[0], x.shape[1]
        q, k, v = (proj(x).view(b, t, -1, sa.attention_head_size).transpose(1, 2)
                   for proj in (sa.query, sa.key, sa.value))
        o = rules.attention(q, k, v, mask=mask, causal=False, scale=sa.scaling,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder)
        out = layer.attention.output
        x = self.norm(out.LayerNorm, rules.residual(x, rules.output_projection(o.transpose(1, 2).reshape(b, t, -1),
                                                                               out.dense)), composite)

        def tail(x):  # position-wise (recompute.tokenwise)
            h = rules.activation(layer.intermediate.dense(x), layer.intermediate.intermediate_act_fn,
                                 composite.ungated_activation)
            return self.norm(layer.output.LayerNorm, rules.residual(x, layer.output.dense(h)), composite)
        return recompute.tokenwise(tail, x)

    def positional_parts(self, inputs: TextInputs, attribution: Attribution, like: torch.Tensor
                         ) -> tuple[PositionalRelevance, dict]:
        r = attribution.relevance
        return self.positional.token_relevance(r["positions"]), {"token_type": r["token_type"].sum(-1)}


@register_twin
class BertTwin(EncoderTwin):
    """BERT (``BertForSequenceClassification``, ``BertForMaskedLM``; module docstring)."""

    model_types = ("bert",)
    family_name = "bert"
    backbone_name = "bert"

    def _wire_heads(self, model, base) -> None:
        if self.is_classifier:
            if base.pooler is None:
                self.refuse("a sequence classifier without a pooler")
            self.pooler, self.classifier = base.pooler, model.classifier
        else:
            self.predictions = model.cls.predictions

    def head_logits(self, hidden, composite):
        rule = composite.ungated_activation
        if self.is_classifier:
            pooled = rules.activation(self.pooler.dense(hidden), self.pooler.activation, rule)
            return self.classifier(pooled)
        tr = self.predictions.transform
        h = self.norm(tr.LayerNorm, rules.activation(tr.dense(hidden), tr.transform_act_fn, rule), composite)
        return self.predictions.decoder(h)


@register_twin
class RobertaTwin(EncoderTwin):
    """RoBERTa (``RobertaForSequenceClassification``, ``RobertaForMaskedLM``; module docstring). Positions start
    at ``padding_idx + 1``."""

    model_types = ("roberta",)
    family_name = "roberta"
    backbone_name = "roberta"

    def _wire_heads(self, model, base) -> None:
        self.classifier_head = model.classifier if self.is_classifier else None
        self.lm_head = None if self.is_classifier else model.lm_head

    @property
    def position_start(self) -> int:
        return int(self.config.pad_token_id) + 1

    def head_logits(self, hidden, composite):
        from transformers.activations import gelu

        rule = composite.ungated_activation
        if self.is_classifier:
            c = self.classifier_head
            return c.out_proj(rules.activation(c.dense(hidden), torch.tanh, rule))
        lm = self.lm_head
        return lm.decoder(self.norm(lm.layer_norm, rules.activation(lm.dense(hidden), gelu, rule), composite))
