"""What each table row means (docs/protocol.md section 1; the baselines of docs/baselines.md), as data.

A :class:`Method` says which attributor computes it. For LRP rows (``attributor="lrp"``, one forward and one
backward under a composite) it says which LRP pass they need (composite, whether cos/sin or the learned PE are
sinks) and which parts of the relevance the final scores combine. The other rows name an attributor of
:mod:`palrp_bench.attributors` (Integrated Gradients, SmoothGrad, attention rollout, Grad-CAM, AtMan) and carry
its hyperparameters as data: defaults (``params``), the values the AttnLRP paper tuned per dataset
(``dataset_params``, its Tables 5-7) and, above both, a task's own (``TaskConfig.method_params``). No method name
is ever parsed: new rows are new registry entries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import BadInputError

#: the attributor of LRP rows (one forward + one backward under a composite, :mod:`palrp_bench.lrp.attribution`)
LRP = "lrp"
#: input modalities of the model twins (``twin.modality``): text, images, or both (vision-language models)
MODALITIES = ("tokens", "pixels", "image_text")
#: the modalities of the methods that are not one LRP pass (the attributors drive text and vision twins only)
ATTRIBUTOR_MODALITIES = ("tokens", "pixels")


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
    * ``attributor``: :data:`LRP` or the name of an attributor of :mod:`palrp_bench.attributors`.
    * ``params``: the attributor's hyperparameters and their defaults (the keys a task may override).
    * ``dataset_params``: per ``task.dataset`` (``imdb``, ``wikipedia``, ``imagenet``, ``squad``), the values the AttnLRP paper
      chose for that dataset (the captions of its Tables 5-7), applied before a task's own.
    * ``modalities``: the twin modalities the method is defined for (``tokens``, ``pixels``, ``image_text``; the
      default: text and vision twins, which the attributors drive; the LRP rows take vision-language twins too).
    * ``refused_model_kinds``: model kinds (``configs/model/*.yaml`` ``kind``) the method never runs on, with the
      reason and the fix (``alti_logit``: masked LMs, post-norm encoders); the plan refuses such a cell before any
      model loads (:meth:`check_model_kind`). Models of another kind the method cannot explain are refused by the
      method itself once loaded.
    * ``paper_row`` / ``source``: how the papers name the row, and where the method and its values come from.
    """

    name: str
    description: str
    composite: str | None = None
    positional_sinks: bool = False
    use_semantic: bool = True
    use_positional: bool = False
    positional_abs: bool = True
    paper_row: str | None = None
    attributor: str = LRP
    params: Mapping[str, object] = field(default_factory=dict)
    dataset_params: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    modalities: tuple[str, ...] = ATTRIBUTOR_MODALITIES
    refused_model_kinds: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self):
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "refused_model_kinds", MappingProxyType(dict(self.refused_model_kinds)))
        object.__setattr__(self, "dataset_params", MappingProxyType(
            {k: MappingProxyType(dict(v)) for k, v in self.dataset_params.items()}))
        for dataset, values in self.dataset_params.items():
            self.resolved_params(values)  # a typo in a registry entry fails at import

    def __hash__(self):  # params is a mapping: hash by name (methods are registered by unique name)
        return hash(self.name)

    @property
    def is_lrp(self) -> bool:
        return self.attributor == LRP

    @property
    def reads_embeddings_switch(self) -> bool:
        """An LRP row whose scores are the semantic part alone (``attnlrp``, ``cp_lrp``, ``grad_x_input``): on a
        text model with learned absolute positions the run-level ``embeddings`` switch decides whether that part is
        the token embeddings' relevance or the full embeddings' (:mod:`.token_aggregation`)."""
        return self.is_lrp and self.use_semantic and not self.use_positional

    def task_params(self, dataset: str | None, task_overrides: Mapping[str, object] | None = None) -> dict:
        """What a task passes to ``explain(params=...)``: the paper's values for ``dataset``, then the task's own."""
        return {**self.dataset_params.get(dataset or "", {}), **dict(task_overrides or {})}

    def params_for(self, task) -> dict:
        """:meth:`task_params` of a task config: its dataset's paper values, then its ``method_params`` for this
        method (what a job passes to ``explain(params=...)``, what the cell fingerprint and the cost model read)."""
        own = (getattr(task, "method_params", None) or {}).get(self.name)
        return self.task_params(getattr(task, "dataset", None), own)

    def resolved_params(self, overrides: Mapping[str, object] | None = None) -> dict:
        """The method's hyperparameters with ``overrides`` applied; an unknown key is a one-line error."""
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - set(self.params))
        if unknown:
            known = ", ".join(sorted(self.params)) or "none"
            raise BadInputError(f"method {self.name!r} has no hyperparameter {', '.join(unknown)}",
                                f"its hyperparameters are: {known}")
        return {**self.params, **overrides}

    def check_modality(self, modality: str) -> None:
        """Refuse a model whose twin modality the method is not defined for (one line)."""
        if modality not in self.modalities:
            raise BadInputError(f"method {self.name!r} is defined for {' and '.join(self.modalities)} models, not "
                                f"{modality}", "choose a method that fits the model (see docs/baselines.md)")


    def check_positional(self, kind: str | None, model: str) -> None:
        """Refuse a model whose positional encoding (``kind``, a name of :mod:`palrp_bench.lrp.positional`; None:
        unknown, nothing refused) has a single sink when the method ablates the per-layer ones (one line; ``model``
        names it)."""
        if kind is None or self.positional_abs or not self.is_lrp:
            return
        from ..lrp.positional import get_positional

        if not get_positional(kind).multi_sink:
            raise BadInputError(f"method {self.name!r} ablates per-layer positional sinks, but {model}'s {kind} "
                                "position has a single sink", "use pa_lrp")

    def check_model_kind(self, kind: str, model: str = "") -> None:
        """Refuse a model kind the method never runs on (:attr:`refused_model_kinds`; one line)."""
        if kind in self.refused_model_kinds:
            reason, fix = self.refused_model_kinds[kind]
            name = f"model {model} ({kind})" if model else f"{kind} models"
            raise BadInputError(f"method {self.name!r} cannot explain {name}: {reason}", fix)


METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add a table row (its attributor is registered in :mod:`palrp_bench.attributors`, tested there)."""
    METHODS[method.name] = method
    return method


register_method(Method("attnlrp", "AttnLRP: semantic relevance, positional encoding treated as constant",
                       paper_row="AttnLRP", modalities=MODALITIES))
register_method(Method("pe_only", "positional relevance only (PA-LRP sinks, semantic part dropped)",
                       positional_sinks=True, use_semantic=False, use_positional=True, paper_row="PE only",
                       modalities=MODALITIES))
register_method(Method("pa_lrp", "PA-LRP: semantic + positional relevance (multi-sink, |per-layer terms|)",
                       positional_sinks=True, use_semantic=True, use_positional=True, paper_row="Ours",
                       modalities=MODALITIES))
register_method(Method("pa_lrp_no_multisink", "PA-LRP ablation: per-layer positional terms summed signed",
                       positional_sinks=True, use_semantic=True, use_positional=True, positional_abs=False,
                       paper_row="w/o multi-sink", modalities=MODALITIES))
register_method(Method("grad_x_input", "plain Gradient x Input (baseline; the cost floor)",
                       composite="grad_x_input", paper_row="Input×Gradient", modalities=MODALITIES))
register_method(Method("cp_lrp", "CP-LRP: attention weights and gates constant (baseline)", composite="cp_lrp",
                       paper_row="CP-LRP (ε-rule)", modalities=MODALITIES))

# -- the ViT composites of the AttnLRP paper (appendix B.4): gamma rules with its own values ----------------------
register_method(Method("attnlrp_gamma_b4", "AttnLRP with the AttnLRP paper's ViT composite (gamma 0.25 conv, 0.05 "
                       "linears, epsilon attention projections)", composite="attnlrp_gamma_b4",
                       modalities=("pixels",), paper_row="AttnLRP (best)", source="AttnLRP paper appendix B.4"))
register_method(Method("cp_lrp_gamma_b4", "CP-LRP with the AttnLRP paper's ViT composite (gamma 0.25 conv, 0.05 "
                       "linears, epsilon attention projections)", composite="cp_lrp_gamma_b4",
                       modalities=("pixels",), paper_row="γ CP-LRP (best)", source="AttnLRP paper appendix B.4"))

# -- baselines of the AttnLRP paper (its Table 1, appendix A.1); hyperparameters per task in the task configs -------
register_method(Method(
    "integrated_gradients", "Integrated Gradients (Captum) on the input embeddings / pixels, zero baseline",
    attributor="integrated_gradients", paper_row="IG",
    params={"n_steps": 50, "method": "gausslegendre", "baseline": 0.0},
    source="Sundararajan et al. 2017; AttnLRP paper Eq. 21; n_steps and the quadrature: Captum's defaults"))
register_method(Method(
    "smoothgrad", "SmoothGrad (Captum NoiseTunnel over the gradient) on the input embeddings / pixels",
    attributor="smoothgrad", paper_row="SmoothGrad",
    params={"sigma": 0.05, "n_samples": 50, "times_input": False},
    dataset_params={"imdb": {"sigma": 0.05}, "wikipedia": {"sigma": 0.1}, "imagenet": {"sigma": 0.01},
                    "squad": {"sigma": 0.1}},
    source="Smilkov et al. 2017; AttnLRP paper Eq. 22, sigma per dataset from its Tables 5-8"))
register_method(Method(
    "attn_rollout", "attention rollout: product of (I + head-mean attention) over layers, outliers discarded",
    attributor="attn_rollout", paper_row="AttnRoll", params={"discard_threshold": 1.0},
    dataset_params={"imdb": {"discard_threshold": 1.0}, "wikipedia": {"discard_threshold": 1.0},
                    "imagenet": {"discard_threshold": 0.99}, "squad": {"discard_threshold": 1.0}},
    source="Abnar and Zuidema 2020; AttnLRP paper Eq. 23 and the discard threshold dt of appendix A.1.4"))
register_method(Method(
    "grad_attn_rollout", "gradient-weighted attention rollout: head-mean of the positive part of grad * attention",
    attributor="grad_attn_rollout", paper_row="Grad×AttnRoll", params={"discard_threshold": 1.0},
    dataset_params={"imdb": {"discard_threshold": 1.0}, "wikipedia": {"discard_threshold": 1.0},
                    "imagenet": {"discard_threshold": 0.91}, "squad": {"discard_threshold": 1.0}},
    source="Chefer et al. 2021a; AttnLRP paper appendix A.1.4"))
register_method(Method(
    "grad_cam", "Grad-CAM for transformers: last attention map of the explained token weighted by its mean gradient",
    attributor="grad_cam", paper_row="GradCAM", params={"relu": None},
    source="Chefer et al. 2021b (their GradCAM baseline); AttnLRP paper Sec. 4.1.1"))
register_method(Method(
    "atman", "AtMan: one token at a time suppressed in the pre-softmax attention scores of every layer",
    attributor="atman", paper_row="AtMan",
    params={"suppression": 1.0, "threshold": None, "score": "cross_entropy"},
    dataset_params={"imdb": {"suppression": 0.7}, "wikipedia": {"suppression": 1.0},
                    "imagenet": {"suppression": 1.0, "threshold": 0.1}, "squad": {"suppression": 0.9}},
    source="Deb et al. 2023; AttnLRP paper appendix A.1.5, p and t per dataset from its Tables 5-8"))

# -- gradient baselines of "A Close Look at Decomposition-based Attributions for Transformer Language Models" -------
register_method(Method(
    "gradient_l1", "L1 norm of the gradient of the explained output w.r.t. each input embedding",
    attributor="gradient_l1", paper_row="Gradient_l1",
    source="Simonyan et al. 2014, Li et al. 2016; as defined in section 3.3 of 'A Close Look at "
           "Decomposition-based Attributions for Transformer Language Models'"))
register_method(Method(
    "gradient_l2", "squared L2 norm of the gradient of the explained output w.r.t. each input embedding",
    attributor="gradient_l2", paper_row="Gradient",
    source="Simonyan et al. 2014, Li et al. 2016; squared L2 norm as defined in section 3.3 of 'A Close Look at "
           "Decomposition-based Attributions for Transformer Language Models', its 'Gradient' (section 5.1)"))
# -- decompositions of the residual stream ("A Close Look at Decomposition-based Attributions ...": its ALTI-Logit /
#    ALTI column; docs/baselines.md) ------------------------------------------------------------------------------
#: why the residual-stream decompositions refuse encoder-decoders, and what to use instead
_ONE_RESIDUAL_STREAM = ("it does not support encoder-decoders, whose two residual streams are joined by "
                        "cross-attention", "use an LRP method, a gradient method, attn_rollout or atman on T5")
register_method(Method(
    "alti_logit", "ALTI-Logit: the explained logit decomposed along the residual stream, attention updates tracked "
    "to the input tokens with ALTI (pre-norm decoders)", attributor="alti_logit", paper_row="ALTI-Logit",
    modalities=("tokens",),
    refused_model_kinds={"masked_lm": ("masked LMs (BERT, RoBERTa) are post-norm encoders, whose residual stream is "
                                       "no sum of block outputs",
                                       "use method=alti (Ferrando et al. 2022), the paper's proxy for BERT"),
                         "seq2seq": _ONE_RESIDUAL_STREAM},
    source="Ferrando et al. 2023; A Close Look at Decomposition-based Attributions, appendix B.1 (GQA, RMSNorm)"))
register_method(Method(
    "alti", "ALTI: rollout of per-block token contributions from L1 distances of transformed vectors (targets ignored)",
    attributor="alti", paper_row="ALTI", modalities=("tokens",), refused_model_kinds={"seq2seq": _ONE_RESIDUAL_STREAM},
    source="Ferrando et al. 2022 (clipped L1 contributions); A Close Look's proxy for ALTI-Logit on BERT"))


def get_method(name_or_method: str | Method) -> Method:
    if isinstance(name_or_method, Method):
        return name_or_method
    try:
        return METHODS[name_or_method]
    except KeyError:
        raise BadInputError(f"unknown method {name_or_method!r}",
                            f"use one of: {', '.join(sorted(METHODS))}") from None
