"""LLaMA family twin (LLaMA-2, LLaMA-3/3.1 incl. llama3 rope scaling, TinyLlama; GQA; 4-bit NF4).

The twin wraps a loaded Hugging Face ``LlamaForCausalLM`` or ``LlamaForSequenceClassification`` without touching
it. It calls the model's own linear modules (``q_proj``, ``gate_proj``, ``lm_head``, ``score``, ...; bitsandbytes
``Linear4bit`` works unchanged) and its own rotary module (so every rope scaling type the library supports is
honoured), and re-implements only the wiring with the rules of :mod:`palrp_bench.lrp.rules`:

* RMSNorm with the normaliser constant (identity rule), SiLU identity, gate*up uniform.
* RoPE (PROTOCOL.md section 1, paper Eq. 10): ``q*cos + rot(q)*sin`` with both products under the uniform rule;
  when positional sinks are on, each layer gets ONE fresh leaf copy of (cos, sin) ("multi-sink") and
  ``R(cos) = cos * cos.grad`` collects half of the relevance of the q- and k-side products; when off, cos/sin are
  constants and the q/k sides receive all of it (the AttnLRP row).
* Attention through fused SDPA with gradient scaling (or an eager path with explicit weights for the ledger).

A parity test pins the twin's logits to the library's forward (tests/models/test_llama_twin.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import BadInputError
from ..lrp import rules
from ..lrp.composites import Composite
from .registry import register_twin

__all__ = ["LlamaTwin", "TwinOutput", "load_llama"]


@dataclass
class TwinOutput:
    """What one LRP-aware forward produces.

    ``logits``: ``[B, C]`` classifier logits (pooled at the last non-pad token) or next-token logits at the last
    non-pad position for a causal LM. ``embeds``: the ``[B, T, D]`` input-embedding leaf (semantic sink).
    ``cos``/``sin``: one leaf per layer (``[B, T, head_dim]``) when positional sinks are on, else empty lists.
    ``all_logits``: ``[B, T, V]`` only when requested (parity tests).
    """

    logits: torch.Tensor
    embeds: torch.Tensor
    cos: list
    sin: list
    last_index: torch.Tensor
    all_logits: torch.Tensor | None = None


def _llama_classes():
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification
    return LlamaForCausalLM, LlamaForSequenceClassification


@register_twin
class LlamaTwin:
    """LRP-aware forward of a Hugging Face LLaMA model (see module docstring)."""

    family = "llama (LlamaForCausalLM, LlamaForSequenceClassification)"

    @classmethod
    def supports(cls, model) -> bool:
        if not type(model).__module__.startswith("transformers."):
            return False  # cheap check first: importing transformers for a timm model costs seconds
        try:
            causal, seqcls = _llama_classes()
        except ImportError:  # pragma: no cover
            return False
        return isinstance(model, (causal, seqcls))

    def __init__(self, model):
        causal, seqcls = _llama_classes()
        self.model = model
        self.config = model.config
        self.is_classifier = isinstance(model, seqcls)
        base = model.model
        self.embed_tokens = base.embed_tokens
        self.layers = base.layers
        self.final_norm = base.norm
        self.rotary = base.rotary_emb
        self.head = model.score if self.is_classifier else model.lm_head
        keep_4bit_differentiable(model)
        if getattr(self.config, "pretraining_tp", 1) not in (None, 1):
            raise BadInputError("pretraining_tp > 1 is not supported", "set config.pretraining_tp = 1 (same logits)")

    # ------------------------------------------------------------------ helpers
    def default_composite(self, protocol: str = "official") -> str:
        return "attnlrp"

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Input-embedding leaf: the semantic sink (``R(E) = E * E.grad``)."""
        with torch.no_grad():
            e = self.embed_tokens(input_ids)
        return e.detach().requires_grad_(True)

    def position_ids(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Positions counted over real tokens only, so left padding does not shift them (batch invariance)."""
        return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)

    def last_index(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Index of the token whose output is explained: the last non-pad position.

        With an attention mask: the last position where the mask is 1 (works for left and right padding).
        Without one, a classifier pools like Hugging Face (last token that is not ``pad_token_id``) and a causal
        LM explains the last position.
        """
        b, t = input_ids.shape
        idx = torch.arange(t, device=input_ids.device)
        if attention_mask is not None:
            return (idx * attention_mask.long()).argmax(-1)
        pad = getattr(self.config, "pad_token_id", None)
        if self.is_classifier and pad is not None:
            return (idx * (input_ids != pad).long()).argmax(-1)
        return torch.full((b,), t - 1, device=input_ids.device, dtype=torch.long)

    def explain(self, input_ids, *, method, composite, target=None, aggregation="official", attention_mask=None,
                **options):
        """Explain a batch (see :func:`palrp_bench.methods.language.explain_tokens` for the options)."""
        from ..methods.language import explain_tokens
        return explain_tokens(self, input_ids, method=method, composite=composite, target=target,
                              aggregation=aggregation, attention_mask=attention_mask, **options)

    # ------------------------------------------------------------------ forward
    def forward(self, embeds: torch.Tensor, attention_mask: torch.Tensor | None, last_index: torch.Tensor,
                composite: Composite, *, positional_sinks: bool, causal: bool = True,
                attention: str = "sdpa", recorder: rules.AttentionRecorder | None = None,
                position_ids: torch.Tensor | None = None, return_all_logits: bool = False) -> TwinOutput:
        """One LRP-aware forward from the embedding leaf to the logits at ``last_index``.

        ``causal=False`` reproduces the official code's defect for ARC/Wikipedia (PROTOCOL.md section 2:
        no causal mask reached the attention). ``attention="eager"`` materialises the attention weights
        (same relevance; required by ``recorder``).
        """
        b, t, _ = embeds.shape
        if attention_mask is None:
            attention_mask = torch.ones(b, t, dtype=torch.long, device=embeds.device)
        if position_ids is None:
            position_ids = self.position_ids(attention_mask)
        mask = _attention_mask(attention_mask)
        with torch.no_grad():
            cos, sin = self.rotary(embeds, position_ids)
        cos_leaves, sin_leaves = [], []
        x = embeds
        for layer in self.layers:
            if positional_sinks:
                c = cos.detach().clone().requires_grad_(True)
                s = sin.detach().clone().requires_grad_(True)
                cos_leaves.append(c)
                sin_leaves.append(s)
            else:
                c, s = cos, sin
            x = self._decoder_layer(layer, x, c, s, mask, composite, causal, attention, recorder)
        hidden = x[torch.arange(b, device=x.device), last_index]
        hidden = rules.rms_norm(hidden, self.final_norm.weight, self.final_norm.variance_epsilon, composite.norm)
        logits = self.head(hidden)
        all_logits = None
        if return_all_logits:
            normed = rules.rms_norm(x, self.final_norm.weight, self.final_norm.variance_epsilon, composite.norm)
            all_logits = self.head(normed)
        return TwinOutput(logits, embeds, cos_leaves, sin_leaves, last_index, all_logits)

    def _decoder_layer(self, layer, x, cos, sin, mask, composite: Composite, causal, attention, recorder):
        attn = layer.self_attn
        b, t, _ = x.shape
        h = rules.rms_norm(x, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon, composite.norm)
        hd = attn.head_dim
        q = attn.q_proj(h).view(b, t, -1, hd).transpose(1, 2)
        k = attn.k_proj(h).view(b, t, -1, hd).transpose(1, 2)
        v = attn.v_proj(h).view(b, t, -1, hd).transpose(1, 2)
        q = _apply_rope(q, cos, sin, composite.product)
        k = _apply_rope(k, cos, sin, composite.product)
        o = rules.attention(q, k, v, mask=mask, causal=causal, scale=attn.scaling,
                            weights_share=composite.attn_weights_share, value_share=composite.attn_value_share,
                            qk_share=composite.attn_qk_share, implementation=attention, recorder=recorder)
        o = o.transpose(1, 2).reshape(b, t, -1)
        x = x + attn.o_proj(o)
        h = rules.rms_norm(x, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon,
                           composite.norm)
        mlp = layer.mlp
        gate = rules.activation(mlp.gate_proj(h), mlp.act_fn, composite.activation)
        return x + mlp.down_proj(rules.product(gate, mlp.up_proj(h), rule=composite.product))


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rule: str) -> torch.Tensor:
    """``x*cos + rot(x)*sin`` with the uniform rule on each product (paper Eq. 10)."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return rules.product(x, cos, rule=rule) + rules.product(rules.rotate_half(x), sin, rule=rule)


def _attention_mask(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """Boolean ``[B, 1, T, T]`` key-padding mask (True = attend), or None when nothing is padded.

    Every query row keeps its own position so fully padded rows (left padding) never produce NaN; pad rows never
    influence real tokens because their keys are masked.
    """
    if bool(attention_mask.all()):
        return None
    keys = attention_mask.bool()[:, None, None, :]
    t = attention_mask.shape[1]
    eye = torch.eye(t, dtype=torch.bool, device=attention_mask.device)[None, None]
    return keys | eye


def load_llama(name_or_path: str, *, kind: str = "causal", dtype: str = "bfloat16", quantization: str | None = None,
               num_labels: int = 2, device_map: str | None = None, **kwargs):
    """Load a LLaMA-family model from the hub or a local folder (real checkpoints on GPU machines).

    ``kind``: ``causal`` (LlamaForCausalLM) or ``classifier`` (LlamaForSequenceClassification, pad = eos as the
    official IMDB setup). ``quantization="nf4"``: bitsandbytes 4-bit NF4 with double quantization (Table 1 row
    "LLaMA-2 7B quantized"). Errors (offline hub, missing folder) become one-line :class:`MissingDataError`.
    """
    from ..errors import MissingDataError
    import transformers

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
                   "float64": torch.float64}.get(dtype)
    if torch_dtype is None:
        raise BadInputError(f"unknown dtype {dtype!r}", "use float32, bfloat16, float16 or float64")
    cls = {"causal": transformers.LlamaForCausalLM,
           "classifier": transformers.LlamaForSequenceClassification}.get(kind)
    if cls is None:
        raise BadInputError(f"unknown model kind {kind!r}", "use causal or classifier")
    if kind == "classifier":
        kwargs.setdefault("num_labels", num_labels)
    if quantization == "nf4":
        kwargs["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch_dtype)
        device_map = device_map or ("auto" if torch.cuda.is_available() else "cpu")
    elif quantization not in (None, "none"):
        raise BadInputError(f"unknown quantization {quantization!r}", "use nf4 or none")
    try:
        model = cls.from_pretrained(name_or_path, dtype=torch_dtype, device_map=device_map, **kwargs)
    except OSError as err:
        raise MissingDataError(f"cannot load model {name_or_path!r}: {str(err).splitlines()[0]}",
                               "check the name/path, log in with `hf auth login` for gated LLaMA weights, or "
                               "pre-download the checkpoint and pass its local folder") from None
    if kind == "classifier" and model.config.pad_token_id is None:
        model.config.pad_token_id = model.config.eos_token_id
    model.eval()
    keep_4bit_differentiable(model)
    return model


def keep_4bit_differentiable(model) -> None:
    """Stop bitsandbytes from repacking 4-bit weights for CPU inference, or fail clearly if it already did.

    On CPUs with AVX512-BF16, bitsandbytes (0.50) converts a ``Linear4bit`` weight to a packed CPU format at the
    first forward that runs without gradients in eval mode (e.g. a perturbation step). The packed path computes
    different numbers and returns no input gradient, which would silently zero the relevance of every later
    explanation. The switch is a per-module attribute, so this touches only the given model object.
    """
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            state = getattr(getattr(module, "weight", None), "quant_state", None)
            if state is not None and getattr(state, "packing_format_for_cpu", False):
                raise BadInputError(
                    "this 4-bit model already ran an inference forward on the CPU and bitsandbytes repacked its "
                    "weights (no gradients through them any more)",
                    "load it with palrp_bench.models.llama.load_llama, or explain before any torch.no_grad() forward")
            module.support_avx512bf16_for_cpu = False
