"""Mixture-of-experts MLP blocks of the decoder twins: router, routed experts, shared experts (docs/engine.md,
"Mixture of experts").

A decoder family with sparse MLP blocks names its routing in a :class:`MoeSpec` (``DecoderSpec.moe``); the decoder
layer hands a block to :func:`moe_block` when the block has a router and experts (dense layers of the same model,
e.g. DeepSeek's first layers or Qwen2-MoE's ``mlp_only_layers``, keep the dense MLP). The block reads the library's
weights in place (transformers 5 fuses the experts into ``gate_up_proj [E, 2I, D]`` and ``down_proj [E, D, I]``;
bitsandbytes leaves those 3-D parameters unquantized, so a 4-bit model runs them in its compute dtype) and writes
the wiring with the rules of :mod:`palrp_bench.lrp.rules`:

* the router: a linear map to one logit per expert, softmax or sigmoid scores in :func:`rules.router_dtype`, the
  top-k choice (an index: a constant under every rule), the chosen scores renormalised and scaled as the family
  does, all under :func:`rules.router_gates` (AttnLRP's softmax rule, or constant gates);
* each chosen expert: the gated MLP of the composite (activation rule, product rule on ``act(gate) * up``), then the
  product of its output with its gate value under the product rule (uniform: half of the relevance to the expert
  branch, half to the gate); the ``k`` contributions (and a shared expert) are summed under the epsilon rule;
* a shared expert (Qwen2-MoE, DeepSeek): the dense MLP every token passes; Qwen2-MoE gates it with the sigmoid of a
  linear map, a one-logit router under the same gate rule.

Experts run batched: one loop over the experts that received tokens, each on all of its tokens at once (gathered
with ``index_select``, added back with ``index_add_``), never a loop over tokens.

Stabilisers (:class:`~palrp_bench.lrp.stabilizers.Stabilizers`) at the decoder's places: ``linear`` on the router
logits, the shared-expert gate logit, each expert's ``gate_up`` output (fused, as a whole) and ``down`` output;
``add`` on the sum of the block's contributions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from ..lrp import rules
from ..lrp.composites import Composite
from ..lrp.stabilizers import Stabilizers

__all__ = ["MoeSpec", "moe_block", "route", "routed_experts", "SCORINGS", "SELECTIONS"]

SCORINGS = ("softmax", "sigmoid")
SELECTIONS = ("top_k", "group_limited")


@dataclass(frozen=True)
class MoeSpec:
    """How a family routes tokens to experts (every option read off its transformers 5.x modeling file).

    * ``router`` / ``experts``: names of the block's router (a ``weight [E, D]``) and of its fused experts module
      (``gate_up_proj [E, 2I, D]`` with gate rows first, ``down_proj [E, D, I]``, ``act_fn``).
    * ``top_k``: the config field holding ``k``.
    * ``scoring``: ``"softmax"`` or ``"sigmoid"`` of the router logits, in :func:`rules.router_dtype`;
      ``logits_in_router_dtype``: the logits are computed from the input and the weight cast to that precision
      (DeepSeek) instead of in the model dtype.
    * ``selection``: ``"top_k"`` (the ``k`` largest scores) or ``"group_limited"`` (DeepSeek-V3: experts in
      ``config.n_group`` groups, a group's score the sum of its two largest scores, the ``k`` largest among the
      ``config.topk_group`` best groups); ``selection_bias``: a router buffer added to the scores for the choice only
      (DeepSeek-V3 ``e_score_correction_bias``), or None.
    * ``normalize``: ``"always"`` (Mixtral), the config flag switching the renormalisation of the chosen scores to
      sum 1 (``norm_topk_prob``), or None; ``normalize_eps``: added to its denominator (DeepSeek-V3: 1e-20).
    * ``scaling``: the config field of a factor on the gates (``routed_scaling_factor``), or None.
    * ``gates_in_model_dtype``: the gates are cast to the model dtype before they multiply the experts' outputs
      (Qwen, OLMoE); otherwise the product is taken in the router precision and cast back (Mixtral, DeepSeek).
    * ``shared_expert``: a dense gated MLP every token passes (Qwen2-MoE ``shared_expert``, DeepSeek
      ``shared_experts``), or None; ``shared_expert_gate``: a linear map to one logit whose sigmoid gates it
      (Qwen2-MoE), or None.
    """

    router: str = "gate"
    experts: str = "experts"
    top_k: str = "num_experts_per_tok"
    scoring: str = "softmax"
    logits_in_router_dtype: bool = False
    selection: str = "top_k"
    selection_bias: str | None = None
    normalize: str | None = None
    normalize_eps: float = 0.0
    scaling: str | None = None
    gates_in_model_dtype: bool = True
    shared_expert: str | None = None
    shared_expert_gate: str | None = None

    def problems(self) -> list[str]:
        """Options :func:`moe_block` does not implement (a spec typo), as readable phrases."""
        out = []
        for name, value, allowed in (("scoring", self.scoring, SCORINGS), ("selection", self.selection, SELECTIONS)):
            if value not in allowed:
                out.append(f"moe {name} {value!r} (expected one of {', '.join(allowed)})")
        return out

    def is_sparse(self, block) -> bool:
        """Whether an MLP block is a sparse block of this spec (else it is a dense MLP)."""
        return hasattr(block, self.router) and hasattr(block, self.experts)

    def refusal(self, block) -> str | None:
        """Why a sparse block's experts are not the layout :func:`routed_experts` reads, or None."""
        experts = getattr(block, self.experts)
        layout = {"has_bias": False, "is_transposed": False, "is_concatenated": True, "has_gate": True}
        other = [f"{flag}={getattr(experts, flag)}" for flag, want in layout.items()
                 if getattr(experts, flag, want) != want]
        if other:
            return (f"{type(experts).__name__} stores its experts with {', '.join(other)} (only fused "
                    "[gate | up] weights without biases are supported)")
        return None


