"""RoPE ViT twin: timm ``Eva`` models with 2D rotary position embedding (``vit_*_rope_*``, EVA-02, DINOv3).

The twin wraps a loaded timm ``Eva`` without touching it. It reuses the DeiT twin's image checks, patch embedding,
LayerNorm and MLP handling (:class:`~palrp_bench.models.vit.VitTwin`) and re-implements the wiring of the
pre-norm ``EvaBlock`` (``EvaAttention`` or ``AttentionRope``, optional LayerScale, ``Mlp`` or a gated ``GluMlp`` /
``SwiGLU``) with the rules of :mod:`palrp_bench.lrp.rules`, the gamma roles of the ViT composites included.

Positions, two kinds of :mod:`palrp_bench.lrp.positional`:

* ``rope_2d`` (always): the model's own rotary module gives ``(sin, cos)`` for the patch grid; per layer one fresh
  leaf copy ``[B, Np, d]`` of each (multi-sink) when positional sinks are on, constants otherwise; the prefix
  tokens (CLS, registers) are not rotated, as in timm;
* ``learned_absolute`` (models with ``pos_embed``, e.g. ``*_rope_ape_*``, EVA-02): a per-sample leaf copy of the
  table, always read (it changes no other relevance), as for DeiT.

``Explanation.positional`` is ``[B, S, 2, Hp, Wp]``: per sink ``S`` the two components, the learned table first
(as ``[APE, 0]``) when the model has one, then ``(cos, sin)`` of every layer (zeros when the rotary tables were
constants, e.g. ``attnlrp``); the pixel aggregation sums
``|.|`` over sinks and components (multi-sink) or the signed values (``pa_lrp_no_multisink``). Semantic relevance
is the pixel map, as for DeiT; ``extras`` carry the prefix terms and Appendix F totals under the DeiT names.

The default rules are ``attnlrp``: the official vision composite sends no relevance through the attention weights,
which is where RoPE acts, so it would leave the rotary sinks empty.

Dynamic image sizes (DINOv3) work as in timm: the rotary table is built for the image's grid and a learned table
is resampled. Refused with one line: post-norm blocks, mixed (learnable per-layer) RoPE and other RoPE modules whose
embedding is not one ``[N, 2 d]`` sin/cos table, attention pooling (``global_pool='map'``) and pooling other
than ``token`` / ``avg``, qk-norm, attention scale-norm or gating, MLP norms (``scale_mlp``), patch dropout.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ..errors import BadInputError, UnsupportedModelError
from ..lrp import rules
from ..lrp.attribution import Attribution
from ..lrp.composites import Composite, get_composite
from ..lrp.gamma import gamma_module
from ..lrp.positional import LearnedAbsolute, Rope2D
from .registry import register_twin
from .vit import VitInputs, VitTwin

__all__ = ["RopeVitTwin", "RopeVitForward"]


@dataclass
class RopeVitForward:
    """One LRP-aware forward: ``logits`` ``[B, C]``; sinks ``pixels`` ``[B, 3, H, W]``, ``prefix`` ``[B, P, D]``
    (CLS / registers; ``P`` may be 0), ``pos_embed`` (learned table copy, or None), ``cos`` / ``sin`` (one
    ``[B, Np, d]`` leaf per layer, or empty lists); ``patch_tokens`` ``[B, Np, D]`` (probe), ``grid`` ``(Hp, Wp)``."""

    #: sinks that are not inputs (:func:`palrp_bench.lrp.attribution.absorbed_relevance` leaves them out)
    probes: ClassVar[tuple[str, ...]] = ("patch_tokens",)

    logits: torch.Tensor
    pixels: torch.Tensor
    patch_tokens: torch.Tensor
    prefix: torch.Tensor
    pos_embed: torch.Tensor | None
    cos: list
    sin: list
    grid: tuple[int, int]

    @property
    def sinks(self) -> dict:
        sinks = {"pixels": self.pixels, "patch_tokens": self.patch_tokens, "prefix": self.prefix,
                 "cos": self.cos, "sin": self.sin}
        if self.pos_embed is not None:
            sinks["pos_embed"] = self.pos_embed
        return sinks


def _eva_classes():
    from timm.layers import AttentionRope, GluMlp, Mlp, PatchEmbed, SwiGLU
    from timm.models.eva import Eva, EvaAttention, EvaBlock
    return Eva, EvaBlock, EvaAttention, AttentionRope, Mlp, GluMlp, SwiGLU, PatchEmbed


@register_twin
class RopeVitTwin(VitTwin):
    """LRP-aware forward of a timm ``Eva`` with 2D RoPE (module docstring)."""

    default_composite = "attnlrp"
    positional = Rope2D()
    official_stabilizers = None  # the official code has no RoPE ViT (palrp_bench/lrp/stabilizers.py)
    official_code_ran = False

    @classmethod
    def family(cls) -> str:
        return "rope vit (timm Eva with 2D RoPE: vit_*_rope_*, EVA-02)"

    @classmethod
    def supports(cls, model) -> bool:
        try:
            eva = _eva_classes()[0]
        except ImportError:  # pragma: no cover - timm is a core dependency
            return False
        return isinstance(model, eva)

    def __init__(self, model):  # noqa: C901 - one refusal per unsupported feature
        eva, block_cls, eva_attn, rope_attn, mlp_cls, glu_cls, swiglu_cls, patch_cls = _eva_classes()
        self.model = model
        name = type(model).__name__

        def refuse(feature: str):
            raise UnsupportedModelError(f"{name}: {feature} is not supported by the RoPE ViT twin",
                                        "use a pre-norm timm RoPE ViT (e.g. vit_small_patch16_rope_ape_224)")

        if getattr(model, "rope", None) is None:
            refuse("a model without rotary position embedding (use the DeiT/ViT twin's models)")
        if getattr(model, "rope_mixed", False):
            refuse("mixed (learnable per-layer) RoPE")
        if getattr(model, "attn_pool", None) is not None or model.global_pool not in ("token", "avg"):
            refuse(f"global_pool={model.global_pool!r}")
        if getattr(model, "patch_drop", None) is not None:
            refuse("patch dropout")
        pe = model.patch_embed
        if type(pe) is not patch_cls or not isinstance(pe.proj, nn.Conv2d) or getattr(pe, "dynamic_img_pad", False):
            refuse(f"patch embedding {type(pe).__name__}")
        if not isinstance(model.head, nn.Linear):
            refuse("a model without a linear classifier head (num_classes=0)")
        for module, where in ((pe.norm, "patch_embed.norm"), (model.norm_pre, "norm_pre"), (model.norm, "norm"),
                              (model.fc_norm, "fc_norm")):
            if not isinstance(module, (nn.Identity, nn.LayerNorm)):
                refuse(f"{where} of type {type(module).__name__} (LayerNorm or Identity expected)")
        self.dynamic_img_size = bool(getattr(model, "dynamic_img_size", False))
        emb = self._rope_embed(tuple(int(g) for g in pe.grid_size))
        head_dims = set()
        for i, blk in enumerate(model.blocks):
            if type(blk) is not block_cls:
                refuse(f"block {i} of type {type(blk).__name__} (post-norm blocks)")
            attn = blk.attn
            if type(attn) not in (eva_attn, rope_attn):
                refuse(f"attention {type(attn).__name__} in block {i}")
            if not (isinstance(attn.q_norm, nn.Identity) and isinstance(attn.k_norm, nn.Identity)
                    and isinstance(attn.norm, nn.Identity) and attn.gate is None):
                refuse(f"qk-norm / scale-norm / gated attention in block {i}")
            if type(blk.mlp) not in (mlp_cls, glu_cls, swiglu_cls) or not isinstance(blk.mlp.norm, nn.Identity):
                refuse(f"MLP {type(blk.mlp).__name__} (with a norm inside) in block {i}")
            for module, where in ((blk.norm1, "norm1"), (blk.norm2, "norm2")):
                if not isinstance(module, nn.LayerNorm):
                    refuse(f"{where} of type {type(module).__name__} in block {i}")
            head_dims.add(attn.head_dim)
        if emb.dim() != 2 or len(head_dims) != 1 or emb.shape[-1] != 2 * head_dims.pop():
            refuse(f"a rotary embedding of shape {tuple(emb.shape)} (one [N, 2 * head_dim] sin/cos table expected)")
        self.patch_embed = pe
        self.blocks = model.blocks
        self.num_prefix = int(model.num_prefix_tokens)
        self.no_embed_class = bool(model.no_embed_class)
        self.has_ape = model.pos_embed is not None

    # ------------------------------------------------------------------ forward
    def _rope_embed(self, grid: tuple[int, int]) -> torch.Tensor:
        """The rotary module's ``[Np, 2 d]`` sin/cos table for ``grid``, requested as ``Eva`` does (its cached table
        unless the image size is dynamic or the module keeps no grid)."""
        rope = self.model.rope
        with torch.no_grad():
            if self.dynamic_img_size or not hasattr(rope, "feat_shape"):
                return rope.get_embed(shape=list(grid))
            return rope.get_embed()

    def rope_tables(self, grid: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` ``[Np, d]`` of the model's rotary module for a patch ``grid``."""
        sin, cos = self._rope_embed(grid).chunk(2, -1)
        return cos.to(self.dtype), sin.to(self.dtype)

    def forward(self, pixels: torch.Tensor, composite: Composite, *, positional_sinks: bool = True,
                attention: str = "sdpa", recorder: rules.AttentionRecorder | None = None) -> RopeVitForward:
        """One LRP-aware forward from the pixel leaf to the logits (``attention="eager"`` materialises the weights;
        required by ``recorder``)."""
        composite = self.check_composite(get_composite(composite))
        model = self.model
        b = pixels.shape[0]
        tokens, grid = self._embed_patches(pixels, composite)
        prefix_params = [p for p in (model.cls_token, model.reg_token) if p is not None]
        if prefix_params:
            prefix = torch.cat([p.detach().expand(b, -1, -1) for p in prefix_params], 1).clone().requires_grad_(True)
        else:
            prefix = tokens.new_zeros(b, 0, tokens.shape[-1]).requires_grad_(True)
        pos = LearnedAbsolute.sink(self.position_table(grid), b) if self.has_ape else None
        if pos is not None and self.no_embed_class:
            x = torch.cat([prefix, tokens + pos], 1)
        else:
            x = torch.cat([prefix, tokens], 1)
            if pos is not None:
                x = x + pos
        x = self._norm(model.norm_pre, x, composite)
        cos, sin = self.rope_tables(grid)
        cos_leaves, sin_leaves = [], []
        for blk in self.blocks:
            c, s = self.positional.layer_sinks(cos, sin, b, positional_sinks)
            if positional_sinks:
                cos_leaves.append(c)
                sin_leaves.append(s)
            x = self._rope_block(blk, x, c, s, composite, attention, recorder)
        x = self._norm(model.norm, x, composite)
        pooled = x[:, 0] if model.global_pool == "token" else x[:, self.num_prefix:].mean(1)
        logits = gamma_module(model.head, self._norm(model.fc_norm, pooled, composite), composite.gamma_for("head"))
        return RopeVitForward(logits, pixels, tokens, prefix, pos, cos_leaves, sin_leaves, grid)

    def _rope_block(self, blk, x, cos, sin, composite: Composite, attention: str, recorder) -> torch.Tensor:
        h = self._rope_attention(blk.attn, self._norm(blk.norm1, x, composite), cos, sin, composite, attention,
                                 recorder)
        x = x + (h if blk.gamma_1 is None else blk.gamma_1 * h)
        h = self._any_mlp(blk.mlp, self._norm(blk.norm2, x, composite), composite)
        return x + (h if blk.gamma_2 is None else blk.gamma_2 * h)

    def _rope_attention(self, attn, h, cos, sin, composite: Composite, attention: str, recorder) -> torch.Tensor:
        b, n, _ = h.shape
        gamma = composite.gamma_for("qkv")
        if attn.qkv is not None:
            qkv = gamma_module(attn.qkv, h, gamma)
            biases = [getattr(attn, f"{p}_bias", None) for p in "qkv"]
            if all(t is not None for t in biases):  # EvaAttention keeps the q/k/v biases apart
                qkv = qkv + torch.cat(biases)
            q, k, v = qkv.reshape(b, n, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        else:
            heads_kv = getattr(attn, "num_kv_heads", attn.num_heads)
            q = gamma_module(attn.q_proj, h, gamma).reshape(b, n, attn.num_heads, -1).transpose(1, 2)
            k = gamma_module(attn.k_proj, h, gamma).reshape(b, n, heads_kv, -1).transpose(1, 2)
            v = gamma_module(attn.v_proj, h, gamma).reshape(b, n, heads_kv, -1).transpose(1, 2)
        layout = "half" if getattr(attn, "rotate_half", False) else "interleaved"
        q = self.positional.apply(q, cos, sin, self.num_prefix, layout, composite.product)
        k = self.positional.apply(k, cos, sin, self.num_prefix, layout, composite.product)
        o = rules.attention(q, k, v, mask=None, causal=False, scale=attn.scale,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder)
        o = o.transpose(1, 2).reshape(b, n, -1)
        return gamma_module(attn.proj, o, composite.gamma_for("attn_out"))

    def _any_mlp(self, mlp, h, composite: Composite) -> torch.Tensor:
        """``Mlp`` as for DeiT; the gated ``GluMlp`` / ``SwiGLU`` (EVA-02) with the uniform rule on the gate product."""
        if not hasattr(mlp, "fc1_g") and not hasattr(mlp, "gate_last"):
            return self._mlp(mlp, h, composite)
        gamma = composite.gamma_for("mlp")
        if hasattr(mlp, "fc1_g"):
            gate, value = gamma_module(mlp.fc1_g, h, gamma), gamma_module(mlp.fc1_x, h, gamma)
        else:
            x1, x2 = gamma_module(mlp.fc1, h, gamma).chunk(2, dim=mlp.chunk_dim)
            gate, value = (x2, x1) if mlp.gate_last else (x1, x2)
        gated = rules.product(rules.activation(gate, mlp.act, composite.activation), value, rule=composite.product)
        return gamma_module(mlp.fc2, gated, gamma)

    # ------------------------------------------------------------------ explanation protocol
    def run(self, inputs: VitInputs, composite: Composite, *, positional_sinks: bool = True,
            attention: str = "sdpa") -> RopeVitForward:
        """The LRP-aware forward of :func:`palrp_bench.lrp.attribution.attribute` (fresh pixel leaf)."""
        if attention not in ("sdpa", "eager"):
            raise BadInputError(f"unknown attention implementation {attention!r}", "use sdpa or eager")
        return self.forward(inputs.pixels.detach().clone().requires_grad_(True), composite,
                            positional_sinks=positional_sinks, attention=attention)

    def summarize(self, inputs: VitInputs, attribution: Attribution) -> dict:
        """Pixel-level semantic map ``[B, H, W]``, positional relevance ``[B, S, 2, Hp, Wp]`` (module docstring) and
        the DeiT twin's extras (prefix terms = CLS and register tokens summed, Appendix F totals, ``patch_size``)."""
        r = attribution.relevance
        b = inputs.pixels.shape[0]
        hp, wp = attribution.forward.grid
        semantic = r["pixels"].sum(1)
        sinks = [self.positional.reduce(r["cos"], r["sin"], len(self.blocks), b, hp * wp, semantic).per_sink]
        prefix_positional = semantic.new_zeros(b)
        if self.has_ape:
            ape = LearnedAbsolute.reduce(r["pos_embed"])
            if not self.no_embed_class:
                prefix_positional = ape[:, :self.num_prefix].sum(1)
                ape = ape[:, self.num_prefix:]
            sinks.insert(0, torch.stack([ape, torch.zeros_like(ape)], 1)[:, None])
        positional = torch.cat(sinks, 1).reshape(b, -1, 2, hp, wp)
        prefix_semantic = r["prefix"].sum(-1).sum(1)
        semantic_total = semantic.sum((1, 2))
        positional_total = positional.sum((1, 2, 3, 4))
        extras = {"cls_semantic": prefix_semantic, "cls_positional": prefix_positional,
                  "patch_semantic": r["patch_tokens"].sum(-1).reshape(b, hp, wp),
                  "semantic_total": semantic_total, "positional_total": positional_total,
                  "semantic_total_incl_prefix": semantic_total + prefix_semantic,
                  "positional_total_incl_prefix": positional_total + prefix_positional,
                  "patch_size": self.patch_size}
        return {"semantic": semantic, "positional": positional, "extras": extras}
