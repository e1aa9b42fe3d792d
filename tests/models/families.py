"""Tiny random models of the text families with their own twins (GPT-2, OPT, BERT, RoBERTa, BLOOM) and of a timm
RoPE ViT, built from configs (no downloads), with every bias and norm gain randomised so that they are exercised
(the libraries initialise them to 0 and 1)."""
from __future__ import annotations

import math

import torch
import transformers

VOCAB = 96
POSITIONS = 40
#: the library's own position numbering differs from the twin's (counted over real tokens) only for left padding;
#: these families take ``position_ids`` (the others count over real tokens themselves)
TAKES_POSITION_IDS = {"gpt2": 0, "bert": 0, "roberta": 2}   # value: first position id (RoBERTa: padding_idx + 1)
PAD = 1  # pad id of every tiny text model (RoBERTa's padding_idx)
#: attention implementations of the library forward (BLOOM has only the eager one)
LIBRARY_ATTENTION = {"bloom": ("eager",)}

COMMON = dict(vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=0, eos_token_id=2, initializer_range=0.2)
CONFIGS = {
    "gpt2": lambda layers: transformers.GPT2Config(n_positions=POSITIONS, n_embd=32, n_layer=layers, n_head=4,
                                                   **COMMON),
    "opt": lambda layers: transformers.OPTConfig(max_position_embeddings=POSITIONS, hidden_size=32,
                                                 num_hidden_layers=layers, num_attention_heads=4, ffn_dim=64,
                                                 word_embed_proj_dim=32, **COMMON),
    "bert": lambda layers: transformers.BertConfig(hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                                                   intermediate_size=64, max_position_embeddings=POSITIONS,
                                                   type_vocab_size=2, **COMMON),
    "roberta": lambda layers: transformers.RobertaConfig(hidden_size=32, num_hidden_layers=layers,
                                                         num_attention_heads=4, intermediate_size=64,
                                                         max_position_embeddings=POSITIONS + 2, type_vocab_size=1,
                                                         **COMMON),
    "bloom": lambda layers: transformers.BloomConfig(hidden_size=48, n_layer=layers, n_head=6, **COMMON),
}
CLASSES = {
    ("gpt2", "causal"): transformers.GPT2LMHeadModel, ("gpt2", "classifier"): transformers.GPT2ForSequenceClassification,
    ("opt", "causal"): transformers.OPTForCausalLM, ("opt", "classifier"): transformers.OPTForSequenceClassification,
    ("bert", "masked_lm"): transformers.BertForMaskedLM,
    ("bert", "classifier"): transformers.BertForSequenceClassification,
    ("roberta", "masked_lm"): transformers.RobertaForMaskedLM,
    ("roberta", "classifier"): transformers.RobertaForSequenceClassification,
    ("bloom", "causal"): transformers.BloomForCausalLM,
    ("bloom", "classifier"): transformers.BloomForSequenceClassification,
}
#: every (family, head) the twins explain
CASES = sorted(CLASSES)
#: the families of the issue that must pass every test (OPT and RoBERTa are extras)
REQUIRED = ("gpt2", "bert", "bloom")


def randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Biases ~ N(0, 0.2^2), norm gains 1 + N(0, 0.2^2) (the rest keeps the config's initialisation)."""
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "norm" in name.lower() and p.dim() == 1:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
    return model


def make_text(family: str, head: str, dtype=torch.float64, attn: str = "sdpa", layers: int = 2, seed: int = 0,
              **overrides):
    """A tiny random model of ``family`` with ``head`` (``causal`` / ``classifier`` / ``masked_lm``) in eval mode."""
    cfg = CONFIGS[family](layers)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    if head == "classifier":
        cfg.num_labels = 3
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = CLASSES[(family, head)](cfg)
    return randomise(model, seed).to(dtype).eval()


def random_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """Token ids avoiding the special ids 0-3."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, VOCAB, (batch, length), generator=g)


def padded_batch(lengths, side: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """``(ids, mask, sequences)``: sequences of the given lengths, padded with :data:`PAD` on ``side``."""
    seqs = [random_ids(1, n, seed=seed + i)[0] for i, n in enumerate(lengths)]
    return (*pad(seqs, side, PAD), seqs)


def pad(seqs, side: str, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of 1-d id sequences padded with ``pad_id`` on ``side`` to the longest."""
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad_id)
    mask = torch.zeros(len(seqs), t, dtype=torch.long)
    for i, s in enumerate(seqs):
        sl = slice(t - len(s), t) if side == "left" else slice(0, len(s))
        ids[i, sl] = s
        mask[i, sl] = 1
    return ids, mask


def library_position_ids(family: str, mask: torch.Tensor) -> dict:
    """``position_ids`` for the library forward so that it numbers positions over real tokens, as the twin does
    (only the families whose library forward does not count them itself)."""
    if family not in TAKES_POSITION_IDS:
        return {}
    return {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0) + TAKES_POSITION_IDS[family]}


# ---------------------------------------------------------------------------------------------------- RoPE ViT
VIT = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5)
#: timm Eva variants: RoPE-Axial + learned PE (CLS token), RoPE only, SBB (register token, average pooling,
#: EvaAttention), EVA-02 (gated MLP, learned PE, average pooling), the half rotation layout, DINOv3 (its own rotary
#: module, half layout, registers, dynamic image size)
VIT_VARIANTS = {
    "dinov3": ("vit_small_patch16_dinov3_qkvb", {}),
    "rope_ape": ("vit_small_patch16_rope_ape_224", {}),
    "rope": ("vit_small_patch16_rope_224", {}),
    "reg_gap": ("vit_base_patch16_rope_reg1_gap_256", {}),
    "eva02": ("eva02_tiny_patch14_224", dict(patch_size=8, ref_feat_shape=(4, 4))),
    "rope_half": ("vit_small_patch16_rope_ape_224", dict(rope_rotate_half=True)),
}


def make_rope_vit(variant: str = "rope_ape", dtype=torch.float64, depth: int = 2, seed: int = 0, **overrides):
    """A tiny random timm RoPE ViT with every parameter randomised (non-trivial biases, norms, PE, layer scale)."""
    import timm

    name, extra = VIT_VARIANTS[variant]
    torch.manual_seed(seed)
    model = timm.create_model(name, **{**VIT, **extra, "depth": depth, **overrides})
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif "norm" in pname:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif p.dim() >= 2 and "embed" not in pname and "token" not in pname:
                p.copy_(torch.randn_like(p) / math.sqrt(p[0].numel()))
            else:  # pos_embed, cls / reg token, layer scale
                p.copy_(0.5 * torch.randn_like(p))
    return model.to(dtype).eval()


def images(n: int, dtype=torch.float64, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, VIT["img_size"], VIT["img_size"], generator=g).to(dtype)
