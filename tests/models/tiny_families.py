"""Tiny random decoders of every RoPE family the twin covers, built from configs (no downloads).

One registry (:data:`FAMILIES`) drives every family test module: per family, the config class, the model classes
and the options that exercise what the family adds (sliding windows shorter than the test sequences, biases,
q/k norms, soft-capping, two RoPE tables, fused projections, partial rotary, LongRoPE, parallel residual; for the
mixture-of-experts families 4-8 experts of which 2 are chosen, shared experts, dense and sparse layers, grouped
choice with a selection bias, latent attention with decoupled RoPE). All models: 2 layers, hidden 32, 4 heads,
vocabulary 96. Hugging Face initialises norm gains to 1 (0 for Gemma's ``1 + w``) and biases to 0, which would
leave them unexercised: every norm weight and bias gets N(0, 0.1^2) added (DeepSeek's selection bias, a buffer,
too). Experts run with the library's eager implementation (its grouped kernels refuse float64), a family without
a head (OLMoE has no classifier) skips that head's tests.
"""
from __future__ import annotations

import torch
import transformers

VOCAB = 96
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=2, initializer_range=0.2)
#: sliding windows are shorter than the test sequences, so the window changes the logits
WINDOW = 4

# family -> (config class, {kind: model class}, {variant: config overrides}); the first variant is the default
FAMILIES: dict[str, tuple] = {
    "llama": ("LlamaConfig", {"causal": "LlamaForCausalLM", "classifier": "LlamaForSequenceClassification"},
              {"gqa_bias": dict(num_key_value_heads=2, attention_bias=True, mlp_bias=True,
                                rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 16})}),
    "mistral": ("MistralConfig", {"causal": "MistralForCausalLM", "classifier": "MistralForSequenceClassification"},
                {"window": dict(num_key_value_heads=2, head_dim=16, sliding_window=WINDOW),
                 "full": dict(num_key_value_heads=2, sliding_window=None)}),
    "qwen2": ("Qwen2Config", {"causal": "Qwen2ForCausalLM", "classifier": "Qwen2ForSequenceClassification"},
              {"window": dict(num_key_value_heads=2, use_sliding_window=True, sliding_window=WINDOW,
                              max_window_layers=1)}),
    "qwen3": ("Qwen3Config", {"causal": "Qwen3ForCausalLM", "classifier": "Qwen3ForSequenceClassification"},
              {"window": dict(num_key_value_heads=2, head_dim=16, use_sliding_window=True, sliding_window=WINDOW,
                              max_window_layers=1)}),
    "gemma2": ("Gemma2Config", {"causal": "Gemma2ForCausalLM", "classifier": "Gemma2ForSequenceClassification"},
               {"softcap": dict(num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=24, sliding_window=WINDOW,
                                attn_logit_softcapping=2.0, final_logit_softcapping=1.5,
                                hidden_activation="gelu_pytorch_tanh"),
                "no_softcap": dict(num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=24,
                                   sliding_window=WINDOW, attn_logit_softcapping=None,
                                   final_logit_softcapping=None)}),
    "gemma3": ("Gemma3TextConfig", {"causal": "Gemma3ForCausalLM",
                                    "classifier": "Gemma3TextForSequenceClassification"},
               {"two_tables": dict(num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=24,
                                   sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"],
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                                    "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                       "rope_theta": 1e6}},
                                   final_logit_softcapping=1.5)}),
    "phi3": ("Phi3Config", {"causal": "Phi3ForCausalLM", "classifier": "Phi3ForSequenceClassification"},
             {"partial_window": dict(num_key_value_heads=2, sliding_window=6,
                                     rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                      "partial_rotary_factor": 0.5}),
              "longrope": dict(num_key_value_heads=2, original_max_position_embeddings=8,
                               rope_parameters={"rope_type": "longrope", "rope_theta": 1e4,
                                                "partial_rotary_factor": 0.5,
                                                "short_factor": [1.0, 1.5], "long_factor": [2.0, 5.0],
                                                "original_max_position_embeddings": 8})}),
    "gpt_neox": ("GPTNeoXConfig", {"causal": "GPTNeoXForCausalLM", "classifier": "GPTNeoXForSequenceClassification"},
                 {"parallel": dict(use_parallel_residual=True,
                                   rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                    "partial_rotary_factor": 0.25}),
                  "sequential": dict(use_parallel_residual=False,
                                     rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                      "partial_rotary_factor": 0.5})}),
    "mixtral": ("MixtralConfig", {"causal": "MixtralForCausalLM", "classifier": "MixtralForSequenceClassification"},
                {"window": dict(num_key_value_heads=2, sliding_window=WINDOW, num_local_experts=4,
                                num_experts_per_tok=2)}),
    "qwen2_moe": ("Qwen2MoeConfig", {"causal": "Qwen2MoeForCausalLM",
                                     "classifier": "Qwen2MoeForSequenceClassification"},
                  {"shared": dict(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                                  shared_expert_intermediate_size=24, norm_topk_prob=False, mlp_only_layers=[1],
                                  use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)}),
    "qwen3_moe": ("Qwen3MoeConfig", {"causal": "Qwen3MoeForCausalLM",
                                     "classifier": "Qwen3MoeForSequenceClassification"},
                  {"normalized": dict(num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                      moe_intermediate_size=16, norm_topk_prob=True)}),
    "olmoe": ("OlmoeConfig", {"causal": "OlmoeForCausalLM"},
              {"gqa": dict(num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, intermediate_size=16,
                           norm_topk_prob=False)}),
    "deepseek_v3": ("DeepseekV3Config", {"causal": "DeepseekV3ForCausalLM",
                                         "classifier": "DeepseekV3ForSequenceClassification"},
                    {"lora_grouped": dict(num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                                          v_head_dim=12, n_routed_experts=8, n_group=2, topk_group=1,
                                          num_experts_per_tok=2, first_k_dense_replace=1, n_shared_experts=1,
                                          moe_intermediate_size=16, routed_scaling_factor=2.5, norm_topk_prob=True,
                                          rope_interleave=True),
                     "yarn": dict(num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                                  v_head_dim=8, n_routed_experts=4, n_group=1, topk_group=1, num_experts_per_tok=2,
                                  first_k_dense_replace=0, n_shared_experts=2, moe_intermediate_size=16,
                                  routed_scaling_factor=1.5, norm_topk_prob=False, rope_interleave=False,
                                  rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                                   "original_max_position_embeddings": 16, "mscale": 1.0,
                                                   "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1})}),
}
#: the mixture-of-experts families
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3")


def variants(family: str) -> list[str]:
    return list(FAMILIES[family][2])


def family_config(family: str, variant: str | None = None, **overrides):
    cfg_cls, _, options = FAMILIES[family]
    variant = variant or next(iter(options))
    return getattr(transformers, cfg_cls)(**{**COMMON, **options[variant], **overrides})


def perturb_norms_and_biases(model, scale: float = 0.1, seed: int = 1) -> None:
    """Add N(0, scale^2) to every norm weight and bias (Hugging Face initialises them to constants), and to a
    router's selection bias (a buffer)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower():
                p.add_(scale * torch.randn(p.shape, generator=g).to(p.dtype))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.add_(scale * torch.randn(b.shape, generator=g).to(b.dtype))


def make_model(family: str, kind: str = "causal", variant: str | None = None, dtype=torch.float32, seed: int = 0,
               attn: str = "sdpa", **overrides):
    """A tiny random model of ``family`` (``kind``: causal or classifier) in eval mode; skips the calling test when
    transformers has no such head for the family."""
    if kind not in FAMILIES[family][1]:
        import pytest

        pytest.skip(f"transformers has no {kind} head for {family}")
    cfg = family_config(family, variant, **overrides)
    if kind == "classifier":
        cfg.num_labels = 2
    torch.manual_seed(seed)
    cls = getattr(transformers, FAMILIES[family][1][kind])
    model = cls(cfg)
    perturb_norms_and_biases(model)
    model = model.to(dtype).eval()
    # the library's SDPA cannot soft-cap scores (Gemma 2 refuses it): its reference is then the eager path
    capped = getattr(cfg, "attn_logit_softcapping", None) is not None and family == "gemma2"
    model.config._attn_implementation = "eager" if capped else attn
    if family in MOE_FAMILIES:
        model.config._experts_implementation = "eager"  # the grouped kernels refuse float64
    return model


def random_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g)
    ids[:, 0] = 1  # BOS
    return ids
