"""What a model is made of, counted without loading its weights: the :class:`Architecture` the cost model prices
(docs/planning.md "Cost model"). Each model loader says how to find its architecture
(:meth:`palrp_bench.models.loading.LoaderSpec.architecture`); the counts come from the libraries' own classes
instantiated on the meta device, so every family transformers or timm knows is counted exactly.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from .heads import AUTO_CLASSES

__all__ = ["Architecture", "moe_parameters", "hf_architecture", "vit_architecture", "timm_architecture", "torchvision_architecture",
           "timm_skeleton", "torchvision_skeleton"]


@dataclass(frozen=True)
class Architecture:
    """What the cost model needs of a model: its family (``decoder``, ``vit``, ``none``), parameter counts and
    shape. ``tokens`` / ``pixels``: the fixed token count (patches + class token) and input pixels of a ViT.
    ``source``: where the numbers come from (a config.json, a known architecture, the timm definition)."""

    family: str
    params: int = 0
    body_params: int = 0
    linear_params: int = 0
    layers: int = 0
    hidden: int = 0
    ffn: int = 0
    heads: int = 0
    attention_width: int = 0
    tokens: int | None = None
    source: str = ""
    pixels: int | None = None
    #: an encoder-decoder's decoder blocks (the fields above are then its encoder's)
    decoder_params: int = 0
    decoder_layers: int = 0
    #: parameters of the body that a token is not multiplied with (the routed experts it is not sent to; 0 for
    #: dense models): time counts ``body_params - inactive_params``, memory every parameter
    inactive_params: int = 0
    #: a vision-language model's image: the language-model tokens of one image, the vision tower's patches and the
    #: parameters of its tower and projector (None / 0 for other models; the body fields are the language model's)
    image_tokens: int | None = None
    vision_patches: int = 0
    vision_params: int = 0

    def image_token_equivalent(self) -> float | None:
        """The language-model tokens one image costs: its own tokens, plus the tower's work (its parameters times its
        patches) in language-model tokens (``body_params - inactive_params`` per token); None for a model without
        images."""
        if not self.image_tokens:
            return None
        active = max(1, self.body_params - self.inactive_params)
        return float(self.image_tokens) + self.vision_params * self.vision_patches / active


def _blocks(module):
    """The transformer blocks of a model: its ``ModuleList`` holding the most parameters."""
    import torch

    lists = [m for m in module.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def _linear_params(modules) -> int:
    """Parameters of the linear layers (``nn.Linear``; GPT-2's ``Conv1D``) in ``modules``: what NF4 quantizes."""
    import torch

    return sum(p.numel() for block in modules for m in block.modules()
               if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D" for p in m.parameters(recurse=False))


def moe_parameters(blocks, config, hidden: int) -> tuple[int, int]:
    """``(inactive, width)`` of a mixture-of-experts body: the parameters of the routed experts a token is not sent
    to (each sparse block's fused experts, 3-D tensors with one row per expert, times ``1 - k / E`` with ``k =
    config.num_experts_per_tok``), and the widest MLP a token passes through in one block (its ``k`` experts, a
    shared expert and the router, in gated-MLP widths: active parameters / (3 x hidden)), the activation width the
    memory estimate needs instead of one expert's ``intermediate_size``. ``(0, 0)`` for dense models."""
    k = int(getattr(config, "num_experts_per_tok", None) or 0)
    inactive, width = 0.0, 0
    if not k:
        return 0, 0
    for block in (m for layer in blocks for m in layer.modules()):
        experts = [m for m in block.children() if any(p.dim() == 3 for p in m.parameters(recurse=False))]
        if not experts:
            continue
        n_experts = max(p.shape[0] for e in experts for p in e.parameters(recurse=False) if p.dim() == 3)
        unused = sum(p.numel() for e in experts for p in e.parameters()) * (1 - k / n_experts)
        inactive += unused
        width = max(width, round((sum(p.numel() for p in block.parameters()) - unused) / (3 * hidden)))
    return int(inactive), width


@lru_cache(maxsize=64)
def _hf_architecture_cached(config_json: str, kind: str, source: str) -> Architecture:
    import torch
    import transformers

    fields = json.loads(config_json)
    untied = fields.get("tie_word_embeddings") is False  # what the checkpoint's config.json declares
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    cls = getattr(transformers, AUTO_CLASSES.get(kind, "AutoModel"))
    with torch.device("meta"):
        model = cls.from_config(config)
    image = _image_shape(config) if kind == "vlm" else None
    config = config.get_text_config()  # a vision-language model's body is its language model
    hidden, heads = int(config.hidden_size), int(config.num_attention_heads)
    params = sum(p.numel() for p in model.parameters())
    if getattr(config, "is_encoder_decoder", False):
        encoder, decoder = _blocks(model.get_encoder()), _blocks(model.get_decoder())
        if untied:  # T5 v1.1 / Flan-T5: transformers 5 builds every T5 head tied, but these checkpoints hold their own
            params += model.get_output_embeddings().weight.numel()
        width = heads * int(getattr(config, "d_kv", None) or hidden // heads)
        return Architecture("seq2seq", params, sum(p.numel() for p in encoder.parameters()),
                            _linear_params(encoder) + _linear_params(decoder), len(encoder), hidden,
                            int(getattr(config, "d_ff", None) or 4 * hidden), heads, width, None, source,
                            decoder_params=sum(p.numel() for p in decoder.parameters()), decoder_layers=len(decoder))
    blocks = _blocks(model)
    # multi-head latent attention's queries and keys are wider than its rotary head_dim (qk_head_dim)
    head_dim = int(getattr(config, "qk_head_dim", None) or getattr(config, "head_dim", None) or hidden // heads)
    ffn = int(getattr(config, "intermediate_size", None) or getattr(config, "ffn_dim", None)
              or getattr(config, "n_inner", None) or 4 * hidden)
    inactive, moe_width = moe_parameters(blocks, config, hidden)
    params = sum(p.numel() for p in model.parameters())
    vision = {}
    if image is not None:  # the tower and projector: everything but the language model and its head
        head = model.get_output_embeddings()
        language = {id(p) for m in (model.get_decoder(), head) if m is not None for p in m.parameters()}
        vision = dict(image_tokens=image[1], vision_patches=image[0],
                      vision_params=sum(p.numel() for p in model.parameters() if id(p) not in language))
    return Architecture("decoder", params, sum(p.numel() for p in blocks.parameters()), _linear_params(blocks),
                        len(blocks), hidden, max(ffn, moe_width), heads, heads * head_dim, None, source,
                        inactive_params=inactive, **vision)


def _image_shape(config) -> tuple[int, int] | None:
    """``(vision patches, language-model tokens)`` of one image of a vision-language model (its family's
    :attr:`~palrp_bench.models.vlm.VlmSpec.image_shape`), or None for a family the twins do not cover."""
    from .vlm import VLM_SPECS  # noqa: PLC0415 - the twins import the loaders, which import this module
    from .registry import discover

    discover()
    spec = next((s for s in VLM_SPECS.values() if config.model_type in s.model_types), None)
    return None if spec is None else spec.image_shape(config)


def hf_architecture(config: dict, kind: str, source: str = "") -> Architecture:
    """The :class:`Architecture` of a Hugging Face model from its ``config.json`` fields and ``model.kind``: the
    library's own class instantiated on the meta device (no memory, no weights), so every family transformers
    knows is counted exactly (equals ``model.num_parameters()``, tested). The body is the model's largest
    ``ModuleList`` (its transformer blocks); an encoder-decoder's is its encoder's, its decoder's blocks are
    ``decoder_params`` / ``decoder_layers`` (family ``seq2seq``)."""
    return _hf_architecture_cached(json.dumps(config, sort_keys=True), kind, source)


def vit_architecture(module, source: str) -> Architecture:
    import torch

    blocks = list(module.blocks)
    mlp_widths = [m.out_features for m in blocks[0].mlp.modules() if isinstance(m, torch.nn.Linear)]
    hidden = int(module.embed_dim)
    height, width = getattr(module.patch_embed, "img_size", None) or (224, 224)
    return Architecture("vit", sum(p.numel() for p in module.parameters()),
                        sum(p.numel() for b in blocks for p in b.parameters()), _linear_params(blocks), len(blocks),
                        hidden, int(max(mlp_widths, default=4 * hidden)), int(blocks[0].attn.num_heads), hidden,
                        int(module.patch_embed.num_patches + module.num_prefix_tokens), source, int(height * width))


@lru_cache(maxsize=64)
def _timm_skeleton(name: str, options_json: str = "{}"):
    import timm
    import torch

    with torch.device("meta"):
        return timm.create_model(name.partition(".")[0], pretrained=False, **json.loads(options_json))


def timm_skeleton(name: str, options: dict | None = None):
    """The timm model ``name`` builds (``options``: the constructor's keyword arguments), on the meta device: no
    memory, no weights."""
    return _timm_skeleton(str(name), json.dumps(dict(options or {}), sort_keys=True))


@lru_cache(maxsize=16)
def torchvision_skeleton(source: str):
    """A torchvision ViT as the timm ViT it is loaded as (:mod:`palrp_bench.models.torchvision_vit`), on the meta
    device."""
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from .torchvision_vit import weights_of

    builder, weights = weights_of(source)
    with torch.device("meta"):
        tv = builder(weights=None, num_classes=len(weights.meta["categories"]))
        return VisionTransformer(img_size=tv.image_size, patch_size=tv.patch_size, embed_dim=tv.hidden_dim,
                                 depth=len(tv.encoder.layers), num_heads=tv.encoder.layers[0].num_heads,
                                 mlp_ratio=tv.mlp_dim / tv.hidden_dim, num_classes=tv.num_classes, qkv_bias=True)


def timm_architecture(name: str, options: dict | None = None) -> Architecture:
    """A timm ViT's :class:`Architecture` from its definition (``options``: the constructor's keyword arguments)."""
    return vit_architecture(timm_skeleton(name, options), f"timm definition of {str(name).partition('.')[0]}")


def torchvision_architecture(source: str) -> Architecture:
    """A torchvision ViT's :class:`Architecture`, as the timm ViT it is loaded as."""
    return vit_architecture(torchvision_skeleton(source), f"torchvision definition of {source}")
