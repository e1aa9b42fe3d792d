"""Tiny random T5 models built from the shipped configs (``configs/model/tiny_t5_random.yaml``: T5 v1.1 / Flan-T5 style,
gated GELU, untied head; ``tiny_t5_original.yaml``: ReLU, tied head with the ``d_model ** -0.5`` rescale), no
download, with the norm gains randomised so that they are exercised (the library initialises them to 1), and a
stand-in that makes the library's T5LayerNorm keep float64 statistics."""
from __future__ import annotations

import torch

from palrp_bench import catalog
from palrp_bench.models.loading import random_model
from models.families import pad

#: the two variants of the twin's tests: the shipped model config of each
VARIANTS = ("tiny_t5_random", "tiny_t5_original")
PAD = 2  # pad = eos = decoder start of the tiny configs (the embedded tokenizer's </s>)


def make_t5(variant: str = "tiny_t5_random", dtype=torch.float64, attn: str = "sdpa", seed: int = 0, **overrides):
    """The tiny random T5 of ``variant`` (a model config name) in eval mode, the library's attention ``attn``."""
    options = dict(catalog.load("model", variant).options)
    options.update(seed=seed, **overrides)
    model = random_model(options, kind="seq2seq", dtype="float64")
    model.config._attn_implementation = attn
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model.to(dtype).eval()


def vocab(model) -> int:
    return int(model.config.vocab_size)


def random_ids(model, batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """Token ids avoiding the special ids 0-3."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab(model), (batch, length), generator=g)


def padded(model, lengths, side: str, seed: int = 0, start: int | None = None):
    """``(ids, mask, sequences)`` of the given lengths padded with :data:`PAD` on ``side``; ``start``: the first token
    of every sequence (a decoder's start token)."""
    seqs = [random_ids(model, 1, n, seed=seed + i)[0] for i, n in enumerate(lengths)]
    if start is not None:
        for s in seqs:
            s[0] = start
    return (*pad(seqs, side, PAD), seqs)


def float64_library_norm(monkeypatch) -> None:
    """Make the library's ``T5LayerNorm`` compute its statistics in the input's dtype (it casts to float32 even for
    a float64 model, where the twin keeps float64): the library's one float32 step in a float64 T5, emulated away
    so that the two agree to float64 rounding. Undone after the test (``monkeypatch``)."""
    from transformers.models.t5 import modeling_t5

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            hidden_states = hidden_states.to(self.weight.dtype)
        return self.weight * hidden_states

    monkeypatch.setattr(modeling_t5.T5LayerNorm, "forward", forward)
