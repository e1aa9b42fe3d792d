"""Tiny LLaMA configurations for tests (random weights, built from configs; no hub access)."""
import torch
import transformers

BASE = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=64, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
            pad_token_id=2, initializer_range=0.2)

VARIANTS = {
    "mha": {},
    "gqa": dict(num_key_value_heads=2),
    "mqa_tied": dict(num_key_value_heads=1, tie_word_embeddings=True),
    "llama3_rope": dict(num_key_value_heads=2, rope_theta=500000.0,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                          original_max_position_embeddings=16)),
    "linear_rope_bias": dict(rope_scaling=dict(rope_type="linear", factor=2.0), attention_bias=True,
                             mlp_bias=True),
}


def make_llama(variant="gqa", kind="causal", dtype=torch.float32, seed=0, **overrides):
    cfg = transformers.LlamaConfig(**{**BASE, **VARIANTS[variant], **overrides})
    if kind == "classifier":
        cfg.num_labels = 2
    torch.manual_seed(seed)
    cls = transformers.LlamaForCausalLM if kind == "causal" else transformers.LlamaForSequenceClassification
    model = cls(cfg).to(dtype).eval()
    return model


def random_ids(batch, length, seed=0, vocab=96):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, length), generator=g)
    ids[:, 0] = 1  # BOS
    return ids
