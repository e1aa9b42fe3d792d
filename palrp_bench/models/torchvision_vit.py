"""torchvision's ViT as a timm ``VisionTransformer``, so the ViT twin explains it (the AttnLRP paper's ViT-B-16).

The AttnLRP paper evaluated "the pretrained Vision Transformer 16-B weights of the PyTorch model zoo" (its appendix
B.1): ``torchvision.models.vit_b_16`` with ``ViT_B_16_Weights.IMAGENET1K_V1`` (trained by torchvision on
ImageNet-1k; timm has no copy of these weights, its ``vit_base_patch16_224`` tags are other trainings). The two
libraries build the same network (patch convolution, CLS token, learned position embedding added to all tokens,
pre-norm blocks with LayerNorm eps 1e-6, exact GELU, one fused qkv projection, classification from the CLS token), so
:func:`timm_from_torchvision` copies the weights parameter for parameter; the parity test
(``tests/models/test_torchvision_vit.py``) pins the logits to torchvision's own forward.

Input normalisation: torchvision's ImageNet mean / std, recorded in the model's ``pretrained_cfg`` where the
protocols read it. Weights come from the torch hub cache (``torch.hub.get_dir()/checkpoints``) or a local
``checkpoint`` file; :func:`weights_file` says where they are expected.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import BadInputError, MissingDataError

__all__ = ["timm_from_torchvision", "from_torchvision", "weights_of", "weights_file", "load_torchvision_vit"]

#: torchvision's ImageNet normalisation (``weights.transforms()``)
TORCHVISION_MEAN = (0.485, 0.456, 0.406)
TORCHVISION_STD = (0.229, 0.224, 0.225)
#: the ``pretrained_cfg["source"]`` marking a converted model (:func:`from_torchvision`)
SOURCE = "torchvision"


def _block_map(i: int) -> dict[str, str]:
    src, dst = f"encoder.layers.encoder_layer_{i}.", f"blocks.{i}."
    pairs = {"ln_1": "norm1", "self_attention.in_proj": "attn.qkv", "self_attention.out_proj": "attn.proj",
             "ln_2": "norm2", "mlp.0": "mlp.fc1", "mlp.3": "mlp.fc2"}
    out = {}
    for a, b in pairs.items():
        if a.startswith("self_attention.in_proj"):
            out[src + a + "_weight"], out[src + a + "_bias"] = dst + b + ".weight", dst + b + ".bias"
        else:
            out[src + a + ".weight"], out[src + a + ".bias"] = dst + b + ".weight", dst + b + ".bias"
    return out


def timm_from_torchvision(tv_model) -> torch.nn.Module:
    """A timm ``VisionTransformer`` computing the same function as a torchvision ``VisionTransformer`` (eval mode,
    ImageNet normalisation in ``pretrained_cfg``)."""
    from timm.models.vision_transformer import VisionTransformer
    from torchvision.models.vision_transformer import VisionTransformer as TvVit

    if not isinstance(tv_model, TvVit):
        raise BadInputError(f"expected a torchvision VisionTransformer, got {type(tv_model).__name__}",
                            "pass torchvision.models.vit_b_16(...) or another torchvision ViT")
    if getattr(tv_model, "representation_size", None):
        raise BadInputError("torchvision ViTs with a pre-logits representation layer are not supported",
                            "use a model built with representation_size=None (all torchvision weights are)")
    depth = len(tv_model.encoder.layers)
    heads = tv_model.encoder.layers[0].num_heads
    model = VisionTransformer(img_size=tv_model.image_size, patch_size=tv_model.patch_size,
                              embed_dim=tv_model.hidden_dim, depth=depth, num_heads=heads,
                              mlp_ratio=tv_model.mlp_dim / tv_model.hidden_dim, num_classes=tv_model.num_classes,
                              qkv_bias=True)
    names = {"class_token": "cls_token", "conv_proj.weight": "patch_embed.proj.weight",
             "conv_proj.bias": "patch_embed.proj.bias", "encoder.pos_embedding": "pos_embed",
             "encoder.ln.weight": "norm.weight", "encoder.ln.bias": "norm.bias",
             "heads.head.weight": "head.weight", "heads.head.bias": "head.bias"}
    for i in range(depth):
        names.update(_block_map(i))
    source = tv_model.state_dict()
    if set(source) != set(names):
        raise BadInputError(f"unexpected torchvision ViT parameters: {sorted(set(source) ^ set(names))[:4]}",
                            "use a standard torchvision VisionTransformer")
    model.load_state_dict({names[k]: v for k, v in source.items()}, strict=True)
    model.pretrained_cfg = {**dict(getattr(model, "pretrained_cfg", {}) or {}), "mean": TORCHVISION_MEAN,
                            "std": TORCHVISION_STD, "source": SOURCE}
    return model.to(next(tv_model.parameters()).dtype).eval()


def from_torchvision(model) -> bool:
    """Whether a timm ViT was converted from torchvision by :func:`timm_from_torchvision` (the AttnLRP paper's
    ViT-B-16, a model the official PA-LRP code never ran: its stabilisers default to ``none``)."""
    return (getattr(model, "pretrained_cfg", None) or {}).get("source") == SOURCE


def weights_of(source: str):
    """torchvision weights named ``<builder>.<weights>``, e.g. ``vit_b_16.IMAGENET1K_V1``: ``(builder, weights)``."""
    import torchvision

    builder, _, tag = source.partition(".")
    try:
        fn = torchvision.models.get_model_builder(builder)
        weights = torchvision.models.get_model_weights(builder)[tag or "DEFAULT"]
    except (ValueError, KeyError):
        raise BadInputError(f"unknown torchvision model / weights {source!r}",
                            "use <builder>.<weights>, e.g. vit_b_16.IMAGENET1K_V1") from None
    return fn, weights


def weights_file(source: str) -> Path:
    """Where torchvision keeps the downloaded weights of ``source`` (the torch hub cache)."""
    _, weights = weights_of(source)
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name


def load_torchvision_vit(source: str = "vit_b_16.IMAGENET1K_V1", checkpoint: str | None = None):
    """The torchvision ViT ``source`` with its weights (from ``checkpoint``, the torch hub cache, or downloaded) as
    a timm model in eval mode. One-line :class:`MissingDataError` when the weights are unavailable."""
    fn, weights = weights_of(source)
    path = Path(checkpoint).expanduser() if checkpoint else weights_file(source)
    fix = (f"download {weights.url} once with network access (into {path.parent}) or pass model.checkpoint=<that "
           "file>")
    if path.is_file():
        tv_model = fn(weights=None, num_classes=len(weights.meta["categories"]))
        try:
            tv_model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        except Exception as err:  # noqa: BLE001 - any unreadable / mismatching file is the same user problem
            raise MissingDataError(f"cannot load {path} into torchvision {source} ({type(err).__name__})", fix) from None
    elif checkpoint:
        raise MissingDataError(f"checkpoint {path} does not exist", fix)
    else:
        try:
            tv_model = fn(weights=weights)
        except (OSError, RuntimeError) as err:
            raise MissingDataError(f"cannot download the torchvision weights {source} ({type(err).__name__})",
                                   fix) from None
    return timm_from_torchvision(tv_model.eval())
