"""Positional encodings as relevance sinks: each kind declares its sinks, its rule and the identity it satisfies.

PA-LRP (paper Sec. 3-4; docs/protocol.md section 1) reads positional relevance off *sinks*: tensors the forward
uses that carry position only. Every kind here says

* ``sinks``: which tensors become leaves (and how many per forward: one, or one per layer = "multi-sink");
* ``rule``: how the encoding enters the forward and how relevance is split there (a forward-identical gradient
  modification, docs/design.md);
* ``identity``: the relation between relevances its rule guarantees, which the tests check;
* ``affects_semantic``: whether making the encoding a sink changes the relevance of anything else. For an added
  encoding (learned absolute) it does not; for RoPE the products split relevance between q/k and cos/sin, so the
  semantic relevance of PA-LRP differs from AttnLRP's, whose cos/sin are constants;
* ``read_always``: the sinks are read in every pass, also by methods whose scores do not use them: kinds that change
  no other relevance and cost nothing to read (learned absolute, ALiBi). T5's relative bias changes no other
  relevance either, but reading it needs the gradient at every layer's scores (docs/engine.md, "T5"), so only the
  methods that use positional relevance read it;
* ``reduce``: the per-token (per-patch) positional relevance from the sinks' elementwise relevance ``x * grad``.

A new kind (2D RoPE, ALiBi, sinusoidal) is one class registered with :func:`register_positional`; partial rotary
is part of :class:`RoPE` (the tables say how many dimensions rotate).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..errors import BadInputError
from . import rules

__all__ = ["PositionalKind", "RoPE", "DecoupledRoPE", "MRoPE", "LearnedAbsolute", "ALiBi", "RelativeBias", "Rope2D", "POSITIONAL_KINDS",
           "register_positional", "get_positional", "RopeRelevance", "PositionalRelevance", "AlibiSinks",
           "ALIBI_RULES", "RelativeBiasSinks", "RELATIVE_BIAS_RULES", "real_token_positions"]

POSITIONAL_KINDS: dict[str, type["PositionalKind"]] = {}


def real_token_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted from 0 over the real tokens of each row, ``[B, T]`` long; padding never shifts them (so
    left and right padding give the same positions: batch invariance). Pads get the position of the nearest real
    token before them, or 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def register_positional(cls: type["PositionalKind"]) -> type["PositionalKind"]:
    """Class decorator: register a positional kind under ``cls.name``."""
    POSITIONAL_KINDS[cls.name] = cls
    return cls


def get_positional(name: str) -> "PositionalKind":
    try:
        return POSITIONAL_KINDS[name]()
    except KeyError:
        raise BadInputError(f"unknown positional encoding kind {name!r}",
                            f"use one of: {', '.join(sorted(POSITIONAL_KINDS))}") from None


class PositionalKind:
    """Base of the registry (see the module docstring)."""

    name: ClassVar[str]
    multi_sink: ClassVar[bool]
    affects_semantic: ClassVar[bool]
    read_always: ClassVar[bool]
    sinks: ClassVar[str]
    rule: ClassVar[str]
    identity: ClassVar[str]


@dataclass
class RopeRelevance:
    """Positional relevance of RoPE sinks (docs/protocol.md section 1):

    * ``per_layer`` ``[B, L, 2, T]``: signed ``sum_d cos*grad`` (``[:, :, 0]``) and ``sum_d sin*grad`` (``[:, :, 1]``)
      per layer and token, summed over heads and the q and k sides;
    * ``per_layer_relu`` ``[B, L, 2, T]``: the same sums of the positive elements only (paper Eq. 11);
    * ``shared_relu`` ``[B, 2, T]``: positive elements of the layer-summed element relevance (one shared sink,
      Eq. 11 without multi-sink).
    """

    per_layer: torch.Tensor
    per_layer_relu: torch.Tensor
    shared_relu: torch.Tensor


@register_positional
class RoPE(PositionalKind):
    """Rotary position embedding (LLaMA, Mistral, Qwen, Gemma, Phi-3, GPT-NeoX), full or partial.

    * sinks: one fresh leaf copy of ``(cos, sin)`` per layer (multi-sink), shared by the q and k sides (a family
      with several rotary tables, e.g. Gemma 3's local and global ones, gives each layer a copy of its own table);
    * rule: ``x*cos + rot(x)*sin`` with the uniform rule on each product, so half of the relevance of each rotated
      query/key element goes to ``x`` and half to ``cos`` / ``sin`` (paper Eq. 10). Partial rotary (GPT-NeoX,
      Phi-3 with ``partial_rotary_factor < 1``): the tables are narrower than a head, only the first
      ``rotary_dim = cos.shape[-1]`` dimensions go through the products (and feed the sinks), the others pass
      through unchanged, as in the Hugging Face modeling files;
    * identity: per layer and token, ``R(cos) + R(sin) = (R(q~) + R(k~)) / 2`` where ``q~``, ``k~`` are the rotated
      dimensions of the queries and keys.
    """

    name = "rope"
    multi_sink = True
    affects_semantic = True
    read_always = False
    sinks = "one (cos, sin) leaf pair per layer"
    rule = "uniform rule on x*cos and rot(x)*sin (paper Eq. 10)"
    identity = "R(cos_k) + R(sin_k) = (R(q~_k) + R(k~_k)) / 2 per layer k"

    @staticmethod
    def layer_sinks(cos: torch.Tensor, sin: torch.Tensor, enabled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(cos, sin)`` a layer uses: fresh leaves when sinks are on, the shared constants otherwise."""
        if not enabled:
            return cos, sin
        return cos.detach().clone().requires_grad_(True), sin.detach().clone().requires_grad_(True)

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, product_rule: str,
              eps: float = 0.0) -> torch.Tensor:
        """``x*cos + rot(x)*sin`` for ``x`` ``[B, H, T, d]`` and ``cos``/``sin`` ``[B, T, r]``, each product under
        ``product_rule`` (``uniform`` in every LRP composite); with ``r < d`` (partial rotary) only ``x[..., :r]`` is
        rotated and ``x[..., r:]`` passes through. ``eps``: the epsilon-rule stabiliser of the sum
        (:func:`palrp_bench.lrp.rules.stabilize`; 0 = exact)."""
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        rotary = cos.shape[-1]
        if rotary != x.shape[-1]:
            x_rot, x_pass = x[..., :rotary], x[..., rotary:]
            rotated = (rules.product(x_rot, cos, rule=product_rule)
                       + rules.product(rules.rotate_half(x_rot), sin, rule=product_rule))
            return torch.cat((rules.stabilize(rotated, eps), x_pass), dim=-1)
        return rules.stabilize(rules.product(x, cos, rule=product_rule)
                               + rules.product(rules.rotate_half(x), sin, rule=product_rule), eps)

    @staticmethod
    def reduce(cos_relevance: list[torch.Tensor], sin_relevance: list[torch.Tensor], n_layers: int, batch: int,
               tokens: int, like: torch.Tensor) -> RopeRelevance:
        """Per-layer sums of the elementwise relevance ``[B, T, d]`` of each layer's sinks (empty lists: zeros)."""
        if not cos_relevance:
            zeros = like.new_zeros(batch, n_layers, 2, tokens)
            return RopeRelevance(zeros, zeros.clone(), like.new_zeros(batch, 2, tokens))
        per_layer = torch.stack([torch.stack([c.sum(-1), s.sum(-1)], 1)
                                 for c, s in zip(cos_relevance, sin_relevance)], 1)
        per_layer_relu = torch.stack([torch.stack([c.clamp(min=0).sum(-1), s.clamp(min=0).sum(-1)], 1)
                                      for c, s in zip(cos_relevance, sin_relevance)], 1)
        shared = torch.stack([torch.stack(cos_relevance).sum(0).clamp(min=0).sum(-1),
                              torch.stack(sin_relevance).sum(0).clamp(min=0).sum(-1)], 1)
        return RopeRelevance(per_layer, per_layer_relu, shared)


