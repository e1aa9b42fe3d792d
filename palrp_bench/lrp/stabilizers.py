"""Denominator stabilisers of the epsilon rules, per place: the switch ``stabilizers=official|none``.

The rules of :mod:`palrp_bench.lrp.rules` are exact (eps -> 0). The official PA-LRP code (commit 51eb418) adds a small
``eps`` to the denominator of every epsilon-type rule, ``R_z / (z + eps)``; it moves elements whose pre-activation
is within ~eps of zero and makes the official maps differ from exact ones by ~1e-3 of their maximum on tiny random
models. :class:`Stabilizers` says which ``eps`` goes where; the twins apply each one with
:func:`palrp_bench.lrp.rules.stabilize` (gradient at ``z`` times ``z / (z + eps)``, forward unchanged) or, for the
gamma rule, as Zennit's sign-aware stabiliser (:mod:`palrp_bench.lrp.gamma`).

Every field is the ``eps`` of the factor ``z / (z + eps)`` on the named output ``z``. The official code writes some
rules with another normalisation; the conversions are in the comments of the two official sets below.

``qk`` and the mask part of ``add`` act on the attention score matrix, which the fused attention path (SDPA, the
default) never materialises; the twins apply them with ``attention="eager"`` only (the official code's attention
is eager). On the official fixtures leaving them out moves the token scores by <= 1e-6 relative (below the
float32 resolution of the official outputs), while the eager path costs T x T memory per head and layer
(docs/engine.md, "Agreement with the official PA-LRP code").

Which set a choice means (docs/engine.md, "Which families default to the official set"): ``"official"`` is the
official set of the model family (:attr:`official_stabilizers` of the twin: :data:`OFFICIAL_NLP` for every decoder
family, :data:`OFFICIAL_VISION` for the timm ViT), ``"none"`` is :data:`NONE`. Left unset (``None``),
``protocol=corrected`` takes :data:`NONE` and ``protocol=official`` takes the official set only for the families
the official code ran (the twin's ``official_code_ran``: LLaMA-2, LLaMA-3.x and TinyLlama, i.e. the decoder spec
``llama``, and DeiT, i.e. every timm ``VisionTransformer`` but the torchvision ViT), so that ``protocol=official``
reproduces the official code where it has a counterpart and stays with the exact rules of the references elsewhere
(Mistral, Qwen, Gemma, Phi-3, GPT-NeoX: AttnLRP as ``lxt`` computes it). An explicit ``"official"`` places the
official set on any family that has one (every decoder); families without one (GPT-2, OPT, BERT, RoBERTa, BLOOM,
RoPE ViTs) refuse it. Plain Gradient x Input and the baselines that are not one LRP pass always get :data:`NONE`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

from ..errors import BadInputError

__all__ = ["Stabilizers", "NONE", "OFFICIAL_NLP", "OFFICIAL_VISION", "CHOICES", "PROTOCOL_DEFAULTS",
           "check_stabilizers", "default_stabilizers", "resolve_stabilizers"]


@dataclass(frozen=True)
class Stabilizers:
    """Where the epsilon rules are stabilised and by how much (0 = exact rule).

    * ``linear``: output of every linear / conv under the epsilon rule (NLP: all projections and the LM head /
      classifier; ViT: the attention projections).
    * ``add``: output of every elementwise sum under the epsilon rule: residual adds, the position-embedding add
      (ViT), ``q cos + rot(q) sin`` (RoPE), and the additive attention mask on the scores where a mask exists
      (eager attention only).
    * ``qk``: the unscaled score product ``Q K^T`` (eager attention only).
    * ``av``: the attention output ``A @ V``.
    * ``norm`` / ``final_norm``: output of the std-constant LayerNorms inside the network / the final one.
    * ``gamma``: Zennit's sign-aware ``eps`` in the gamma rule (``D + eps * sign(D)``), not ``z / (z + eps)``.
    * ``copy``: a tensor used twice (the residual branch point) or row-selected (the CLS pooling) when the
      official code gives that copy its own rule (``safe_divide``: ``R / (x + eps)``).
    """

    name: str
    linear: float = 0.0
    add: float = 0.0
    qk: float = 0.0
    av: float = 0.0
    norm: float = 0.0
    final_norm: float = 0.0
    gamma: float = 0.0
    copy: float = 0.0

    @property
    def active(self) -> bool:
        """Whether any place has a non-zero eps (False for :data:`NONE`: the exact rules)."""
        return any(getattr(self, f.name) != 0.0 for f in fields(self) if f.name != "name")


#: The exact rules (eps -> 0): ``protocol=corrected``.
NONE = Stabilizers("none")

#: The official NLP code (``NLP/lxt``, a modified ``lxt`` copy; ``lxt.functional._stabilize`` adds ``+eps``):
#: ``EpsilonRule`` (default eps 1e-8) on every ``nn.Linear`` incl. ``lm_head`` / ``score``; ``add2`` (1e-8) on both
#: residuals, on the RoPE sums ``q cos + rot(q) sin`` / ``k cos + rot(k) sin`` and on ``scores + mask`` (eager
#: attention with a causal or padding mask); ``matmul`` (1e-8) on ``Q K^T`` as ``R / (2 S + 1e-8)`` per operand =
#: ``1/2 * R / (S + 0.5e-8)``; ``UniformEpsilonRule`` (1e-6) on ``A V`` as ``R / (Y + 1e-6) / 2`` per operand.
#: RMSNorm (identity), SiLU (identity), gate*up and the RoPE products (uniform) and the softmax carry no eps.
OFFICIAL_NLP = Stabilizers("official", linear=1e-8, add=1e-8, qk=0.5e-8, av=1e-6)

#: The official vision code (``modules/layers_ours.py`` with ``full_lrp_GammaLinear_POS_ENC_gammaConv``):
#: ``Linear.relprop`` epsilon branch ``R / (Y + 1e-8)`` (value and output projections); ``Add`` ``R / (a + b + 1e-6)``
#: (position embedding, both residuals); ``einsum`` ``R / (2 Y + 1e-6)`` per operand = ``1/2 * R / (Y + 0.5e-6)``
#: (both attention products); ``CustomLRPLayerNorm`` ``R / (y + eps_LN)`` with the norm's own eps, 1e-6 in the
#: blocks and nn.LayerNorm's default 1e-5 in the official final norm (DeiT itself uses 1e-6 there); Zennit's
#: ``Gamma`` (stabiliser 1e-6) on the MLP linears, the head and the patch conv; ``Clone`` and ``IndexSelect``
#: ``safe_divide`` ``R / (x + 1e-9)``.
OFFICIAL_VISION = Stabilizers("official", linear=1e-8, add=1e-6, qk=0.5e-6, av=0.5e-6, norm=1e-6, final_norm=1e-5,
                              gamma=1e-6, copy=1e-9)

#: The names the switch accepts.
CHOICES = ("official", "none")

#: The default of each protocol for the families the official code ran (docs/protocol.md preamble: ``official``
#: follows the official code); every other family defaults to ``none`` under both (module docstring).
PROTOCOL_DEFAULTS = {"official": "official", "corrected": "none"}


def check_stabilizers(choice: str | None) -> str | None:
    """A stabiliser name (``official`` / ``none``) or None, else a one-line :class:`BadInputError`."""
    if choice is not None and choice not in CHOICES:
        raise BadInputError(f"unknown stabilizers {choice!r}", f"use one of: {', '.join(CHOICES)}")
    return choice


def default_stabilizers(choice: str | None, protocol: str) -> str:
    """The requested stabiliser name: ``choice``, or the protocol's default when None (what a run records as its
    cell setting). What an explanation then uses depends on the family too (:func:`resolve_stabilizers`): under
    ``protocol=official`` a family the official code never ran uses :data:`NONE`."""
    return check_stabilizers(choice) or PROTOCOL_DEFAULTS[protocol]


def resolve_stabilizers(choice: str | Stabilizers | None, *, protocol: str, official: Stabilizers | None,
                        official_code_ran: bool, model: str = "this model",
                        families: Callable[[], str] | str = "") -> Stabilizers:
    """The stabilisers of one explanation: ``"official"`` -> ``official`` (the model family's official set);
    ``"none"`` -> :data:`NONE`; a :class:`Stabilizers` passes through; ``None`` -> the protocol's default when the
    official code ran the family (``official_code_ran``), else :data:`NONE` (module docstring).

    ``official=None``: the official code has no counterpart for the family (``model`` names it): an explicit
    ``"official"`` or a set with a non-zero eps is then refused with one line naming the ``families`` that have an
    official set (a string, or a function giving it, called only then).
    """
    if choice is None:
        choice = PROTOCOL_DEFAULTS[protocol] if official is not None and official_code_ran else "none"
    if isinstance(choice, Stabilizers):
        resolved = choice
    elif check_stabilizers(choice) == "none":
        return NONE
    else:
        resolved = official
    if official is None and (resolved is None or resolved.active):
        name = choice if isinstance(choice, str) else choice.name
        raise BadInputError(f"stabilizers={name!r} has no counterpart for {model}: the official code's stabilisers "
                            f"exist for {(families() if callable(families) else families) or 'other families'} only",
                            "use stabilizers='none' or leave it unset")
    return resolved if resolved is not None else NONE
