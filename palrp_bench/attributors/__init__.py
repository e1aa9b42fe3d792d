"""Attribution methods that are not one LRP pass: the baselines of the AttnLRP paper's Table 1, and the gradient
norms and ALTI-Logit / ALTI of the evidence benchmark (docs/baselines.md).

One module per method, each registering its function with :func:`register_attributor`; the registry imports every
module of this package when first used. :func:`palrp_bench.explain` dispatches a method whose
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

from typing import Callable

from ..discovery import Registry
from ..lrp.explanation import Explanation
from ..methods.registry import Method
from .base import AttributorCall, AttributorResult, explanation_of, make_call

__all__ = ["ATTRIBUTORS", "register_attributor", "get_attributor", "AttributorCall", "AttributorResult",
           "run_attributor"]

#: attributor name -> ``fn(call) -> AttributorResult``
ATTRIBUTORS = Registry("attributor", package=__name__)


def register_attributor(name: str):
    """Decorator: the function computing attributor ``name`` (``fn(call) -> AttributorResult``)."""
    return ATTRIBUTORS.register(name)


def get_attributor(name: str) -> Callable[[AttributorCall], AttributorResult]:
    """The registered attributor ``name`` (imports this package's modules once), or a one-line error."""
    return ATTRIBUTORS.lookup(name)


def run_attributor(twin, prepared, method: Method, params: dict, target, options: dict, aggregation: str,
                   batch_size: int | None = None, foil=None) -> Explanation:
    """Explain the prepared batch with ``method``'s attributor and hyperparameters ``params`` (module docstring);
    with a ``foil`` the explained value is ``logit[target] - logit[foil]``."""
    fn = get_attributor(method.attributor)
    call = make_call(twin, prepared, method, params, target, options, batch_size, foil)
    return explanation_of(call, fn(call), aggregation)
