"""ViT / DeiT twin: the LRP-aware forward of a timm ``VisionTransformer`` with a learned position embedding.

The twin wraps a loaded timm ``VisionTransformer`` (or ``VisionTransformerDistilled``, DeiT with a distillation
token) without touching it. It calls the model's own modules and parameters (``patch_embed.proj``,
``blocks[i].norm1 / attn.qkv / attn.proj / norm2 / mlp.fc1 / mlp.fc2``, ``norm``, ``head``) and re-implements
only the wiring with the rules of :mod:`palrp_bench.lrp.rules` and :mod:`palrp_bench.lrp.gamma`, as chosen by a
:class:`~palrp_bench.lrp.composites.Composite`:

* linear maps by *role* (``patch_embed``, ``qkv``, ``attn_out``, ``mlp``, ``head``): the generalised gamma rule
  where ``composite.linear_gamma`` names the role, else the epsilon rule (eps -> 0, plain gradient);
* LayerNorm with the standard deviation constant (``norm="identity"``), GELU under the identity rule;
* attention through :func:`palrp_bench.lrp.rules.attention` with the composite's shares;
* residual adds and the position-embedding add by the epsilon rule (plain gradient);
* optional epsilon-rule stabilisers (:mod:`palrp_bench.lrp.stabilizers`; the official vision set, by default
  under ``protocol=official`` except for the torchvision ViT: :attr:`VitTwin.official_code_ran`): on the epsilon
  linears, the adds, ``A V`` (and ``Q K^T`` with ``attention="eager"``), the LayerNorms (the final one with its
  own eps), the residual branch points and the CLS pooling, and Zennit's sign-aware eps in the gamma rules.

Relevance sinks (docs/protocol.md section 1, paper Eq. 5 with eps -> 0; the ``learned_absolute`` kind of
:mod:`palrp_bench.lrp.positional`): ``z = E + P`` so ``R(E) = E * grad_z`` and ``R(P) = P * grad_z``. The pixels
(patch-embedding input) are the semantic sink, a per-sample leaf copy of ``pos_embed`` the positional sink, and
per-sample leaf copies of the CLS (and distillation) token collect their semantic relevance, reported apart. A
learned PE is added, so its sink never changes any other relevance: every method of a vision model is read off
the same single pass (as in the official code, whose three vision rows share one semantic map), and positional
relevance is always reported.

Starting relevance (docs/protocol.md section 1, vision; official ``generate_LRP`` feeds a one-hot vector to
``relprop``): 1.0 on the explained logit (``starting_relevance = "unit"``).

The official composite (``official_vit``; what the official code ran for every vision table, checked against its
outputs in ``tests/models/test_deit_official.py``): gamma 0.05 on the MLP linears and the head, gamma 100 on the
patch-embedding conv, epsilon on the attention value projection (the value slice of ``qkv``) and on the output
projection (the official ``Block.relprop`` switches the gamma rule off inside attention), only the value path of
``A @ V`` with half its relevance (CP rule; the A half is dropped), std-constant LayerNorm, identity GELU, epsilon
adds. ``attnlrp`` is true AttnLRP (softmax rule, uniform rule on both attention matmuls, epsilon linears);
``attnlrp_gamma`` adds the official gamma rules to it; ``cp_lrp`` keeps attention weights constant (composites in
:mod:`palrp_bench.lrp.composites`).

The parity test (``tests/models/test_vit_twin.py``) pins the twin's logits to timm's own forward.
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
from ..lrp.positional import LearnedAbsolute
from ..lrp.stabilizers import NONE, OFFICIAL_VISION, Stabilizers
from .registry import Twin, register_twin
from .token_inputs import model_inputs
from .torchvision_vit import from_torchvision

__all__ = ["VitTwin", "VitForward", "VitInputs", "GAMMA_ROLES"]

#: Linear-layer roles a composite's ``linear_gamma`` may name for this twin.
GAMMA_ROLES = ("patch_embed", "qkv", "attn_out", "mlp", "head")


@dataclass
class VitForward:
    """What one LRP-aware forward produces.

    ``logits`` ``[B, C]``. Sinks (leaves, ``requires_grad``): ``pixels`` ``[B, 3, H, W]``, ``prefix`` ``[B, P, D]``
    (CLS, then the distillation token if any), ``pos_embed`` ``[B, N, D]`` (per-sample copy; ``N = P + Np``, or
    ``Np`` for models whose PE skips the prefix tokens). ``patch_tokens`` ``[B, Np, D]``: the patch-embedding
    output (not a leaf; its ``x * grad`` is the token-level semantic relevance). ``grid`` ``(Hp, Wp)``.
    """

    #: sinks that are not inputs (:func:`palrp_bench.lrp.attribution.absorbed_relevance` leaves them out)
    probes: ClassVar[tuple[str, ...]] = ("patch_tokens",)

    logits: torch.Tensor
    pixels: torch.Tensor
    patch_tokens: torch.Tensor
    prefix: torch.Tensor
    pos_embed: torch.Tensor
    grid: tuple[int, int]

    @property
    def sinks(self) -> dict:
        return {"pixels": self.pixels, "patch_tokens": self.patch_tokens, "prefix": self.prefix,
                "pos_embed": self.pos_embed}


@dataclass
class VitInputs:
    """Validated, normalised images ``[B, C, H, W]`` on the model's device and dtype."""

    pixels: torch.Tensor


