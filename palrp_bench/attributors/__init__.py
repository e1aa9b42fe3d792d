"""Attribution methods that are not one LRP pass: the baselines of the AttnLRP paper's Table 1, and the gradient
norms and ALTI-Logit / ALTI of the evidence benchmark (docs/baselines.md).

One module per method, each registering its function with :func:`register_attributor` together with what planning
reads of it (:class:`AttributorSpec`: the model passes one explanation costs, and its memory when that is not a
backward's); the registry imports every module of this package when first used. :func:`palrp_bench.explain`
dispatches a method whose
``Method.attributor`` is not ``"lrp"`` to :func:`run_attributor`, which resolves the explained output, calls the
attributor with an :class:`~palrp_bench.attributors.base.AttributorCall` and turns its per-feature relevance into
the same :class:`~palrp_bench.lrp.explanation.Explanation` every LRP method returns (``scores`` ``[B, T]`` per token,
``[B, H, W]`` per pixel), so every task and metric works unchanged.

| attributor | module | what it needs from the model |
|---|---|---|
| ``integrated_gradients`` | :mod:`.integrated_gradients` | forwards from the input (Captum) |
| ``smoothgrad`` | :mod:`.smoothgrad` | forwards from the input (Captum) |
| ``attn_rollout``, ``grad_attn_rollout`` | :mod:`.rollout` | per-layer attention weights (and their gradient) |
| ``grad_cam`` | :mod:`.grad_cam` | the last layer's attention weights and their gradient |
| ``atman`` | :mod:`.atman` | scaled keys in every layer (:func:`palrp_bench.lrp.rules.attention_hooks`) |
| ``gradient_l1``, ``gradient_l2`` | :mod:`.gradient_norm` | one backward to the input embeddings / pixels |
| ``alti``, ``alti_logit`` | :mod:`.alti` | a traced forward: weights, values, output projections, residual sums |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..discovery import Registry
from ..lrp.explanation import Explanation
from ..methods.registry import LRP, Method
from .base import AttributorCall, AttributorResult, explanation_of, make_call

__all__ = ["ATTRIBUTORS", "AttributorSpec", "register_attributor", "attributor_spec", "get_attributor",
           "method_passes", "AttributorCall", "AttributorResult", "run_attributor"]


@dataclass(frozen=True)
class AttributorSpec:
    """One attributor: its function ``fn(call) -> AttributorResult`` (None for :data:`~palrp_bench.methods.registry.
    LRP`, which ``palrp_bench.explain`` runs through :mod:`palrp_bench.lrp.attribution`), the model passes one
    explanation of a sample costs, ``passes(params, n_features) -> (forwards, backwards)`` (what
    ``Explanation.forward_passes`` reports and the cost model prices; ``n_features``: the tokens, or patch tokens of a
    ViT, an explanation walks), and ``memory(arch, tokens, batch_size, width) -> bytes`` where an explanation holds
    something else than a backward's activations (None: the cost model's backward estimate)."""

    name: str
    fn: Callable[[AttributorCall], AttributorResult] | None
    passes: Callable[[Mapping[str, Any], int], tuple[int, int]]
    memory: Callable[[Any, float, int, int], float] | None = None


#: attributor name -> :class:`AttributorSpec`
ATTRIBUTORS = Registry("attributor", package=__name__)
#: LRP rows: one forward and one modified backward under a composite
ATTRIBUTORS.register(LRP)(AttributorSpec(LRP, None, lambda params, n: (1, 1)))


def register_attributor(name: str, *, passes: Callable[[Mapping[str, Any], int], tuple[int, int]],
                        memory: Callable[[Any, float, int, int], float] | None = None):
    """Decorator: the function computing attributor ``name`` (``fn(call) -> AttributorResult``) and the rest of its
    :class:`AttributorSpec`."""
    def deco(fn):
        ATTRIBUTORS.register(name)(AttributorSpec(name, fn, passes, memory))
        return fn
    return deco


def attributor_spec(name: str) -> AttributorSpec:
    """The registered :class:`AttributorSpec` of ``name`` (imports this package's modules once), or a one-line
    error."""
    return ATTRIBUTORS.lookup(name)


def get_attributor(name: str) -> Callable[[AttributorCall], AttributorResult]:
    """The function of the registered attributor ``name``."""
    return attributor_spec(name).fn


def method_passes(method: Method, params: Mapping[str, Any] | None = None, n_features: int = 1) -> tuple[int, int]:
    """Model ``(forwards, backwards)`` one explanation of a sample with ``n_features`` features costs under
    ``method`` with hyperparameters ``params`` (its defaults filled in)."""
    return attributor_spec(method.attributor).passes(method.resolved_params(params), int(n_features))


def run_attributor(twin, prepared, method: Method, params: dict, target, options: dict, aggregation: str,
                   batch_size: int | None = None, foil=None) -> Explanation:
    """Explain the prepared batch with ``method``'s attributor and hyperparameters ``params`` (module docstring);
    with a ``foil`` the explained value is ``logit[target] - logit[foil]``."""
    fn = get_attributor(method.attributor)
    call = make_call(twin, prepared, method, params, target, options, batch_size, foil)
    return explanation_of(call, fn(call), aggregation)