def route(router, h: torch.Tensor, spec: MoeSpec, config, composite: Composite, stab: Stabilizers,
          recorder: rules.AttentionRecorder | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(gates [B, T, k], chosen [B, T, k])`` of the input ``h`` ``[B, T, D]``: the chosen experts (long, no
    gradient) and their gate values under ``composite.router`` (:func:`rules.router_gates`, which also books the
    router's absorbed relevance)."""
    weight = router.weight
    if spec.logits_in_router_dtype:
        acc = rules.router_dtype(h.dtype)
        logits = F.linear(h.to(acc), weight.to(acc))
    else:
        logits = F.linear(h, weight)
    logits = rules.stabilize(logits, stab.linear)
    wide = logits.to(rules.router_dtype(logits.dtype))
    scores = torch.softmax(wide, dim=-1) if spec.scoring == "softmax" else torch.sigmoid(wide)
    chosen = _choose(scores.detach(), router, spec, config)
    gates = scores.gather(-1, chosen)
    if spec.normalize is not None and (spec.normalize == "always" or getattr(config, spec.normalize)):
        gates = gates / (gates.sum(-1, keepdim=True) + spec.normalize_eps)
    if spec.scaling is not None:
        gates = gates * float(getattr(config, spec.scaling))
    if spec.gates_in_model_dtype:
        gates = gates.to(logits.dtype)
    return rules.router_gates(gates, logits, composite.router, recorder), chosen


@torch.no_grad()
def _choose(scores: torch.Tensor, router, spec: MoeSpec, config) -> torch.Tensor:
    """The ``k`` chosen experts per token, ``[B, T, k]`` (:class:`MoeSpec` ``selection``)."""
    k = int(getattr(config, spec.top_k))
    choice = scores
    if spec.selection_bias is not None:
        choice = choice + getattr(router, spec.selection_bias).to(choice.dtype)
    if spec.selection == "group_limited":
        n_group, keep_groups = int(config.n_group), int(config.topk_group)
        experts = choice.shape[-1]
        grouped = choice.unflatten(-1, (n_group, experts // n_group))
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)
        best = group_scores.topk(keep_groups, dim=-1, sorted=False).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(-1, best, True)
        choice = choice.masked_fill(~keep.repeat_interleave(experts // n_group, dim=-1), float("-inf"))
    return choice.topk(k, dim=-1, sorted=False).indices


def routed_experts(experts, x: torch.Tensor, gates: torch.Tensor, chosen: torch.Tensor, composite: Composite,
                   stab: Stabilizers) -> torch.Tensor:
    """``sum_k gate_k * expert_k(x)`` per token for ``x`` ``[N, D]``, ``gates`` / ``chosen`` ``[N, k]``, in the
    dtype of ``x``: one pass per expert over all tokens routed to it (module docstring)."""
    n, k = chosen.shape
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=experts.gate_up_proj.shape[0]).tolist()
    tokens = torch.div(order, k, rounding_mode="floor")
    gate_values = gates.reshape(-1)[order]
    out = x.new_zeros(x.shape)
    start = 0
    for expert, count in enumerate(counts):
        if not count:
            continue
        rows = slice(start, start + count)
        start += count
        token = tokens[rows]
        gate, up = rules.stabilize(F.linear(x.index_select(0, token), experts.gate_up_proj[expert]),
                                   stab.linear).chunk(2, dim=-1)
        y = rules.product(rules.activation(gate, experts.act_fn, composite.activation), up, rule=composite.product)
        y = rules.stabilize(F.linear(y, experts.down_proj[expert]), stab.linear)
        y = rules.product(y, gate_values[rows, None], rule=composite.product)
        out.index_add_(0, token, y.to(out.dtype))
    return out


def moe_block(block, h: torch.Tensor, spec: MoeSpec, config, composite: Composite, stab: Stabilizers,
              dense: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
              recorder: rules.AttentionRecorder | None = None) -> torch.Tensor:
    """The sparse block's output ``[B, T, D]`` for its input ``h`` ``[B, T, D]`` (module docstring); ``dense(mlp,
    x)`` is the decoder's dense gated MLP under the same composite (for a shared expert)."""
    b, t, d = h.shape
    gates, chosen = route(getattr(block, spec.router), h, spec, config, composite, stab, recorder)
    out = routed_experts(getattr(block, spec.experts), h.reshape(b * t, d), gates.reshape(b * t, -1),
                         chosen.reshape(b * t, -1), composite, stab).view(b, t, d)
    if spec.shared_expert is not None:
        shared = dense(getattr(block, spec.shared_expert), h)
        if spec.shared_expert_gate is not None:
            logit = rules.stabilize(getattr(block, spec.shared_expert_gate)(h), stab.linear)
            gate = rules.router_gates(torch.sigmoid(logit), logit, composite.router, recorder)
            shared = rules.product(gate, shared, rule=composite.product)
        out = out + shared
    return rules.stabilize(out, stab.add)
