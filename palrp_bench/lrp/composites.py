"""Composites: named sets of rules (which rule goes where), in the spirit of Zennit.

A composite is pure data; the model twins (``palrp_bench/models``) read it when they build their LRP-aware
forward. The rules themselves live in :mod:`palrp_bench.lrp.rules`.

* ``attnlrp``   -- AttnLRP (Achtibat et al. 2024): identity on activations and norms, uniform rule on every
  product (gate*up, q*cos, Q K^T, A V), softmax rule, epsilon (eps -> 0) on linears.
* ``cp_lrp``    -- Conservative propagation (Ali et al. 2022): attention weights and activation gates are
  constants, so all relevance flows along the value path; conserves exactly with zero biases.
* ``attnlrp_constant_router`` -- AttnLRP with the gate values of mixture-of-experts routers held constant (all of
  an expert's relevance stays on its branch, none reaches the router): a named variant of the gate treatment
  (docs/engine.md, "Mixture of experts"); identical to ``attnlrp`` on dense models.
* ``grad_x_input`` -- plain Gradient x Input (no modification anywhere): the cost floor in benchmarks.
* ``official_vit`` -- the vision composite of the official PA-LRP code (docs/protocol.md section 1): gamma rule on
  the head and MLP linears (gamma=0.05) and on the patch-embedding conv (gamma=100), epsilon on the attention
  projections, std-constant LayerNorm, identity GELU, only the value path inside attention with half of the
  attention-branch relevance.
* ``attnlrp_gamma`` -- AttnLRP with the official PA-LRP vision gamma values on the linears and the patch conv
  (gamma 0.05 on the MLP and head linears, gamma 100 on the patch-embedding conv).
* ``attnlrp_gamma_b4`` / ``cp_lrp_gamma_b4`` -- AttnLRP / CP-LRP with the ViT composite of the AttnLRP paper
  (Achtibat et al. 2024, appendix B.4 and its Figures 13-16, the rows "AttnLRP (best)" and "gamma CP-LRP (best)"
  of its Table 5): gamma 0.25 on the patch-embedding convolution, gamma 0.05 on the linear layers outside
  attention (MLP, head), epsilon on the attention input projections (``qkv``) and output projection. They differ
  from ``attnlrp_gamma`` only in the convolution's gamma (0.25 instead of 100).

* ``attnlrp_vision_gamma`` -- AttnLRP with those B.4 values on a vision-language model's vision tower and projector
  (gamma 0.25 on the patch embedding, 0.05 on the tower's MLP and the projector's linears), the language model
  unchanged. A tower's gamma values may need choosing per layer group, so each group is a role of its own.

Linear-layer roles (``linear_gamma`` keys) are named by the twins (a ViT has ``patch_embed``, ``qkv``,
``attn_out``, ``mlp``, ``head``; a vision-language model ``vision_patch_embed``, ``vision_qkv``, ``vision_attn_out``,
``vision_mlp``, ``projector``); a twin refuses a composite naming a role it does not have.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BadInputError


@dataclass(frozen=True)
class Composite:
    """Which LRP rule applies to which kind of operation.

    Attributes mirror the rule functions in :mod:`palrp_bench.lrp.rules`:

    * ``activation``: ``identity`` | ``gradient`` | ``constant``
    * ``norm``: ``identity`` | ``gradient``
    * ``product``: ``uniform`` | ``gradient`` (elementwise products: gate*up, q*cos, rot(q)*sin)
    * ``attn_weights_share`` / ``attn_value_share``: split of the relevance of ``A @ V``
    * ``attn_qk_share``: split of the relevance of ``Q K^T`` (to each of Q and K)
    * ``softcap``: ``identity`` | ``gradient``, the rule on soft-capping ``c * tanh(x / c)`` of attention scores
      and logits (Gemma 2); identity in every LRP composite (CP-LRP included: its scores are constants anyway, and
      a constant cap on the logits would stop all relevance)
    * ``router``: ``gradient`` | ``constant``, the rule of a mixture-of-experts router's gate values
      (:func:`palrp_bench.lrp.rules.router_gates`): ``gradient`` is AttnLRP's softmax rule on the routing function,
      the gate-times-expert product then takes ``product``; ``constant`` detaches the gates (CP-LRP)
    * ``linear_gamma``: gamma of the generalised gamma rule per linear-layer role (vision only; an empty
      mapping means the epsilon rule, i.e. plain gradient, everywhere)
    * ``stabilizable``: the epsilon-type rules take the ``stabilizers`` switch (:mod:`palrp_bench.lrp.stabilizers`);
      False for plain Gradient x Input, which stays unmodified whatever the switch says
    """

    name: str
    activation: str = "identity"
    norm: str = "identity"
    product: str = "uniform"
    attn_weights_share: float = 0.5
    attn_value_share: float = 0.5
    attn_qk_share: float = 0.5
    softcap: str = "identity"
    router: str = "gradient"
    linear_gamma: dict = field(default_factory=dict)
    stabilizable: bool = True

    def __hash__(self):  # dict field: hash by name (composites are registered by unique name)
        return hash(self.name)

    @property
    def ungated_activation(self) -> str:
        """Rule of an activation with no gated product after it (GELU/ReLU MLPs, a pooler's tanh). CP-LRP's "gates
        are constants" then holds the activation's self-gate ``f(x) / x`` constant, which is the identity rule (as
        lxt's CP-LRP map for ungated MLPs); every other composite keeps its activation rule."""
        return "identity" if self.activation == "constant" else self.activation

    def gamma_for(self, role: str) -> float | None:
        """Gamma for a linear layer role (``head``, ``mlp``, ``patch_embed``, ...), or None for epsilon."""
        return self.linear_gamma.get(role)


ATTNLRP = Composite("attnlrp")
CP_LRP = Composite("cp_lrp", activation="constant", norm="identity", product="uniform",
                   attn_weights_share=0.0, attn_value_share=1.0, attn_qk_share=0.5, router="constant")
ATTNLRP_CONSTANT_ROUTER = Composite("attnlrp_constant_router", router="constant")
GRAD_X_INPUT = Composite("grad_x_input", activation="gradient", norm="gradient", product="gradient",
                         attn_weights_share=1.0, attn_value_share=1.0, attn_qk_share=1.0, softcap="gradient",
                         stabilizable=False)
OFFICIAL_VIT = Composite("official_vit", activation="identity", norm="identity", product="uniform",
                         attn_weights_share=0.0, attn_value_share=0.5, attn_qk_share=0.5,
                         linear_gamma={"head": 0.05, "mlp": 0.05, "patch_embed": 100.0})

ATTNLRP_GAMMA = Composite("attnlrp_gamma", linear_gamma={"head": 0.05, "mlp": 0.05, "patch_embed": 100.0})

#: gamma values of the AttnLRP paper's ViT composite (appendix B.4, Figures 13-16): Conv 0.25, Linear 0.05,
#: LinearInputProjection and LinearOutputProjection epsilon
GAMMA_B4 = {"head": 0.05, "mlp": 0.05, "patch_embed": 0.25}
ATTNLRP_GAMMA_B4 = Composite("attnlrp_gamma_b4", linear_gamma=GAMMA_B4)
CP_LRP_GAMMA_B4 = Composite("cp_lrp_gamma_b4", activation="constant", norm="identity", product="uniform",
                            attn_weights_share=0.0, attn_value_share=1.0, attn_qk_share=0.5, router="constant",
                            linear_gamma=GAMMA_B4)

#: AttnLRP with the AttnLRP paper's ViT gamma values (appendix B.4) on a vision-language model's vision tower and
#: projector (the roles of :data:`palrp_bench.models.vision_towers.GAMMA_ROLES`): conv 0.25, the tower's MLP
#: linears and the projector's 0.05, epsilon on the tower's attention projections and in the language model
ATTNLRP_VISION_GAMMA = Composite("attnlrp_vision_gamma",
                                 linear_gamma={"vision_patch_embed": 0.25, "vision_mlp": 0.05, "projector": 0.05})

COMPOSITES: dict[str, Composite] = {c.name: c for c in (ATTNLRP, ATTNLRP_CONSTANT_ROUTER, CP_LRP, GRAD_X_INPUT,
                                                        OFFICIAL_VIT, ATTNLRP_GAMMA, ATTNLRP_GAMMA_B4,
                                                        CP_LRP_GAMMA_B4, ATTNLRP_VISION_GAMMA)}


def register_composite(composite: Composite) -> Composite:
    """Add a composite to the registry (a new rule set is a few lines)."""
    COMPOSITES[composite.name] = composite
    return composite


def get_composite(name_or_composite: str | Composite) -> Composite:
    """Look a composite up by name; a :class:`Composite` passes through."""
    if isinstance(name_or_composite, Composite):
        return name_or_composite
    try:
        return COMPOSITES[name_or_composite]
    except KeyError:
        raise BadInputError(f"unknown rules {name_or_composite!r}",
                            f"use one of: {', '.join(sorted(COMPOSITES))}") from None