def _timm_classes():
    from timm.layers import Mlp, PatchEmbed
    from timm.layers.layer_scale import LayerScale
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import Attention, Block, VisionTransformer
    return VisionTransformer, VisionTransformerDistilled, Block, Attention, Mlp, PatchEmbed, LayerScale


@register_twin
class VitTwin(Twin):
    """LRP-aware forward of a timm ViT / DeiT (see module docstring)."""

    modality = "pixels"
    starting_relevance = "unit"
    #: the official vision composite (docs/protocol.md section 1). docs/protocol.md names no vision rule correction,
    #: so the
    #: ``corrected`` protocol keeps it too; true AttnLRP rules are ``rules="attnlrp"`` / ``"attnlrp_gamma"``.
    default_composite = "official_vit"
    positional = LearnedAbsolute()
    #: the stabilisers of the official vision code (``stabilizers="official"``)
    official_stabilizers = OFFICIAL_VISION

    @property
    def official_code_ran(self) -> bool:
        """Whether the official code ran this model, so ``protocol=official`` defaults to its stabilisers: every
        timm ``VisionTransformer`` counts as DeiT (the official code ran DeiT-T/S/B, which timm builds as the plain
        ViT architecture, and nothing in a ViT's modules tells a DeiT training from another: the official rules
        apply to either unchanged), except the torchvision ViT (:func:`~.torchvision_vit.from_torchvision`), the
        AttnLRP paper's model, which the official code never ran."""
        return not from_torchvision(self.model)

    @classmethod
    def family(cls) -> str:
        return "vit/deit (timm VisionTransformer, VisionTransformerDistilled)"

    @classmethod
    def supports(cls, model) -> bool:
        """Any timm ``VisionTransformer``; configurations the twin cannot reproduce are refused by ``__init__``
        with a one-line :class:`UnsupportedModelError` naming the feature."""
        try:
            vit = _timm_classes()[0]
        except ImportError:  # pragma: no cover - timm is a core dependency
            return False
        return isinstance(model, vit)

    def __init__(self, model):
        _, distilled_cls, block_cls, attn_cls, mlp_cls, patch_cls, ls_cls = _timm_classes()
        self.model = model
        name = type(model).__name__

        def refuse(feature: str, fix: str = "use a DeiT/ViT with a CLS token, a learned position embedding and "
                                           "standard timm blocks"):
            raise UnsupportedModelError(f"{name}: {feature} is not supported by the DeiT/ViT LRP twin", fix)

        if getattr(model, "pos_embed", None) is None:
            refuse("a model without a learned position embedding (pos_embed)")
        if getattr(model, "cls_token", None) is None:
            refuse("a model without a CLS token")
        if getattr(model, "global_pool", "token") != "token":
            refuse(f"global_pool={model.global_pool!r}", "use a model that classifies from the CLS token "
                                                         "(global_pool='token')")
        if getattr(model, "reg_token", None) is not None:
            refuse("register tokens")
        if getattr(model, "attn_pool", None) is not None:
            refuse("attention pooling")
        pe = model.patch_embed
        if type(pe) is not patch_cls or not isinstance(pe.proj, nn.Conv2d):
            refuse(f"patch embedding {type(pe).__name__}")
        if getattr(pe, "dynamic_img_pad", False):
            refuse("dynamic_img_pad")
        if not isinstance(model.head, nn.Linear):
            refuse("a model without a linear classifier head (num_classes=0)")
        self.distilled = isinstance(model, distilled_cls)
        if self.distilled and not isinstance(model.head_dist, nn.Linear):
            refuse("a distilled model without a linear distillation head")
        for module, where in ((pe.norm, "patch_embed.norm"), (model.norm_pre, "norm_pre"), (model.norm, "norm"),
                              (model.fc_norm, "fc_norm")):
            if not isinstance(module, (nn.Identity, nn.LayerNorm)):
                refuse(f"{where} of type {type(module).__name__} (LayerNorm or Identity expected)")
        for i, blk in enumerate(model.blocks):
            if type(blk) is not block_cls:
                refuse(f"block {i} of type {type(blk).__name__}")
            attn, mlp = blk.attn, blk.mlp
            if type(attn) is not attn_cls:
                refuse(f"attention {type(attn).__name__} in block {i}")
            if not (isinstance(attn.q_norm, nn.Identity) and isinstance(attn.k_norm, nn.Identity)
                    and isinstance(getattr(attn, "norm", nn.Identity()), nn.Identity)
                    and getattr(attn, "gate", None) is None):
                refuse(f"qk-norm / scale-norm / gated attention in block {i}")
            if type(mlp) is not mlp_cls or not isinstance(getattr(mlp, "norm", nn.Identity()), nn.Identity):
                refuse(f"MLP {type(mlp).__name__} in block {i}")
            for ls in (blk.ls1, blk.ls2):
                if not isinstance(ls, (nn.Identity, ls_cls)):
                    refuse(f"layer scale {type(ls).__name__} in block {i}")
            for module, where in ((blk.norm1, "norm1"), (blk.norm2, "norm2")):
                if not isinstance(module, nn.LayerNorm):
                    refuse(f"{where} of type {type(module).__name__} in block {i}")
        self.patch_embed = pe
        self.blocks = model.blocks
        self.num_prefix = 2 if self.distilled else 1
        self.no_embed_class = bool(getattr(model, "no_embed_class", False))
        self.dynamic_img_size = bool(getattr(model, "dynamic_img_size", False))

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        return self.patch_embed.proj.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.patch_embed.proj.weight.dtype

    @property
    def patch_size(self) -> tuple[int, int]:
        return tuple(int(p) for p in self.patch_embed.patch_size)

    @property
    def in_chans(self) -> int:
        return int(self.patch_embed.proj.in_channels)

    def prepare_pixels(self, pixel_values) -> torch.Tensor:
        """Check a batch of normalised images (on any device) and move it to the model's device and dtype:
        ``[B, C, H, W]``. Checked where the caller keeps it, in the model's dtype, then moved once."""
        if not isinstance(pixel_values, torch.Tensor):
            raise BadInputError(f"pixel_values must be a tensor, got {type(pixel_values).__name__}",
                                "pass normalised images as a float tensor [batch, 3, H, W]")
        x = pixel_values
        if x.dim() == 3:
            x = x[None]
        if x.dim() != 4 or x.shape[1] != self.in_chans:
            raise BadInputError(f"pixel_values must have shape [batch, {self.in_chans}, H, W], got {tuple(x.shape)}",
                                "pass images channels-first with a batch dimension")
        if x.shape[0] == 0:
            raise BadInputError("empty batch of images", "pass at least one image")
        if not x.is_floating_point():
            raise BadInputError(f"pixel_values must be floating point, got {x.dtype}",
                                "convert to float and normalise with the model's mean/std")
        h, w = int(x.shape[2]), int(x.shape[3])
        ph, pw = self.patch_size
        if self.dynamic_img_size:
            if h % ph or w % pw or h < ph or w < pw:
                raise BadInputError(f"image size {h}x{w} is not a multiple of the patch size {ph}x{pw}",
                                    f"resize to a multiple of {ph}x{pw}")
        else:
            expected = tuple(int(s) for s in self.patch_embed.img_size)
            grid = tuple(int(g) for g in self.patch_embed.grid_size)
            if getattr(self.patch_embed, "strict_img_size", True):
                ok = (h, w) == expected
            else:
                ok = (h // ph, w // pw) == grid and h % ph == 0 and w % pw == 0
            if not ok:
                raise BadInputError(f"image size {h}x{w} does not match the model's {expected[0]}x{expected[1]}",
                                    f"resize the images to {expected[0]}x{expected[1]} (docs/protocol.md section 3)")
        x = x.to(dtype=self.dtype)
        if not bool(torch.isfinite(x).all()):
            raise BadInputError("pixel_values contain NaN or infinite values", "check the image loading")
        return x.to(device=self.device)

    def check_composite(self, composite: Composite) -> Composite:
        """Refuse composites naming gamma roles this twin does not have (they would be silently ignored)."""
        unknown = sorted(set(composite.linear_gamma) - set(GAMMA_ROLES))
        if unknown:
            raise BadInputError(f"composite {composite.name!r} sets gamma for unknown layer roles {unknown}",
                                f"DeiT/ViT roles are: {', '.join(GAMMA_ROLES)}")
        return composite

    def position_table(self, grid: tuple[int, int]) -> torch.Tensor:
        """The ``[1, N, D]`` position embedding used for a ``grid`` of patches (resampled as timm does for
        ``dynamic_img_size`` models; a fixed table otherwise)."""
        pos = self.model.pos_embed
        if self.dynamic_img_size:
            from timm.layers import resample_abs_pos_embed
            pos = resample_abs_pos_embed(pos, new_size=list(grid), old_size=list(self.patch_embed.grid_size),
                                         num_prefix_tokens=0 if self.no_embed_class else self.num_prefix)
        return pos.detach()

    # ------------------------------------------------------------------ forward
    def forward(self, pixels: torch.Tensor, composite: Composite, *, attention: str = "sdpa",
                recorder: rules.AttentionRecorder | None = None, stabilizers: Stabilizers = NONE) -> VitForward:
        """One LRP-aware forward from the pixel leaf ``pixels`` (``requires_grad``) to the logits.

        ``attention="eager"`` materialises the attention weights (same relevance; required by ``recorder``).
        ``stabilizers``: epsilon-rule stabilisers (module docstring); the forward values are the same for any.
        """
        composite = self.check_composite(get_composite(composite))
        stab = stabilizers
        model = self.model
        b = pixels.shape[0]
        tokens, grid = self._embed_patches(pixels, composite, stab)
        prefix_params = [model.cls_token] + ([model.dist_token] if self.distilled else [])
        prefix = torch.cat([p.detach().expand(b, -1, -1) for p in prefix_params], 1).clone().requires_grad_(True)
        pos = self.positional.sink(self.position_table(grid), b)
        if self.no_embed_class:
            x = torch.cat([prefix, rules.stabilize(tokens + pos, stab.add)], 1)
        else:
            x = rules.stabilize(torch.cat([prefix, tokens], 1) + pos, stab.add)
        x = self._norm(model.norm_pre, x, composite, stab.norm)
        for blk in self.blocks:
            x = self._block(blk, x, composite, attention, recorder, stab)
        x = self._norm(model.norm, x, composite, stab.final_norm)
        head_gamma = composite.gamma_for("head")
        if self.distilled:
            logits = (self._linear(model.head, rules.stabilize(x[:, 0], stab.copy), head_gamma, stab)
                      + self._linear(model.head_dist, rules.stabilize(x[:, 1], stab.copy), head_gamma, stab)) / 2
        else:
            pooled = self._norm(model.fc_norm, rules.stabilize(x[:, 0], stab.copy), composite, stab.final_norm)
            logits = self._linear(model.head, pooled, head_gamma, stab)
        return VitForward(logits, pixels, tokens, prefix, pos, grid)

    def _embed_patches(self, pixels: torch.Tensor, composite: Composite,
                       stab: Stabilizers = NONE) -> tuple[torch.Tensor, tuple[int, int]]:
        z = self._linear(self.patch_embed.proj, pixels, composite.gamma_for("patch_embed"), stab)
        grid = (int(z.shape[-2]), int(z.shape[-1]))
        tokens = z.flatten(2).transpose(1, 2)
        return self._norm(self.patch_embed.norm, tokens, composite, stab.norm), grid

    @staticmethod
    def _linear(module: nn.Module, x: torch.Tensor, gamma: float | None, stab: Stabilizers) -> torch.Tensor:
        """A linear / conv of its role: the gamma rule (with Zennit's stabiliser ``stab.gamma``) or the epsilon rule
        (stabilised by ``stab.linear``)."""
        if gamma is None:
            return rules.stabilize(module(x), stab.linear)
        return gamma_module(module, x, gamma, stabilizer=stab.gamma)

    @staticmethod
    def _norm(module: nn.Module, x: torch.Tensor, composite: Composite, eps: float = 0.0) -> torch.Tensor:
        """LayerNorm under ``composite.norm`` (Identity passes through); ``eps`` stabilises its output."""
        if isinstance(module, nn.Identity):
            return x
        return rules.stabilize(rules.layer_norm(x, module.weight, module.bias, module.eps, composite.norm), eps)

    def _block(self, blk, x, composite: Composite, attention: str, recorder,
               stab: Stabilizers = NONE) -> torch.Tensor:
        x = rules.stabilize(x, stab.copy)  # branch point: residual and norm1
        h = self._attention(blk.attn, self._norm(blk.norm1, x, composite, stab.norm), composite, attention, recorder,
                            stab)
        x = rules.stabilize(rules.stabilize(x + _layer_scale(blk.ls1, h), stab.add), stab.copy)
        h = self._mlp(blk.mlp, self._norm(blk.norm2, x, composite, stab.norm), composite, stab)
        return rules.stabilize(x + _layer_scale(blk.ls2, h), stab.add)

    def _attention(self, attn, h, composite: Composite, attention: str, recorder,
                   stab: Stabilizers = NONE) -> torch.Tensor:
        b, n, _ = h.shape
        heads, head_dim = attn.num_heads, attn.head_dim
        qkv = self._linear(attn.qkv, h, composite.gamma_for("qkv"), stab)
        q, k, v = qkv.reshape(b, n, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        eager = attention == "eager"  # the score stabiliser needs the materialised scores (lrp/stabilizers.py)
        o = rules.attention(q, k, v, mask=None, causal=False, scale=attn.scale,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder,
                            qk_eps=stab.qk if eager else 0.0, av_eps=stab.av)
        o = o.transpose(1, 2).reshape(b, n, heads * head_dim)
        return self._linear(attn.proj, o, composite.gamma_for("attn_out"), stab)

    def _mlp(self, mlp, h, composite: Composite, stab: Stabilizers = NONE) -> torch.Tensor:
        gamma = composite.gamma_for("mlp")
        h = self._linear(mlp.fc1, h, gamma, stab)
        h = rules.activation(h, mlp.act, composite.ungated_activation)
        return self._linear(mlp.fc2, h, gamma, stab)

    # ------------------------------------------------------------------ explanation protocol
    def prepare(self, pixel_values, attention_mask=None) -> VitInputs:
        """Check a batch of normalised images (:meth:`prepare_pixels`), or an image processor's output mapping
        holding ``pixel_values`` (:func:`~.token_inputs.model_inputs`); vision has no attention mask."""
        found = model_inputs(pixel_values, attention_mask, takes=("pixel_values",), model=type(self.model).__name__)
        if found.get("attention_mask") is not None:
            raise BadInputError("attention_mask was given for a vision transformer", "pass attention_mask=None")
        return VitInputs(self.prepare_pixels(found["pixel_values"]))

    def run(self, inputs: VitInputs, composite: Composite, *, positional_sinks: bool = True,
            attention: str = "sdpa", stabilizers: Stabilizers = NONE) -> VitForward:
        """The LRP-aware forward of :func:`palrp_bench.lrp.attribution.attribute` (fresh pixel leaf). The learned
        PE is always a sink (it changes no other relevance), so ``positional_sinks`` has no effect."""
        if attention not in ("sdpa", "eager"):
            raise BadInputError(f"unknown attention implementation {attention!r}", "use sdpa or eager")
        return self.forward(inputs.pixels.detach().clone().requires_grad_(True), composite, attention=attention,
                            stabilizers=stabilizers)

    def summarize(self, inputs: VitInputs, attribution: Attribution) -> dict:
        """Pixel-level semantic map ``[B, H, W]`` (patch-embedding input summed over RGB), per-patch positional
        relevance ``[B, Hp, Wp]`` (prefix rows dropped) and the extras of
        :class:`~palrp_bench.lrp.explanation.Explanation` (CLS / distillation terms, token-level semantic relevance,
        Appendix F totals, ``patch_size``)."""
        r = attribution.relevance
        b = inputs.pixels.shape[0]
        hp, wp = attribution.forward.grid
        semantic = r["pixels"].sum(1)
        patch_semantic = r["patch_tokens"].sum(-1).reshape(b, hp, wp)
        prefix_semantic = r["prefix"].sum(-1)
        pos_tokens = self.positional.reduce(r["pos_embed"])
        if self.no_embed_class:
            prefix_positional = torch.zeros_like(prefix_semantic)
            positional = pos_tokens.reshape(b, hp, wp)
        else:
            prefix_positional = pos_tokens[:, :self.num_prefix]
            positional = pos_tokens[:, self.num_prefix:].reshape(b, hp, wp)
        semantic_total = semantic.sum((1, 2))
        positional_total = positional.sum((1, 2))
        extras = {
            "cls_semantic": prefix_semantic[:, 0],
            "cls_positional": prefix_positional[:, 0],
            "patch_semantic": patch_semantic,
            "semantic_total": semantic_total,
            "positional_total": positional_total,
            "semantic_total_incl_prefix": semantic_total + prefix_semantic.sum(1),
            "positional_total_incl_prefix": positional_total + prefix_positional.sum(1),
            "patch_size": self.patch_size,
        }
        if self.distilled:
            extras["dist_semantic"] = prefix_semantic[:, 1]
            extras["dist_positional"] = prefix_positional[:, 1]
        return {"semantic": semantic, "positional": positional, "extras": extras}


def _layer_scale(ls: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """timm ``LayerScale``: an elementwise product with a constant (epsilon rule = plain gradient)."""
    return h if isinstance(ls, nn.Identity) else h * ls.gamma