def deinterleave(x: torch.Tensor) -> torch.Tensor:
    """``[x0, x1, x2, x3, ...] -> [x0, x2, ..., x1, x3, ...]`` over the last dimension: rotary dimensions laid out
    in interleaved pairs (each pair rotated by one frequency) brought to the half layout of :func:`rules.rotate_half`
    (a permutation: relevance passes through it unchanged)."""
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)


@register_positional
class DecoupledRoPE(RoPE):
    """RoPE decoupled from the content dimensions (multi-head latent attention, DeepSeek-V2/V3): each query head is
    ``[q_nope | q_rope]`` and each key ``[k_nope | k_rope]``, where only the ``q_rope`` part of every head and one
    ``k_rope`` vector per token, shared by all heads, are rotated; the content parts never see a position.

    * sinks: one fresh leaf copy of ``(cos, sin)`` ``[B, T, r]`` per layer (multi-sink), shared by the rotated query
      parts of every head and the shared rotated key;
    * rule: ``x*cos + rot(x)*sin`` with the uniform rule on each product (paper Eq. 10) on ``q_rope`` (per head) and
      on the shared ``k_rope`` before it is copied to the heads; DeepSeek-V3's interleaved pair layout
      (``rope_interleave``) is first brought to the half layout (:func:`deinterleave`: a permutation; scores are
      unchanged, as in the library, whose rotated output is laid out the same way);
    * identity: per layer and token, ``R(cos) + R(sin) = (R(q~_rope) + R(k~_rope)) / 2``, where ``k~_rope`` is the
      shared rotated key (it collects the relevance of every head that reads it).
    """

    name = "rope_decoupled"
    sinks = "one (cos, sin) leaf pair per layer, shared by the rotated query parts and the one rotated key"
    rule = "uniform rule on x*cos and rot(x)*sin of q_rope per head and of the shared k_rope (paper Eq. 10)"
    identity = "R(cos_k) + R(sin_k) = (R(q~_rope,k) + R(k~_rope,k)) / 2 per layer k"

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, product_rule: str, eps: float = 0.0,
              interleaved: bool = False) -> torch.Tensor:
        """The rotation of the rotary part ``x`` ``[B, H, T, r]`` (``H = 1`` for the shared key) with tables ``[B, T,
        r]``; ``interleaved``: ``x`` holds interleaved pairs, the result the half layout (class docstring)."""
        return RoPE.apply(deinterleave(x) if interleaved else x, cos, sin, product_rule, eps=eps)


