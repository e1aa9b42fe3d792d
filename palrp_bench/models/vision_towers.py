"""The vision encoders of vision-language models, as LRP-aware forwards (docs/engine.md, "Vision-language models").

A tower wraps the library's vision module of a loaded model without touching it: it calls the module's own linear
layers and re-implements the wiring with the rules of :mod:`palrp_bench.lrp.rules` under a
:class:`~palrp_bench.lrp.composites.Composite`, as the ViT twins do (:mod:`palrp_bench.models.vit`):

* linear maps and the patch-embedding convolution by *role* (:data:`GAMMA_ROLES`): the generalised gamma rule
  where the composite's ``linear_gamma`` names the role, else the epsilon rule (eps -> 0, plain gradient);
* LayerNorm / RMSNorm with the normaliser constant, the activations under the identity rule, gated MLPs with the
  uniform rule on the product; attention through :func:`palrp_bench.lrp.rules.attention` with the composite's shares
  (full within an image; Qwen2.5-VL's windowed layers within a window, as a boolean mask over the patches in their
  original order: the library's reordering of the patches by window changes no value);
* the position encoding as relevance sinks: Qwen2-VL's 2-D rotary tables of the patches (kind ``rope_2d``: one leaf
  copy of ``(cos, sin)`` per layer when positional sinks are on), CLIP's and SigLIP's learned position tables
  (kind ``learned_absolute``: one leaf per image, always read; it changes no other relevance).

Two towers cover the families:

* :class:`QwenVisionTower` (Qwen2-VL: LayerNorm, GELU MLP; Qwen2.5-VL: RMSNorm, gated SiLU MLP with biases, windowed
  attention except in ``fullatt_block_indexes``): pixel rows ``[N, C * T * P * P]`` per patch as the processor gives
  them (``image_grid_thw`` holds each image's ``(t, h, w)``), the patch embedding (a ``Conv3d`` whose kernel equals
  its stride: a linear map of each row), rows ordered in blocks of ``m x m`` patches (``m = spatial_merge_size``)
  that the merger joins into one language-model token;
* :class:`ViTEncoderTower` (CLIP in LLaVA, SigLIP in Gemma 3): images ``[n, C, H, W]``, a ``Conv2d`` patch
  embedding, a CLS token (CLIP), a learned table, CLIP's ``pre_layrnorm``, the encoder layers up to the selected one
  (LLaVA: ``vision_feature_layer``, default ``-2``) and SigLIP's ``post_layernorm``.

A tower's forward returns :class:`TowerOutput`: the features of every image's patches in the order the projector
reads them, the sinks, and :class:`ImageLayout` (computed once in ``prepare``): where each patch lies and which
language-model token it feeds, so the relevance of the pixels and of the tower's positions can be reported per
token and on the image grid.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import BadInputError, UnsupportedModelError
from ..lrp import rules
from ..lrp.composites import Composite
from ..lrp.gamma import gamma_linear, gamma_module
from ..lrp.positional import LearnedAbsolute, Rope2D

__all__ = ["GAMMA_ROLES", "ImageLayout", "TowerOutput", "QwenVisionTower", "ViTEncoderTower", "linear_by_role",
           "tower_norm", "block_major_cells"]

#: linear-layer roles a composite's ``linear_gamma`` may name for a vision-language model: the tower's patch
#: embedding, attention input and output projections and MLP linears, and the projector's linears
GAMMA_ROLES = ("vision_patch_embed", "vision_qkv", "vision_attn_out", "vision_mlp", "projector")


def linear_by_role(module: nn.Module, x: torch.Tensor, composite: Composite, role: str) -> torch.Tensor:
    """``module(x)`` under the gamma rule where ``composite`` names ``role`` (:data:`GAMMA_ROLES`), else the epsilon
    rule (the module itself: any linear implementation, bitsandbytes' included)."""
    return gamma_module(module, x, composite.gamma_for(role))


@dataclass
class ImageLayout:
    """Where the patches of each image lie and which language-model token each feeds (no gradient; from the inputs).

    * ``patch_grid`` / ``token_grid``: ``[n, 2]`` long, each image's grid of patches and of language-model tokens
      (rows, columns);
    * ``patch_cell``: ``[n, Np, 2]`` long, the (row, column) of every patch in the patch grid (``-1`` for padding);
    * ``patch_token``: ``[n, Np]`` long, the index (within the image, row-major over the token grid) of the
      language-model token the patch feeds (``-1`` for padding);
    * ``valid``: ``[n, Np]`` bool, real patches (images of different sizes are padded to the largest);
    * ``patch_size``: pixels per patch side.
    """

    patch_grid: torch.Tensor
    token_grid: torch.Tensor
    patch_cell: torch.Tensor
    patch_token: torch.Tensor
    valid: torch.Tensor
    patch_size: int

    @property
    def tokens_per_image(self) -> list[int]:
        return [int(h) * int(w) for h, w in self.token_grid.tolist()]


@dataclass
class TowerOutput:
    """One tower forward: ``features`` ``[n, Np, D]`` (the tower's output per patch, in the order the projector reads
    them; padding rows are zeros), the sinks (leaves: ``pixels``, the learned table ``pos_embed`` ``[n, N, D]``, the
    CLS token ``prefix`` ``[n, 1, D]``, the rotary tables ``cos`` / ``sin``, one ``[n, Np, d]`` leaf per layer; None or
    empty where the tower has none) and the probe ``patch_tokens`` ``[n, Np, D]`` (the patch embedding's output)."""

    features: torch.Tensor
    pixels: torch.Tensor
    patch_tokens: torch.Tensor
    prefix: torch.Tensor | None = None
    pos_embed: torch.Tensor | None = None
    cos: list = field(default_factory=list)
    sin: list = field(default_factory=list)


def tower_norm(module: nn.Module, x: torch.Tensor, composite: Composite) -> torch.Tensor:
    """A tower's LayerNorm or RMSNorm (Qwen2.5-VL) under ``composite.norm``."""
    if isinstance(module, nn.LayerNorm):
        return rules.layer_norm(x, module.weight, module.bias, module.eps, composite.norm)
    return rules.rms_norm(x, module.weight, module.variance_epsilon, composite.norm)


def block_major_cells(h: int, w: int, m: int) -> torch.Tensor:
    """``[h * w, 2]`` (row, column) of the patches of an ``h x w`` grid in Qwen2-VL's order: blocks of ``m x m``
    patches row-major, the patches of a block row-major (``vision_utils.get_vision_position_ids``)."""
    rows = torch.arange(h)[:, None].expand(h, w).reshape(h // m, m, w // m, m).transpose(1, 2).flatten()
    cols = torch.arange(w)[None, :].expand(h, w).reshape(h // m, m, w // m, m).transpose(1, 2).flatten()
    return torch.stack([rows, cols], -1)


def _attend_mask(valid: torch.Tensor, same: torch.Tensor | None = None) -> torch.Tensor | None:
    """Boolean ``[n, 1, N, N]`` (True = attend): real keys (and, with ``same`` ``[n, N, N]``, keys in the query's window);
    every query keeps its own position, so a padding row is never empty. None when nothing is hidden."""
    keys = valid[:, None, None, :]
    mask = keys if same is None else keys & same[:, None]
    if bool(mask.all()):
        return None
    eye = torch.eye(valid.shape[1], dtype=torch.bool, device=valid.device)[None, None]
    return mask | eye


class QwenVisionTower:
    """Qwen2-VL's / Qwen2.5-VL's vision encoder up to the merger's input (module docstring).

    ``visual``: the library's ``Qwen2VisionTransformerPretrainedModel`` / ``Qwen2_5_VisionTransformerPretrainedModel``.
    ``windowed``: Qwen2.5-VL's window attention (``window_size``, ``fullatt_block_indexes``)."""

    positional = Rope2D()

    def __init__(self, visual: nn.Module, windowed: bool):
        self.visual = visual
        self.windowed = windowed
        self.config = visual.config
        self.merge = int(visual.spatial_merge_size)
        embed = visual.patch_embed
        self.patch_size = int(embed.patch_size)
        self.temporal_patch_size = int(embed.temporal_patch_size)
        self.in_channels = int(embed.in_channels)
        self.row_width = self.in_channels * self.temporal_patch_size * self.patch_size ** 2
        self.full_blocks = set(getattr(visual, "fullatt_block_indexes", None) or ()) if windowed else None
        if windowed:
            self.window_units = int(self.config.window_size) // self.merge // self.patch_size
            if self.window_units < 1:
                raise UnsupportedModelError(f"vision window_size {self.config.window_size} is smaller than one "
                                            "merged patch", "use the model's own vision config")

    @property
    def num_layers(self) -> int:
        return len(self.visual.blocks)

    @property
    def dtype(self) -> torch.dtype:
        return self.visual.patch_embed.proj.weight.dtype

    def layout(self, grid_thw: torch.Tensor) -> ImageLayout:
        """:class:`ImageLayout` of images with ``image_grid_thw`` rows ``(t, h, w)`` (images only: ``t = 1``)."""
        grids = [(int(t), int(h), int(w)) for t, h, w in grid_thw.tolist()]
        m = self.merge
        for t, h, w in grids:
            if t != 1:
                raise BadInputError(f"an image_grid_thw row has t = {t}: videos and multi-frame inputs are not "
                                    "explained", "pass images (one frame each)")
            if h % m or w % m or h < m or w < m:
                raise BadInputError(f"image_grid_thw ({t}, {h}, {w}) is not a multiple of spatial_merge_size {m}",
                                    "pass what the model's image processor returns")
        n_max = max(h * w for _, h, w in grids)
        cells = torch.full((len(grids), n_max, 2), -1, dtype=torch.long)
        token = torch.full((len(grids), n_max), -1, dtype=torch.long)
        for i, (_, h, w) in enumerate(grids):
            cells[i, :h * w] = block_major_cells(h, w, m)
            token[i, :h * w] = torch.arange(h * w) // (m * m)
        patch_grid = torch.tensor([[h, w] for _, h, w in grids], dtype=torch.long)
        return ImageLayout(patch_grid, patch_grid // m, cells, token, token >= 0, self.patch_size)

    def prepare_pixels(self, pixel_values: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
        """The processor's rows ``[sum N, C * T * P * P]`` per image, padded: ``[n, Np, C * T * P * P]``."""
        counts = layout.valid.sum(1).tolist()
        if pixel_values.dim() != 2 or pixel_values.shape[1] != self.row_width:
            raise BadInputError(f"pixel_values must have shape [patches, {self.row_width}] for this model, got "
                                f"{tuple(pixel_values.shape)}", "pass what the model's image processor returns")
        if pixel_values.shape[0] != sum(counts):
            raise BadInputError(f"pixel_values holds {pixel_values.shape[0]} patches, image_grid_thw "
                                f"{sum(counts)}", "pass pixel_values and image_grid_thw from one processor call")
        out = pixel_values.new_zeros(len(counts), layout.valid.shape[1], self.row_width)
        for i, part in enumerate(pixel_values.split(counts)):
            out[i, :len(part)] = part
        return out

    def patch_sums(self, pixels: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
        """``[n, Np]``: the elementwise relevance of the pixel rows ``[n, Np, C * T * P * P]`` summed per patch."""
        return pixels.sum(-1)

    def pixel_map(self, pixels: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
        """``[n, H, W]``: the pixel rows' relevance summed over channels and frames, each patch put back at its place
        (``H = Hp * P``; padded to the largest image)."""
        n, np_, _ = pixels.shape
        p = self.patch_size
        per_pixel = pixels.reshape(n, np_, self.in_channels * self.temporal_patch_size, p, p).sum(2)
        hp, wp = (int(v) for v in layout.patch_grid.max(0).values)
        out = pixels.new_zeros(n, hp, wp, p, p)
        cells = layout.patch_cell.to(pixels.device)
        for i in range(n):
            keep = layout.valid[i].to(pixels.device)
            out[i, cells[i, keep, 0], cells[i, keep, 1]] = per_pixel[i, keep]
        return out.permute(0, 1, 3, 2, 4).reshape(n, hp * p, wp * p)

    def positional_elements(self, relevance: dict, layout: ImageLayout) -> torch.Tensor:
        """``[n, S, 2, d, Np]``: the elementwise relevance of each layer's ``(cos, sin)`` sinks per patch (zeros, one
        element, when the tables were constants)."""
        cos, sin = relevance.get("vision_cos") or [], relevance.get("vision_sin") or []
        n, np_ = layout.valid.shape
        if not cos:
            like = relevance["pixels"]
            return like.new_zeros(n, self.num_layers, 2, 1, np_)
        return torch.stack([torch.stack([c, s], 1) for c, s in zip(cos, sin)], 1).transpose(-1, -2)

    def rope_tables(self, layout: ImageLayout, device) -> tuple[torch.Tensor, torch.Tensor]:
        """The library's rotary tables ``(cos, sin)`` ``[n, Np, d]`` of every patch (zeros at padding)."""
        positions = layout.patch_cell.clamp(min=0).reshape(-1, 2).to(device)
        probe = torch.empty(0, device=device)
        with torch.no_grad():
            cos, sin = self.visual.rotary_pos_emb(probe, positions)
        n, np_ = layout.valid.shape
        keep = layout.valid.to(device)[..., None]
        return (cos.reshape(n, np_, -1) * keep, sin.reshape(n, np_, -1) * keep)

    def window_mask(self, layout: ImageLayout, device) -> torch.Tensor:
        """``[n, Np, Np]``: patches in the same window of ``window_size`` pixels (Qwen2.5-VL; in merged units, as
        ``vision_utils.get_vision_window_index`` tiles each image's token grid)."""
        unit_cell = layout.patch_cell.clamp(min=0) // self.merge
        ws = self.window_units
        wide = (layout.token_grid[:, 1] + ws - layout.token_grid[:, 1] % ws) // ws  # windows per row (library pads)
        window = (unit_cell[..., 0] // ws) * wide[:, None] + unit_cell[..., 1] // ws
        return (window[:, :, None] == window[:, None, :]).to(device)

    def forward(self, pixels: torch.Tensor, layout: ImageLayout, composite: Composite, *, positional_sinks: bool,
                attention: str = "sdpa") -> TowerOutput:
        """From the pixel leaf ``pixels`` ``[n, Np, C * T * P * P]`` to the merger's input ``[n, Np, D]``."""
        visual = self.visual
        n, np_, _ = pixels.shape
        proj = visual.patch_embed.proj
        weight = proj.weight.reshape(proj.out_channels, -1)
        gamma = composite.gamma_for("vision_patch_embed")
        x = (F.linear(pixels, weight, proj.bias) if gamma is None
             else gamma_linear(pixels, weight, proj.bias, gamma))
        tokens = x
        valid = layout.valid.to(pixels.device)
        cos, sin = self.rope_tables(layout, pixels.device)
        full = _attend_mask(valid)
        windowed = _attend_mask(valid, self.window_mask(layout, pixels.device)) if self.windowed else None
        cos_leaves, sin_leaves = [], []
        for index, blk in enumerate(visual.blocks):
            c, s = self.positional.layer_sinks(cos, sin, n, positional_sinks)
            if positional_sinks:
                cos_leaves.append(c)
                sin_leaves.append(s)
            mask = windowed if self.windowed and index not in self.full_blocks else full
            h = self._attention(blk.attn, tower_norm(blk.norm1, x, composite), c, s, mask, composite, attention)
            x = x + h
            x = x + self._mlp(blk.mlp, tower_norm(blk.norm2, x, composite), composite)
        return TowerOutput(x * valid[..., None], pixels, tokens, cos=cos_leaves, sin=sin_leaves)

    def _attention(self, attn, h, cos, sin, mask, composite: Composite, attention: str) -> torch.Tensor:
        n, np_, _ = h.shape
        qkv = linear_by_role(attn.qkv, h, composite, "vision_qkv")
        q, k, v = qkv.reshape(n, np_, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        acc = rules.float32_at_least(h.dtype)  # the library rotates in float32
        q = Rope2D.apply(q.to(acc), cos.to(acc), sin.to(acc), 0, "half", composite.product).to(h.dtype)
        k = Rope2D.apply(k.to(acc), cos.to(acc), sin.to(acc), 0, "half", composite.product).to(h.dtype)
        o = rules.attention(q, k, v, mask=mask, causal=False, scale=attn.scaling,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, site="vision")
        return linear_by_role(attn.proj, o.transpose(1, 2).reshape(n, np_, -1), composite, "vision_attn_out")

    def _mlp(self, mlp, h, composite: Composite) -> torch.Tensor:
        if hasattr(mlp, "gate_proj"):  # Qwen2.5-VL: down(act(gate(h)) * up(h))
            gate = rules.activation(linear_by_role(mlp.gate_proj, h, composite, "vision_mlp"), mlp.act_fn,
                                    composite.activation)
            up = linear_by_role(mlp.up_proj, h, composite, "vision_mlp")
            return linear_by_role(mlp.down_proj, rules.product(gate, up, rule=composite.product), composite,
                                  "vision_mlp")
        h = rules.activation(linear_by_role(mlp.fc1, h, composite, "vision_mlp"), mlp.act,
                             composite.ungated_activation)
        return linear_by_role(mlp.fc2, h, composite, "vision_mlp")


class ViTEncoderTower:
    """CLIP's (LLaVA) or SigLIP's (Gemma 3) vision transformer up to the selected hidden state (module docstring).

    ``vision``: the library's ``CLIPVisionModel`` / ``SiglipVisionModel``; ``feature_layer``: the index into the
    library's ``hidden_states`` (0 = the embeddings after ``pre_layrnorm``, ``i`` = the output of layer ``i``; negative
    from the end) whose output is read, with ``post_layernorm`` applied after the last layer when ``post_norm`` (SigLIP's
    ``last_hidden_state``); ``drop_prefix``: the CLS row is not passed on (LLaVA's ``default`` feature selection)."""

    positional = LearnedAbsolute()

    def __init__(self, vision: nn.Module, feature_layer: int, post_norm: bool, drop_prefix: bool):
        self.vision = vision
        embeddings = vision.embeddings
        self.embeddings = embeddings
        self.layers = vision.encoder.layers
        self.has_cls = hasattr(embeddings, "class_embedding")
        self.pre_norm = getattr(vision, "pre_layrnorm", None)
        self.post_norm = vision.post_layernorm if post_norm else None
        n = len(self.layers)
        self.depth = feature_layer if feature_layer >= 0 else n + 1 + feature_layer
        if not 0 <= self.depth <= n:
            raise UnsupportedModelError(f"vision_feature_layer {feature_layer} is outside the {n} vision layers",
                                        "use the model's own config")
        self.drop_prefix = drop_prefix and self.has_cls
        conv = embeddings.patch_embedding
        self.patch_size = int(conv.kernel_size[0])
        self.image_size = int(embeddings.image_size)
        self.in_channels = int(conv.in_channels)

    @property
    def num_prefix(self) -> int:
        return 1 if self.has_cls else 0

    @property
    def dtype(self) -> torch.dtype:
        return self.embeddings.patch_embedding.weight.dtype

    def layout(self, pixel_values: torch.Tensor, token_grid_of) -> ImageLayout:
        """:class:`ImageLayout` of the square images ``pixel_values`` ``[n, C, H, W]`` (checked);
        ``token_grid_of(patch_side) -> (rows, columns, k)``: the projector's token grid, each token pooling ``k x k``
        patches (LLaVA: one patch per token)."""
        n_images = len(self.check_pixels(pixel_values))
        side = self.image_size // self.patch_size
        rows, cols, k = token_grid_of(side)
        r = torch.arange(side)[:, None].expand(side, side).flatten()
        c = torch.arange(side)[None, :].expand(side, side).flatten()
        cells = torch.stack([r, c], -1)
        token = (r // k) * cols + c // k
        grid = torch.tensor([[side, side]] * n_images, dtype=torch.long)
        return ImageLayout(grid, torch.tensor([[rows, cols]] * n_images, dtype=torch.long),
                           cells.expand(n_images, -1, -1).clone(), token.expand(n_images, -1).clone(),
                           torch.ones(n_images, side * side, dtype=torch.bool), self.patch_size)

    def patch_sums(self, pixels: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
        """``[n, Np]``: the elementwise relevance of the images ``[n, C, H, W]`` summed per patch (row-major; pixels
        outside the patch grid are never read)."""
        n, p = pixels.shape[0], self.patch_size
        side = self.image_size // p
        grid = pixels[:, :, :side * p, :side * p].reshape(n, -1, side, p, side, p)
        return grid.sum((1, 3, 5)).reshape(n, side * side)

    def pixel_map(self, pixels: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
        """``[n, H, W]``: the images' relevance summed over channels."""
        return pixels.sum(1)

    def positional_elements(self, relevance: dict, layout: ImageLayout) -> torch.Tensor:
        """``[n, 1, 2, D, Np]``: the elementwise relevance of the learned table's patch rows as one sink ``[table,
        0]`` (the CLS row is reported apart)."""
        rows = relevance["vision_pos_embed"][:, self.num_prefix:].transpose(1, 2)      # [n, D, Np]
        return torch.stack([rows, torch.zeros_like(rows)], 1)[:, None]

    def prepare_pixels(self, pixel_values: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
        """The images ``[n, C, H, W]`` as they are (checked by :meth:`layout`)."""
        return self.check_pixels(pixel_values)

    def check_pixels(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``pixel_values`` ``[n, C, H, W]`` of the tower's image size, else a one-line error."""
        if pixel_values.dim() != 4 or pixel_values.shape[1] != self.in_channels:
            raise BadInputError(f"pixel_values must have shape [images, {self.in_channels}, H, W], got "
                                f"{tuple(pixel_values.shape)}", "pass what the model's image processor returns")
        if tuple(pixel_values.shape[2:]) != (self.image_size, self.image_size):
            raise BadInputError(f"image size {tuple(pixel_values.shape[2:])} does not match the model's "
                                f"{self.image_size}x{self.image_size}", "pass what the model's image processor returns")
        return pixel_values

    def forward(self, pixels: torch.Tensor, layout: ImageLayout, composite: Composite, *,
                positional_sinks: bool = True, attention: str = "sdpa") -> TowerOutput:
        """From the pixel leaf ``[n, C, H, W]`` to the selected features ``[n, Np, D]`` (the CLS row dropped where the
        model drops it; module docstring). The learned table is always a sink (it changes no other relevance), so
        ``positional_sinks`` has no effect."""
        embeddings = self.embeddings
        n = pixels.shape[0]
        z = linear_by_role(embeddings.patch_embedding, pixels, composite, "vision_patch_embed")
        tokens = z.flatten(2).transpose(1, 2)
        table = embeddings.position_embedding.weight[None]
        pos = LearnedAbsolute.sink(table, n)
        prefix = None
        if self.has_cls:
            prefix = embeddings.class_embedding.detach().expand(n, 1, -1).clone().requires_grad_(True)
            x = torch.cat([prefix, tokens], 1) + pos
        else:
            x = tokens + pos
        if self.pre_norm is not None:
            x = tower_norm(self.pre_norm, x, composite)
        for layer in list(self.layers)[:self.depth]:
            x = x + self._attention(layer.self_attn, tower_norm(layer.layer_norm1, x, composite), composite, attention)
            mlp = layer.mlp
            h = rules.activation(linear_by_role(mlp.fc1, tower_norm(layer.layer_norm2, x, composite), composite,
                                                "vision_mlp"), mlp.activation_fn, composite.ungated_activation)
            x = x + linear_by_role(mlp.fc2, h, composite, "vision_mlp")
        if self.post_norm is not None and self.depth == len(self.layers):
            x = tower_norm(self.post_norm, x, composite)
        if self.drop_prefix:
            x = x[:, self.num_prefix:]
        return TowerOutput(x, pixels, tokens, prefix=prefix, pos_embed=pos)

    def _attention(self, attn, h, composite: Composite, attention: str) -> torch.Tensor:
        n, t, _ = h.shape

        def heads(name):
            return linear_by_role(getattr(attn, name), h, composite, "vision_qkv").view(n, t, -1, attn.head_dim
                                                                                        ).transpose(1, 2)

        o = rules.attention(heads("q_proj"), heads("k_proj"), heads("v_proj"), mask=None, causal=False,
                            scale=attn.scale, weights_share=composite.attn_weights_share,
                            value_share=composite.attn_value_share, qk_share=composite.attn_qk_share,
                            implementation=attention, site="vision")
        return linear_by_role(attn.out_proj, o.transpose(1, 2).reshape(n, t, -1), composite, "vision_attn_out")
