"""What each table row means (PROTOCOL.md section 1), as data.

A :class:`Method` says which LRP pass it needs (composite, whether cos/sin or the learned PE are sinks) and
which parts of the relevance its final scores combine. No method name is ever parsed: new rows are new
registry entries.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInputError


@dataclass(frozen=True)
class Method:
    """One attribution method (a row of the paper's tables).

    * ``composite``: rules of the pass; ``None`` means the model's default for the protocol (``attnlrp`` for
      LLaMA, ``official_vit`` for DeiT under ``protocol=official``).
    * ``positional_sinks``: the pass makes the positional encoding a relevance sink (one leaf copy of cos/sin
      per layer for RoPE; the ``pos_embed`` tensor for learned PE). Otherwise PE is a constant.
    * ``use_semantic`` / ``use_positional``: which parts the final scores combine.
    * ``positional_abs``: per-layer positional terms enter as ``|.|`` (multi-sink, the paper's method) or
      signed (the Table 2 ablation "w/o multi-sink").
    """

    name: str
    description: str
    composite: str | None = None
    positional_sinks: bool = False
    use_semantic: bool = True
    use_positional: bool = False
    positional_abs: bool = True
    paper_row: str | None = None


METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    METHODS[method.name] = method
    return method


register_method(Method("attnlrp", "AttnLRP: semantic relevance, positional encoding treated as constant",
                       paper_row="AttnLRP"))
register_method(Method("pe_only", "positional relevance only (PA-LRP sinks, semantic part dropped)",
                       positional_sinks=True, use_semantic=False, use_positional=True, paper_row="PE only"))
register_method(Method("pa_lrp", "PA-LRP: semantic + positional relevance (multi-sink, |per-layer terms|)",
                       positional_sinks=True, use_semantic=True, use_positional=True, paper_row="Ours"))
register_method(Method("pa_lrp_no_multisink", "PA-LRP ablation: per-layer positional terms summed signed",
                       positional_sinks=True, use_semantic=True, use_positional=True, positional_abs=False,
                       paper_row="w/o multi-sink"))
register_method(Method("grad_x_input", "plain Gradient x Input (baseline; the cost floor)",
                       composite="grad_x_input"))
register_method(Method("cp_lrp", "CP-LRP: attention weights and gates constant (baseline)", composite="cp_lrp"))


def get_method(name_or_method: str | Method) -> Method:
    if isinstance(name_or_method, Method):
        return name_or_method
    try:
        return METHODS[name_or_method]
    except KeyError:
        raise BadInputError(f"unknown method {name_or_method!r}",
                            f"use one of: {', '.join(sorted(METHODS))}") from None