@register_positional
class MRoPE(RoPE):
    """Multimodal RoPE (Qwen2-VL, Qwen2.5-VL): the rotary frequencies of every head are split into sections, each
    rotated by one coordinate of a 3-D position (temporal, height, width). Text tokens have three equal coordinates
    (plain RoPE); an image's tokens share the temporal one and take their row and column on the image's token grid.

    * sinks: one fresh leaf copy of ``(cos, sin)`` ``[B, T, d]`` per layer (multi-sink), shared by the q and k sides,
      as :class:`RoPE` (the library's rotary module builds the tables from the ``[3, B, T]`` positions);
    * rule: ``x*cos + rot(x)*sin`` with the uniform rule on each product (paper Eq. 10);
    * identity: per layer and token, ``R(cos) + R(sin) = (R(q~) + R(k~)) / 2``; summed over the dimensions of one
      section, the same holds for that section's rotated dimensions, so the split by section
      (:meth:`reduce_sections`) adds up to the per-layer terms.
    """

    name = "mrope"
    sinks = "one (cos, sin) leaf pair per layer; its dimensions split into temporal, height and width sections"
    identity = "R(cos_k) + R(sin_k) = (R(q~_k) + R(k~_k)) / 2 per layer k, and per section of the rotary dimensions"
    #: the coordinates a section rotates by, in the library's order (section ``i`` takes coordinate ``i % 3``)
    SECTIONS: ClassVar[tuple[str, ...]] = ("temporal", "height", "width")

    @staticmethod
    def section_of_dimension(sections, rotary_dim: int, device=None) -> torch.Tensor:
        """``[rotary_dim]`` long: the coordinate (0 temporal, 1 height, 2 width) each dimension of a ``(cos, sin)``
        table rotates by. ``sections``: frequencies per section (``rope_parameters["mrope_section"]``, summing to
        ``rotary_dim / 2``); the frequencies are laid out section after section, section ``i`` reading coordinate
        ``i % 3``, and the table repeats them for its second half (the half layout of :func:`rules.rotate_half`)."""
        sections = [int(s) for s in sections]
        if 2 * sum(sections) != rotary_dim:
            raise BadInputError(f"mrope_section {sections} covers {2 * sum(sections)} rotary dimensions, the tables "
                                f"have {rotary_dim}", "use the model's own config (mrope_section sums to head_dim / 2)")
        half = torch.cat([torch.full((s,), i % 3, dtype=torch.long) for i, s in enumerate(sections)])
        return torch.cat([half, half]).to(device)

    @classmethod
    def reduce_sections(cls, cos_relevance: list[torch.Tensor], sin_relevance: list[torch.Tensor], sections,
                        n_layers: int, batch: int, tokens: int, like: torch.Tensor) -> torch.Tensor:
        """``[B, L, 3, T]``: per layer, the relevance of the cos and sin sinks ``[B, T, d]`` summed over the dimensions
        of each coordinate (temporal, height, width); zeros when the tables were constants (empty lists)."""
        if not cos_relevance:
            return like.new_zeros(batch, n_layers, 3, tokens)
        index = cls.section_of_dimension(sections, cos_relevance[0].shape[-1], cos_relevance[0].device)
        per_layer = []
        for c, s in zip(cos_relevance, sin_relevance):
            out = c.new_zeros(c.shape[0], c.shape[1], 3)
            out.index_add_(2, index, c + s)
            per_layer.append(out.transpose(1, 2))
        return torch.stack(per_layer, 1)


