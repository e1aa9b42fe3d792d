"""Vision-language twins: one LRP-aware forward from the pixels and the text tokens to a next-token logit
(docs/engine.md, "Vision-language models").

A vision-language model (Qwen2-VL, Qwen2.5-VL, LLaVA, Gemma 3) is a vision tower, a projector and a decoder language
model: the projected image features replace the image placeholder tokens of the text (the library's
``masked_scatter``), and the language model reads them as any other input embedding. The twin
(:class:`VisionLanguageTwin`) composes

* the tower (:mod:`palrp_bench.models.vision_towers`) from a leaf copy of the pixels (the image's semantic sink)
  with its own positional sinks (2-D rotary tables, or a learned table and the CLS token);
* the family's projector (the family module's function: Qwen's patch merger, LLaVA's MLP, Gemma 3's pooled
  projection), the linears under the role ``projector``;
* the decoder twin's language model (:class:`~palrp_bench.models.decoder.DecoderTwin`, wiring and rules unchanged)
  from the merged embeddings, with the text tokens' embeddings as their semantic sink and the language model's
  RoPE sinks; Qwen's 3-D M-RoPE positions come from the library's ``get_rope_index`` (kind ``mrope``), Gemma 3's image
  tokens see their whole image (``token_type_ids``, as the library's mask).

What differs between families is data: a :class:`VlmSpec` (registered by :func:`register_vlm` in the family's module)
names the language model's spec, the tower, the projector, the inputs the processor returns, how positions are
counted and whether image tokens attend to each other.

Relevance per language-model token (``Explanation`` fields over the ``T`` tokens of the text, image placeholders
included): text tokens take their embedding's relevance; an image token takes the relevance of the pixels of the
patches that feed it (Qwen: its ``2 x 2`` merged patches; LLaVA: one patch; Gemma 3: the pooled ``k x k`` patches),
and the positional part of the tower's sinks of those patches. :meth:`VisionLanguageTwin.split` lays the final scores
of each image's tokens out on its grid (``extras["image_scores"]``: the heatmap).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Callable, ClassVar

import torch

from ..errors import BadInputError, UnsupportedModelError
from ..lrp.attribution import Attribution
from ..lrp.composites import Composite, get_composite
from ..lrp.explanation import Explanation
from ..lrp.positional import MRoPE, PositionalRelevance, real_token_positions
from ..lrp.stabilizers import NONE, Stabilizers
from .decoder import DECODER_SPECS, DecoderSpec, DecoderTwin, TwinOutput
from .registry import discover, register_twin
from .token_inputs import attention_mask_of, model_inputs, per_token, token_batch
from .vision_towers import GAMMA_ROLES, ImageLayout, TowerOutput

__all__ = ["VlmSpec", "VLM_SPECS", "register_vlm", "vlm_spec_for", "VisionLanguageTwin", "VlmInputs", "VlmForward"]


@dataclass(frozen=True)
class VlmSpec:
    """A vision-language family, declaratively.

    * ``family``; ``model_types``: the ``config.model_type`` values it covers.
    * ``language``: the language model's :class:`~palrp_bench.models.decoder.DecoderSpec`, or None for the spec
      registered for ``config.text_config.model_type`` (LLaVA: any decoder family); ``language_model``: its dotted
      path on the model (the spec's ``backbone`` is replaced by it).
    * ``tower(model)``: the vision tower (:mod:`~palrp_bench.models.vision_towers`); ``layout(model, tower, inputs)``:
      its :class:`~palrp_bench.models.vision_towers.ImageLayout` from the prepared inputs (a dict of the processor's
      tensors); ``project(model, tower_output, composite)``: the projected features ``[n, tokens, D]`` of every image,
      tokens row-major over its token grid.
    * ``inputs``: what the processor returns besides ``input_ids``, ``attention_mask`` and ``pixel_values`` that the
      family reads (``image_grid_thw``, ``mm_token_type_ids``, ``token_type_ids``); ``required``: those without
      which images cannot be explained.
    * ``positions``: ``"mrope"`` (3-D positions from the library's ``model.model.get_rope_index``) or ``"text"``
      (one position per token, counted over real tokens).
    * ``image_blocks``: image tokens attend to every token of their image (Gemma 3, when ``token_type_ids`` are
      given, as the library does).
    * ``checks``: functions of the model returning a refusal reason, or None.
    * ``image_shape(config)``: ``(vision patches, language-model tokens)`` of one image of a model with this config
      (what the cost model prices, :mod:`palrp_bench.models.architecture`; Qwen's images vary: a nominal size).
    """

    family: str
    model_types: tuple[str, ...]
    tower: Callable[[Any], Any]
    layout: Callable[[Any, Any, dict], ImageLayout]
    project: Callable[[Any, TowerOutput, Composite], torch.Tensor]
    language: DecoderSpec | None = None
    language_model: str = "model.language_model"
    inputs: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    positions: str = "text"
    image_blocks: bool = False
    checks: tuple[Callable[[Any], str | None], ...] = ()
    image_shape: Callable[[Any], tuple[int, int]] = lambda config: (0, 0)


VLM_SPECS: dict[str, VlmSpec] = {}


def register_vlm(spec: VlmSpec) -> VlmSpec:
    """Make a vision-language family known to :class:`VisionLanguageTwin`."""
    VLM_SPECS[spec.family] = spec
    return spec


def vlm_spec_for(model) -> VlmSpec | None:
    """The spec covering a Hugging Face model object (by ``config.model_type``), or None."""
    discover()
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return next((spec for spec in VLM_SPECS.values() if model_type in spec.model_types), None)


@dataclass
class VlmInputs:
    """Validated inputs of one explanation (on the model's device): ``input_ids`` ``[B, T]``, ``attention_mask`` or
    None, the explained position per sample, ``image_mask`` ``[B, T]`` (image placeholder tokens), and with images the
    tower's pixels (:meth:`VisionLanguageTwin.prepare`), their :class:`ImageLayout`, the language model's position
    ids (``[3, B, T]`` for M-RoPE; None: counted over real tokens) and Gemma 3's image groups ``[B, T]`` (-1 outside
    images; None: causal attention only)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    last_index: torch.Tensor
    image_mask: torch.Tensor
    pixels: torch.Tensor | None = None
    layout: ImageLayout | None = None
    position_ids: torch.Tensor | None = None
    image_groups: torch.Tensor | None = None
    embeds: torch.Tensor | None = None


@dataclass
class VlmForward:
    """One LRP-aware forward: the language model's record (``logits`` and its sinks), the text-embedding leaf and the
    tower's record (None without images)."""

    #: sinks that are not inputs (:func:`palrp_bench.lrp.attribution.absorbed_relevance` leaves them out)
    probes: ClassVar[tuple[str, ...]] = ("patch_tokens",)

    lm: TwinOutput
    text: torch.Tensor
    tower: TowerOutput | None

    @property
    def logits(self) -> torch.Tensor:
        return self.lm.logits

    @property
    def sinks(self) -> dict:
        sinks = {"embeds": self.text, "cos": self.lm.cos, "sin": self.lm.sin}
        tower = self.tower
        if tower is not None:
            sinks.update(pixels=tower.pixels, patch_tokens=tower.patch_tokens, vision_cos=tower.cos,
                         vision_sin=tower.sin)
            if tower.pos_embed is not None:
                sinks["vision_pos_embed"] = tower.pos_embed
            if tower.prefix is not None:
                sinks["vision_prefix"] = tower.prefix
        return sinks


@register_twin
class VisionLanguageTwin(DecoderTwin):
    """LRP-aware forward of a vision-language ``*ForConditionalGeneration`` (module docstring)."""

    modality = "image_text"
    #: the official PA-LRP code never ran a vision-language model: no official stabilisers
    official_stabilizers = None
    #: the language model takes ``checkpoint="layers"``; the tower runs as it is
    checkpointing = True

    @classmethod
    def family(cls) -> str:
        discover()
        return "vision-language models (" + ", ".join(sorted(VLM_SPECS)) + "; *ForConditionalGeneration)"

    @classmethod
    def positional_kind_for(cls, model_type: str) -> str | None:
        """The language model's positional kind of the family covering ``model_type`` (``mrope`` for Qwen2-VL; LLaVA's
        depends on its language model and is read once the config is: ``rope``), or None."""
        discover()
        spec = next((s for s in VLM_SPECS.values() if model_type in s.model_types), None)
        if spec is None:
            return None
        return spec.language.positional if spec.language is not None else "rope"

    @classmethod
    def supports(cls, model) -> bool:
        if not type(model).__module__.startswith("transformers."):
            return False
        return vlm_spec_for(model) is not None and type(model).__name__.endswith("ForConditionalGeneration")

    def __init__(self, model):
        vlm = vlm_spec_for(model)
        if vlm is None:
            raise UnsupportedModelError(f"no vision-language spec for {type(model).__name__}",
                                        f"supported: {self.family()}")
        text_type = model.config.get_text_config().model_type
        language = vlm.language or next((s for s in DECODER_SPECS.values() if text_type in s.model_types), None)
        if language is None:
            raise UnsupportedModelError(f"{type(model).__name__}: its language model ({text_type}) has no decoder spec",
                                        f"use a language model of a supported family ({DecoderTwin.family()})")
        for check in vlm.checks:
            reason = check(model)
            if reason:
                raise UnsupportedModelError(f"{type(model).__name__}: {reason}",
                                            "use a configuration the twin reproduces (see docs/engine.md)")
        self._wrap(model, replace(language, backbone=vlm.language_model, lm_head="lm_head"), "causal")
        self.final_softcap = None  # the multimodal heads cap no logits
        self.vlm = vlm
        self.tower = vlm.tower(model)
        self.image_token_id = int(model.config.image_token_id)

    @property
    def official_code_ran(self) -> bool:
        return False

    def language_twin(self, inputs) -> DecoderTwin:
        """The decoder twin of the language model alone, for methods that drive text twins only (the attributors):
        text-only inputs of a vision-language model are its language model's (no image token, no pixels). Inputs
        holding images are refused in one line."""
        pixel_values = inputs.get("pixel_values") if isinstance(inputs, Mapping) else None
        ids = inputs.get("input_ids") if isinstance(inputs, Mapping) else inputs
        if pixel_values is not None or bool((torch.as_tensor(ids) == self.image_token_id).any()):
            raise BadInputError(f"{type(self.model).__name__} with images is explained by the LRP methods only (the "
                                "baselines perturb text embeddings or pixels, not both)",
                                "use an LRP method (pa_lrp, attnlrp, cp_lrp, grad_x_input, ...) or text-only inputs")
        text = DecoderTwin.__new__(DecoderTwin)
        text._wrap(self.model, self.spec, "causal")
        text.final_softcap = None
        return text

    def check_composite(self, composite: Composite) -> Composite:
        """Refuse composites naming gamma roles this twin does not have (they would be silently ignored)."""
        composite = get_composite(composite)
        unknown = sorted(set(composite.linear_gamma) - set(GAMMA_ROLES))
        if unknown:
            raise BadInputError(f"composite {composite.name!r} sets gamma for layer roles {unknown}, which a "
                                "vision-language model does not have", f"its roles are: {', '.join(GAMMA_ROLES)}")
        return composite

    # ------------------------------------------------------------------ explanation protocol
    def prepare(self, input_ids, attention_mask=None) -> VlmInputs:
        """Check what the processor returns (``input_ids`` and ``attention_mask``; with images ``pixel_values`` and
        the family's inputs, :attr:`VlmSpec.inputs`) and move it to the model's device; one-line errors."""
        vlm = self.vlm
        name = type(self.model).__name__
        takes = ("input_ids", "attention_mask", "pixel_values", *vlm.inputs)
        found = model_inputs(input_ids, attention_mask, takes=takes, model=name)
        vocab = self.embed_tokens.num_embeddings
        # the image token may lie outside the embedding table (Gemma 3's): its embedding is replaced anyway
        ids = token_batch(found["input_ids"], vocab_size=max(vocab, self.image_token_id + 1),
                          max_positions=getattr(self.config, "max_position_embeddings", None), device=self.device)
        image_mask = ids == self.image_token_id
        if bool(((ids >= vocab) & ~image_mask).any()):
            raise BadInputError(f"token id out of range for a vocabulary of {vocab}",
                                "use the processor that belongs to this model")
        mask = attention_mask_of(found["attention_mask"], ids)
        inputs = VlmInputs(ids, mask, self.last_index(ids, mask), image_mask)
        pixel_values = found["pixel_values"]
        if pixel_values is None:
            if bool(image_mask.any()):
                raise BadInputError(f"input_ids hold {int(image_mask.sum())} image tokens but no pixel_values were "
                                    "given", "pass the processor's whole output (pixel_values with input_ids)")
            return inputs
        missing = [key for key in vlm.required if found.get(key) is None]
        if missing:
            raise BadInputError(f"{name} needs {', '.join(missing)} with pixel_values",
                                "pass the processor's whole output (explain(model, processor(...)))")
        if not isinstance(pixel_values, torch.Tensor) or not pixel_values.is_floating_point():
            raise BadInputError("pixel_values must be a float tensor", "pass what the model's image processor returns")
        extra = {key: found.get(key) for key in vlm.inputs}
        layout = vlm.layout(self.model, self.tower, {"pixel_values": pixel_values, **extra})
        expected = sum(layout.tokens_per_image)
        if int(image_mask.sum()) != expected:
            raise BadInputError(f"input_ids hold {int(image_mask.sum())} image tokens, the images need {expected}",
                                "pass input_ids and pixel_values from one processor call")
        pixels = self.tower.prepare_pixels(pixel_values, layout).to(device=self.device, dtype=self.tower.dtype)
        if not bool(torch.isfinite(pixels).all()):
            raise BadInputError("pixel_values contain NaN or infinite values", "check the image loading")
        inputs.pixels, inputs.layout = pixels, layout
        if vlm.positions == "mrope":
            inputs.position_ids = self._mrope_positions(ids, mask, extra)
        if vlm.image_blocks and extra.get("token_type_ids") is not None:
            types = per_token(extra["token_type_ids"], ids, "token_type_ids")
            inputs.image_groups = image_groups(types == 1)
        return inputs

    def image_token_means(self, images: Mapping) -> list[torch.Tensor]:
        """Per image, ``[tokens]``: the mean of what the image processor returned (``pixel_values`` and the family's
        image inputs, e.g. ``image_grid_thw``) over the channels and pixels of each language-model image token's
        patches, in token order. Run on an evidence mask processed as an image (no normalisation), it is the share
        of each token the evidence covers, whatever the processor's resizing and cropping."""
        found = {"pixel_values": images["pixel_values"], **{k: images.get(k) for k in self.vlm.inputs}}
        layout = self.vlm.layout(self.model, self.tower, found)
        pixels = self.tower.prepare_pixels(torch.as_tensor(found["pixel_values"]).float().cpu(), layout)
        sums = self.tower.patch_sums(pixels, layout)
        counts = self.tower.patch_sums(torch.ones_like(pixels), layout)
        out = []
        for i, tokens in enumerate(layout.tokens_per_image):
            keep = layout.valid[i]
            index = layout.patch_token[i][keep]
            total = torch.zeros(tokens, dtype=sums.dtype).index_add(0, index, sums[i][keep])
            size = torch.zeros(tokens, dtype=sums.dtype).index_add(0, index, counts[i][keep])
            out.append(total / size)
        return out

    def _mrope_positions(self, ids, mask, extra) -> torch.Tensor:
        """``[3, B, T]`` M-RoPE positions as the library computes them (``get_rope_index``: text tokens one step each,
        an image's tokens its temporal, row and column indices), counted over the real tokens of each row."""
        types = per_token(extra["mm_token_type_ids"], ids, "mm_token_type_ids")
        grid = torch.as_tensor(extra["image_grid_thw"]).to(ids.device)
        if bool(((types == 1) != (ids == self.image_token_id)).any()):
            raise BadInputError("mm_token_type_ids does not mark exactly the image tokens of input_ids",
                                "pass the processor's mm_token_type_ids")
        with torch.no_grad():
            positions, _ = self.model.model.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=grid,
                                                           attention_mask=mask)
        return positions

    def run(self, inputs: VlmInputs, composite: Composite, *, positional_sinks: bool, causal: bool = True,
            attention: str = "sdpa", stabilizers: Stabilizers = NONE, checkpoint: str = "none",
            return_all_logits: bool = False) -> VlmForward:
        """The LRP-aware forward of :func:`palrp_bench.lrp.attribution.attribute`: the tower from a fresh pixel leaf,
        the projector, the language model from the merged embeddings (module docstring). ``return_all_logits``: the
        record's ``lm.all_logits`` holds the logits ``[B, T, V]`` of every position (parity tests)."""
        composite = self.check_composite(composite)
        text = self.embed(inputs.input_ids.masked_fill(inputs.image_mask, 0))
        tower = None
        embeds = text
        if inputs.pixels is not None:
            pixels = inputs.pixels.detach().clone().requires_grad_(True)
            tower = self.tower.forward(pixels, inputs.layout, composite, positional_sinks=positional_sinks,
                                       attention=attention)
            features = self.vlm.project(self.model, tower, composite)
            flat = torch.cat([f[:k] for f, k in zip(features, inputs.layout.tokens_per_image)])
            embeds = text.masked_scatter(inputs.image_mask[..., None], flat.to(text.dtype))
        position_ids = inputs.position_ids
        if position_ids is None and inputs.attention_mask is not None:
            position_ids = real_token_positions(inputs.attention_mask)
        lm = self.forward(embeds, inputs.attention_mask, inputs.last_index, composite,
                          positional_sinks=positional_sinks, causal=causal, attention=attention,
                          position_ids=position_ids, checkpoint=checkpoint, image_groups=inputs.image_groups,
                          return_all_logits=return_all_logits)
        return VlmForward(lm, text, tower)

    def summarize(self, inputs: VlmInputs, attribution: Attribution) -> dict:
        """Per language-model token (image tokens from their patches; module docstring): ``semantic``,
        ``positional`` ``[B, L + S, 2, T]`` (the language model's ``L`` layers, then the tower's ``S`` sinks: one per
        vision layer for rotary tables, one ``[table, 0]`` for a learned table), the ReLU sums of the token
        aggregations, and the extras of :class:`~palrp_bench.lrp.explanation.Explanation` for vision-language
        models."""
        r = attribution.relevance
        b, t = inputs.input_ids.shape
        text = r["embeds"]
        semantic, semantic_relu = text.sum(-1), text.clamp(min=0).sum(-1)
        rope = self.positional.reduce(r["cos"], r["sin"], self.num_layers, b, t, semantic)
        valid = (inputs.attention_mask.bool() if inputs.attention_mask is not None
                 else torch.ones_like(semantic, dtype=torch.bool))
        extras: dict = {"explained_index": inputs.last_index, "image_mask": inputs.image_mask,
                        "language_positional_sinks": self.num_layers}
        if isinstance(self.positional, MRoPE):
            extras["positional_sections"] = MRoPE.reduce_sections(
                r["cos"], r["sin"], self.rotary.mrope_section, self.num_layers, b, t, semantic)
        positional, positional_relu, shared = rope.per_layer, rope.per_layer_relu, rope.shared_relu
        if inputs.pixels is not None:
            parts = self._image_parts(inputs, r, b, t)
            semantic = semantic + parts["semantic"]
            semantic_relu = semantic_relu + parts["semantic_relu"]
            positional = torch.cat([positional, parts["positional"].per_sink], 1)
            positional_relu = torch.cat([positional_relu, parts["positional"].per_sink_relu], 1)
            shared = shared + parts["positional"].shared_relu
            extras.update(parts["extras"])
        return {"semantic": semantic, "semantic_relu": semantic_relu, "positional": positional,
                "positional_relu": positional_relu, "positional_shared_relu": shared, "valid": valid,
                "attention_mask": inputs.attention_mask, "extras": extras}

    def _image_parts(self, inputs: VlmInputs, r: dict, b: int, t: int) -> dict:
        """The pixels' and the tower's positional relevance, per patch (on each image's patch grid) and per
        language-model token (summed over the patches feeding it)."""
        layout, tower = inputs.layout, self.tower
        device = inputs.input_ids.device
        pixels = r["pixels"]
        patch_semantic = tower.patch_sums(pixels, layout)                         # [n, Np]
        patch_relu = tower.patch_sums(pixels.clamp(min=0), layout)
        elements = tower.positional_elements(r, layout)                           # [n, S, 2, E, Np]
        per_sink = elements.sum(3)
        per_sink_relu = elements.clamp(min=0).sum(3)
        shared_relu = elements.sum(1).clamp(min=0).sum(2)                          # [n, 2, Np]
        # the flat (b * T + t) position of each patch's language-model token
        where = torch.nonzero(inputs.image_mask.reshape(-1)).reshape(-1)  # image tokens, image after image
        offsets = torch.tensor([0] + layout.tokens_per_image[:-1], device=device).cumsum(0)
        patch_token = layout.patch_token.to(device)
        flat = torch.where(patch_token >= 0, where[offsets[:, None] + patch_token.clamp(min=0)],
                           torch.full_like(patch_token, -1))

        def to_tokens(x: torch.Tensor) -> torch.Tensor:
            """``[n, ..., Np]`` -> ``[B, ..., T]``: each patch's value added to its token."""
            lead = x.shape[1:-1]
            src = x.movedim(-1, 1).reshape(x.shape[0] * x.shape[-1], -1)          # [n * Np, prod(lead)]
            keep = flat.reshape(-1) >= 0
            out = src.new_zeros(b * t, src.shape[1])
            out.index_add_(0, flat.reshape(-1)[keep], src[keep])
            return out.reshape(b, t, *lead).movedim(1, -1)

        image_sample = torch.div(where, t, rounding_mode="floor")[offsets]
        extras = {"image_semantic": self._on_grid(patch_semantic, layout),
                  "image_positional": self._on_grid(per_sink, layout),
                  "image_pixel_semantic": tower.pixel_map(pixels, layout),
                  "image_grid": layout.token_grid.to(device), "image_patch_grid": layout.patch_grid.to(device),
                  "image_sample": image_sample, "vision_positional_sinks": int(per_sink.shape[1])}
        prefix = r.get("vision_prefix")
        if prefix is not None:  # CLIP's CLS token and its position row, by sample
            cls_semantic = torch.zeros(b, dtype=prefix.dtype, device=device).index_add(0, image_sample,
                                                                                       prefix.sum((1, 2)))
            cls_positional = torch.zeros_like(cls_semantic).index_add(
                0, image_sample, r["vision_pos_embed"][:, :tower.num_prefix].sum((1, 2)))
            extras.update(cls_semantic=cls_semantic, cls_positional=cls_positional)
        positional = PositionalRelevance(to_tokens(per_sink), to_tokens(per_sink_relu), to_tokens(shared_relu))
        return {"semantic": to_tokens(patch_semantic), "semantic_relu": to_tokens(patch_relu),
                "positional": positional, "extras": extras}

    @staticmethod
    def _on_grid(x: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
        """``[n, ..., Np]`` per patch -> ``[n, ..., Hp, Wp]`` on each image's patch grid (padded to the largest)."""
        hp, wp = (int(v) for v in layout.patch_grid.max(0).values)
        cells = layout.patch_cell.to(x.device)
        keep = layout.valid.to(x.device)
        out = x.new_zeros(*x.shape[:-1], hp * wp)
        index = (cells[..., 0] * wp + cells[..., 1]).clamp(min=0)
        lead = [1] * (x.dim() - 2)
        out.scatter_add_(-1, index.view(x.shape[0], *lead, -1).expand_as(x), x * keep.view(x.shape[0], *lead, -1))
        return out.reshape(*x.shape[:-1], hp, wp)

    def split(self, explanation: Explanation) -> Explanation:
        """The explanation's image part laid out on the images: ``extras["image_scores"]`` ``[n, Hm, Wm]``, the final
        score of each image token on its image's token grid (row-major, padded to the largest grid); text-only
        inputs as they are."""
        extras = explanation.extras
        if "image_grid" not in extras:
            return explanation
        mask = extras["image_mask"]
        grids = extras["image_grid"]
        values = explanation.scores[mask]
        hm, wm = (int(v) for v in grids.max(0).values)
        maps = values.new_zeros(grids.shape[0], hm, wm)
        start = 0
        for i, (h, w) in enumerate(grids.tolist()):
            maps[i, :h, :w] = values[start:start + h * w].reshape(h, w)
            start += h * w
        extras["image_scores"] = maps
        return explanation


def image_groups(is_image: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` long: the index of the image each image token belongs to within its row (a run of consecutive image
    tokens is one image), -1 elsewhere (the library's ``get_block_sequence_ids_for_mask``)."""
    previous = torch.nn.functional.pad(is_image, (1, 0), value=False)[:, :-1]
    starts = is_image & ~previous
    groups = torch.cumsum(starts.long(), dim=1) - 1
    return torch.where(is_image, groups, torch.full_like(groups, -1))