@register_positional
class LearnedAbsolute(PositionalKind):
    """A learned absolute position embedding added to the token embeddings (ViT / DeiT, GPT-2, BERT).

    * sinks: one leaf copy of the position table per forward (single sink);
    * rule: ``z = E + P`` under the epsilon rule (eps -> 0, a plain add), so ``R(P) = P * grad_z`` (paper Eq. 5);
    * identity: ``R(E) + R(P) = R(z)``: token and position relevance add up to the embedding's.
    """

    name = "learned_absolute"
    multi_sink = False
    affects_semantic = False
    read_always = True
    sinks = "one leaf copy of the position table"
    rule = "epsilon rule on z = E + P (paper Eq. 5, eps -> 0)"
    identity = "R(E) + R(P) = R(E + P)"

    @staticmethod
    def sink(table: torch.Tensor, batch: int) -> torch.Tensor:
        """A per-sample leaf copy ``[B, N, D]`` of the ``[1, N, D]`` position table."""
        return table.detach().expand(batch, -1, -1).clone().requires_grad_(True)

    @staticmethod
    def reduce(relevance: torch.Tensor) -> torch.Tensor:
        """Per-position relevance ``sum_d R(P)[n, d]``: ``[B, N]``."""
        return relevance.sum(-1)

    @staticmethod
    def rows(table: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """A per-sample leaf ``[B, T, D]`` of the table rows a text model uses (``table[position_ids]``; GPT-2, OPT,
        BERT): the sink of one forward."""
        return table.detach()[position_ids].clone().requires_grad_(True)

    @staticmethod
    def token_relevance(relevance: torch.Tensor) -> "PositionalRelevance":
        """:class:`PositionalRelevance` of the sink's elementwise relevance ``[B, T, D]`` (one sink, one component)."""
        return PositionalRelevance.from_elements([relevance.transpose(1, 2)])


@dataclass
class PositionalRelevance:
    """Per-token positional relevance of any kind, laid out for the token and pixel aggregations:

    * ``per_sink`` ``[B, S, C, T]``: signed relevance of each sink ``S`` (one per layer for multi-sink kinds, one for
      a single sink) and each of its components ``C`` (RoPE: cos, sin; ALiBi and learned PE: one), summed over the
      sink's elements of each token;
    * ``per_sink_relu`` ``[B, S, C, T]``: the same sums over the positive elements only (paper Eq. 11);
    * ``shared_relu`` ``[B, C, T]``: positive elements of the sink-summed element relevance (one shared sink).

    :class:`RopeRelevance` is the same layout under its RoPE field names.
    """

    per_sink: torch.Tensor
    per_sink_relu: torch.Tensor
    shared_relu: torch.Tensor

    @classmethod
    def from_elements(cls, elements: list[torch.Tensor], components: int = 1) -> "PositionalRelevance":
        """From each sink's elementwise relevance ``[B, C * E, T]`` (``C`` components of ``E`` elements each)."""
        stacked = torch.stack(elements, 1)
        b, s, ce, t = stacked.shape
        split = stacked.reshape(b, s, components, ce // components, t)
        return cls(split.sum(3), split.clamp(min=0).sum(3), split.sum(1).clamp(min=0).sum(2))

    @classmethod
    def zeros(cls, batch: int, sinks: int, components: int, tokens: int, like: torch.Tensor) -> "PositionalRelevance":
        """No relevance reached the sinks (they were constants in this pass)."""
        z = like.new_zeros(batch, sinks, components, tokens)
        return cls(z, z.clone(), like.new_zeros(batch, components, tokens))


#: ``alibi_rule`` choices (docs/positional.md, "ALiBi")
ALIBI_RULES = ("paper", "relative_half")


@dataclass
class AlibiSinks:
    """The four operands of one layer's ALiBi bias ``m_h * (j - i)`` written as ``1_i * (m_h j) + i * (-m_h 1_j)``,
    each ``[B, H, T]``: ``query_one`` (ones), ``query_pos`` (query positions i), ``key_pos`` (key positions j),
    ``key_one`` (ones). The operands that carry relevance under the rule are leaves (sinks), the others constants."""

    query_one: torch.Tensor
    query_pos: torch.Tensor
    key_pos: torch.Tensor
    key_one: torch.Tensor

    def leaves(self) -> dict[str, torch.Tensor]:
        return {name: t for name, t in (("alibi_query_one", self.query_one), ("alibi_query_pos", self.query_pos),
                                        ("alibi_key_pos", self.key_pos), ("alibi_key_one", self.key_one))
                if t.requires_grad}


@register_positional
class ALiBi(PositionalKind):
    """Attention with linear biases (BLOOM): ``S_hij = q_i k_j * scale + m_h (j - i)`` on every layer
    (docs/positional.md, "ALiBi", derives both rules).

    * sinks: per layer, the positions entering the bias, as query-side and key-side leaves ``[B, H, T]``
      (multi-sink: one positional term per token and layer, the query and key sides summed);
    * rule: epsilon rule on ``A + P`` (``R(P) = P * g`` with ``g`` the gradient at the scores), then
      ``alibi_rule="paper"`` -- the conserving reading of the paper's Appendix B, ``R(i) = -m i g``, ``R(j) = m j g``
      with positions counted from 0 over real tokens (the query side is exactly zero: softmax ignores a row
      constant) -- or ``alibi_rule="relative_half"`` -- half of each ``R(P_hij)`` to query ``i``, half to key ``j``,
      independent of where positions are counted from;
    * identity: the positional relevance of a layer is ``sum P * g`` under both rules and both bias forms
      (``m (j - i)`` or BLOOM's ``m j``); ``relative_half`` does not change when every position is shifted.

    The bias is computed inside the attention as two extra query/key dimensions (``[m_h / scale, i]`` and
    ``[j, -m_h / scale]``), so the fused attention path keeps linear memory and the positions' gradient is exact.
    """

    name = "alibi"
    multi_sink = True
    affects_semantic = False
    read_always = True
    sinks = "per layer: query-side and key-side position leaves [B, H, T]"
    rule = "epsilon rule on A + P, then alibi_rule=paper (R(j) = m j g) or relative_half (R(P)/2 to each of i, j)"
    identity = "sum over tokens of a layer's positional relevance = sum P * g (both rules, both bias forms)"

    @staticmethod
    def check_rule(rule: str) -> str:
        if rule not in ALIBI_RULES:
            raise BadInputError(f"unknown alibi_rule {rule!r}", f"use one of: {', '.join(ALIBI_RULES)}")
        return rule

    @staticmethod
    def positions(attention_mask: torch.Tensor) -> torch.Tensor:
        """Positions counted from 0 over real tokens (BLOOM's counting; padding gets 0): ``[B, T]`` long."""
        return real_token_positions(attention_mask) * attention_mask.long()

    @staticmethod
    def layer_sinks(positions: torch.Tensor, heads: int, rule: str, enabled: bool, dtype: torch.dtype) -> AlibiSinks:
        """The bias operands of one layer (fresh leaves where the rule sends relevance, when ``enabled``)."""
        pos = positions.to(dtype)[:, None, :].expand(-1, heads, -1)
        ones = torch.ones_like(pos)

        def leaf(t: torch.Tensor, wanted: bool) -> torch.Tensor:
            return t.clone().requires_grad_(True) if enabled and wanted else t

        halves = rule == "relative_half"
        return AlibiSinks(leaf(ones, halves), leaf(pos, True), leaf(pos, True), leaf(ones, halves))

    @staticmethod
    def augment(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: AlibiSinks, slopes: torch.Tensor,
                scale: float, rule: str, qk_share: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q``, ``k``, ``v`` ``[B, H, T, d]`` with two extra dimensions each so that ``q' k'^T * scale`` is
        ``q k^T * scale + m_h (j - i)`` (``v`` gets zeros there; drop the last two output dimensions).

        :func:`palrp_bench.lrp.rules.attention` gives every query/key dimension the uniform rule's share of the
        score relevance. ``relative_half`` wants exactly that (each bias product splits evenly); under ``paper``
        the partner of each position is a constant, so the position takes the whole share: its gradient is
        multiplied by ``1 / qk_share`` here.
        """
        m = slopes.to(device=q.device, dtype=q.dtype).view(1, -1, 1) / scale
        qp, kp = sinks.query_pos, sinks.key_pos
        if rule == "paper" and qk_share not in (0.0, 1.0):
            qp, kp = rules.scale_grad(qp, 1.0 / qk_share), rules.scale_grad(kp, 1.0 / qk_share)
        q_ext = torch.stack([sinks.query_one * m, qp], -1)
        k_ext = torch.stack([kp, -sinks.key_one * m], -1)
        v_ext = v.new_zeros(*v.shape[:-1], 2)
        return torch.cat([q, q_ext], -1), torch.cat([k, k_ext], -1), torch.cat([v, v_ext], -1)

    @staticmethod
    def reduce(relevance: dict, n_layers: int, batch: int, tokens: int, like: torch.Tensor
               ) -> tuple[PositionalRelevance, torch.Tensor, torch.Tensor]:
        """``(PositionalRelevance [B, L, 1, T], query side [B, L, T], key side [B, L, T])`` from the elementwise
        relevance of the sinks (lists per layer of ``[B, H, T]`` under the names of :meth:`AlibiSinks.leaves`;
        missing names contribute nothing). Elements of a token's term: the heads of its query and key sides."""
        def side(*names):
            parts = [relevance.get(n) or [] for n in names]
            per_layer = []
            for layer in range(n_layers):
                terms = [p[layer] for p in parts if p]
                per_layer.append(sum(terms[1:], terms[0]) if terms else None)
            return per_layer

        query, key = side("alibi_query_one", "alibi_query_pos"), side("alibi_key_pos", "alibi_key_one")
        if all(q is None for q in query) and all(k is None for k in key):
            zeros = like.new_zeros(batch, n_layers, tokens)
            return PositionalRelevance.zeros(batch, n_layers, 1, tokens, like), zeros, zeros.clone()
        elements = [torch.cat([q, k], 1) for q, k in zip(query, key)]          # [B, 2H, T] per layer
        return (PositionalRelevance.from_elements(elements), torch.stack([q.sum(1) for q in query], 1),
                torch.stack([k.sum(1) for k in key], 1))


#: ``relative_bias_rule`` choices (docs/positional.md, "Relative position bias (T5)")
RELATIVE_BIAS_RULES = ("relative_half", "key")


@dataclass
class RelativeBiasSinks:
    """One layer's sinks of a relative position bias ``B_hij``: ``query`` ``[B, H, Tq]`` and ``key`` ``[B, H, Tk]``,
    ones standing for the query and key positions that the bias term relates (``B_hij = 1_hi * B_hij * 1_hj``). The
    sides that receive relevance under the rule are leaves, the others constants."""

    query: torch.Tensor
    key: torch.Tensor

    def leaves(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}_{side}": t for side, t in (("query", self.query), ("key", self.key)) if t.requires_grad}


@register_positional
class RelativeBias(PositionalKind):
    """A learned relative position bias added to the attention scores (T5: ``B_hij = table[h, bucket(j - i)]``, one
    table per stack shared by all its layers; docs/positional.md, "Relative position bias (T5)", derives the rules).

    * sinks: per layer and stack, fresh ones ``[B, H, T]`` standing for the query and the key positions of the bias
      terms (multi-sink: every layer's use of the shared table is its own sink, as RoPE's per-layer cos/sin copies);
    * rule: epsilon rule on ``A + B`` (``R(B_hij) = B_hij g_hij`` with ``g`` the gradient at the scores), then
      ``relative_bias_rule="relative_half"`` -- half of each ``R(B_hij)`` to query ``i``, half to key ``j`` (the uniform
      rule on the product ``1_i B_hij 1_j``) -- or ``"key"`` -- all of it to key ``j``. Unlike ALiBi's, the bias is not
      constant along a row, so the query side is not zero;
    * identity: per layer, the positional relevance is ``sum B * g`` under both rules; under ``relative_half`` the
      query and key sides have equal totals.

    The bias is the full ``[H, Tq, Tk]`` tensor the library materialises too (a bucketed table has no low-rank form
    to put into extra query/key dimensions, as ALiBi's); it enters the fused attention as its additive mask, and
    reading its relevance needs the gradient at the scores, reduced at once to the ``[B, H, T]`` sides inside
    :func:`palrp_bench.lrp.rules.attention` (``bias_sinks``; docs/engine.md, "T5").
    """

    name = "relative_bias"
    multi_sink = True
    affects_semantic = False
    read_always = False
    sinks = "per layer and stack: query-side and key-side ones [B, H, T]"
    rule = "epsilon rule on A + B, then relative_bias_rule=relative_half (R(B)/2 to each of i, j) or key (R(B) to j)"
    identity = "sum over tokens of a layer's positional relevance = sum B * g (both rules); relative_half: query " \
               "total = key total"

    @staticmethod
    def check_rule(rule: str) -> str:
        if rule not in RELATIVE_BIAS_RULES:
            raise BadInputError(f"unknown relative_bias_rule {rule!r}",
                                f"use one of: {', '.join(RELATIVE_BIAS_RULES)}")
        return rule

    @staticmethod
    def layer_sinks(batch: int, heads: int, queries: int, keys: int, rule: str, enabled: bool,
                    dtype: torch.dtype, device) -> RelativeBiasSinks:
        """The ones of one layer (leaves where the rule sends relevance, when ``enabled``), in at least float32 (they
        never enter the forward values, only the relevance sums)."""
        acc = torch.promote_types(dtype, torch.float32)
        query = torch.ones(batch, heads, queries, dtype=acc, device=device)
        key = torch.ones(batch, heads, keys, dtype=acc, device=device)
        if enabled:
            key.requires_grad_(True)
            if rule == "relative_half":
                query.requires_grad_(True)
        return RelativeBiasSinks(query, key)

    @staticmethod
    def factors(sinks: RelativeBiasSinks, product_rule: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The ones ``(row, col)`` a layer's attention multiplies its bias with (``1_i B_hij 1_j``,
        :func:`palrp_bench.lrp.rules.attention`'s ``bias_sinks``), under ``product_rule``: ``uniform`` -- each leaf
        among them gets ``1 / n`` of ``R(B_hij)`` (its gradient scaled); ``gradient`` -- each gets ``B * g`` whole
        (Gradient x Input of the ones). Masked pairs hold the mask's large negative value: their gradient is 0, so is
        their relevance."""
        if product_rule not in ("uniform", "gradient"):
            raise ValueError(f"unknown product rule {product_rule!r}; expected uniform or gradient")
        n = sum(t.requires_grad for t in (sinks.query, sinks.key))
        share = 1.0 / n if product_rule == "uniform" and n else 1.0
        return rules.scale_grad(sinks.query, share), rules.scale_grad(sinks.key, share)

    @staticmethod
    def reduce(relevance: dict, prefix: str, n_layers: int, batch: int, tokens: int, like: torch.Tensor
               ) -> tuple[PositionalRelevance, torch.Tensor, torch.Tensor]:
        """``(PositionalRelevance [B, L, 1, T], query side [B, L, T], key side [B, L, T])`` of one stack's
        self-attention from the sinks' relevance (lists per layer of ``[B, H, T]`` under ``<prefix>_query`` and
        ``<prefix>_key``; a missing side contributes zeros). Elements of a token's term: the heads of its query and
        key sides."""
        zeros = like.new_zeros(batch, n_layers, tokens)
        query = relevance.get(f"{prefix}_query") or []
        key = relevance.get(f"{prefix}_key") or []
        if not query and not key:
            return PositionalRelevance.zeros(batch, n_layers, 1, tokens, like), zeros, zeros.clone()
        heads = (query or key)[0].shape[1]
        empty = like.new_zeros(batch, heads, tokens)
        query = query or [empty] * n_layers
        key = key or [empty] * n_layers
        elements = [torch.cat([q, k], 1) for q, k in zip(query, key)]          # [B, 2H, T] per layer
        return (PositionalRelevance.from_elements(elements), torch.stack([q.sum(1) for q in query], 1),
                torch.stack([k.sum(1) for k in key], 1))


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """Interleaved RoPE helper: ``[x0, x1, x2, x3] -> [-x1, x0, -x3, x2]`` (a signed permutation, like
    :func:`palrp_bench.lrp.rules.rotate_half` for the half layout)."""
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


@register_positional
class Rope2D(PositionalKind):
    """Axial 2D rotary embedding of vision transformers (timm RoPE ViTs, EVA-02, DINOv3): RoPE on the patch tokens
    only; prefix tokens (CLS, registers) are not rotated.

    * sinks: one fresh leaf copy of the patch tokens' ``(cos, sin)`` ``[B, Np, d]`` per layer (multi-sink), shared
      by the q and k sides;
    * rule: ``x*cos + rot(x)*sin`` on patch tokens with the uniform rule on each product (paper Eq. 10);
      ``rot`` is the interleaved pair rotation (timm's default) or the half rotation;
    * identity: per layer, ``R(cos) + R(sin) = (R(q~) + R(k~)) / 2`` over the patch tokens.

    A learned absolute embedding on the same model (RoPE + APE variants) is a separate single sink
    (:class:`LearnedAbsolute`).
    """

    name = "rope_2d"
    multi_sink = True
    affects_semantic = True
    read_always = False
    sinks = "one (cos, sin) leaf pair of the patch tokens per layer"
    rule = "uniform rule on x*cos and rot(x)*sin of the patch tokens (paper Eq. 10)"
    identity = "R(cos_k) + R(sin_k) = (R(q~_k) + R(k~_k)) / 2 over the patch tokens, per layer k"

    @staticmethod
    def layer_sinks(cos: torch.Tensor, sin: torch.Tensor, batch: int, enabled: bool
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample ``(cos, sin)`` ``[B, Np, d]`` of a layer: fresh leaves when sinks are on, constants otherwise."""
        cos, sin = (t.detach().expand(batch, -1, -1) for t in (cos, sin))
        if not enabled:
            return cos, sin
        return cos.clone().requires_grad_(True), sin.clone().requires_grad_(True)

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_prefix: int, layout: str,
              product_rule: str) -> torch.Tensor:
        """Rotate the patch tokens of ``x`` ``[B, H, N, d]`` (``N = num_prefix + Np``); ``cos``/``sin``
        ``[B, Np, d]``."""
        rotate = rotate_pairs if layout == "interleaved" else rules.rotate_half
        prefix, patches = x[:, :, :num_prefix], x[:, :, num_prefix:]
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        rotated = rules.product(patches, cos, rule=product_rule) + rules.product(rotate(patches), sin,
                                                                                rule=product_rule)
        return torch.cat([prefix, rotated.to(x.dtype)], 2)

    @staticmethod
    def reduce(cos_relevance: list[torch.Tensor], sin_relevance: list[torch.Tensor], n_layers: int, batch: int,
               patches: int, like: torch.Tensor) -> PositionalRelevance:
        """``[B, L, 2, Np]`` (cos, sin) per layer from the sinks' elementwise relevance ``[B, Np, d]``."""
        if not cos_relevance:
            return PositionalRelevance.zeros(batch, n_layers, 2, patches, like)
        return PositionalRelevance.from_elements(
            [torch.cat([c, s], -1).transpose(1, 2) for c, s in zip(cos_relevance, sin_relevance)], components=2)
