"""The cost model of a cell: seconds per sample, model load time and peak memory on a device
(docs/planning.md "Cost model"; used by ``mode=plan`` and ``mode=calibrate``).

Work of one sample, in *units* of 10^9 parameter-tokens (one unit ~ 2 GFLOP)::

    units = E * r * T_e * P(T_e)  +  F * T_f * P(T_f)          P(T) = P_body + 2 * T * A * L

  An encoder-decoder (``seq2seq``: Flan-T5) reads ``T`` encoder tokens and ``T_d`` decoder tokens (the decoder
  start token: ``T_d = 1``), so each of its forwards adds ``T_d * (P_dec + 2 * T * A * L_dec)`` (the decoder
  blocks at its own tokens, their cross-attention over the ``T`` encoder tokens) to the encoder's ``T * P(T)``
  (``P_body``, ``L``: the encoder's blocks).

* ``P_body``: parameters of the transformer blocks that every token is multiplied with (embeddings and the
  output head, applied at one position, are left out; a mixture of experts counts the ``k`` of ``E`` routed experts
  a token uses, its *active* parameters, while memory counts them all: :func:`moe_parameters`); ``A`` = heads x
  head dim, ``L`` = layers (the second term is the attention's score and weighted-sum work as parameter
  equivalents).
* ``E`` explanations over ``T_e`` tokens costing ``r`` forwards each: for LRP (one forward and one modified
  backward) ``r`` is measured per family and quantization; other methods cost ``F + B (r - 1)`` for their ``F``
  forwards and ``B`` backwards per sample (:func:`explanation_forwards`); ``F`` plain forwards over ``T_f``
  tokens (:func:`sample_work`, counted from the procedures).
* ``n`` samples in batches of ``b`` (the batch size the job will use)::

      seconds = n * (o * max(E, 1) + s * units)  +  ceil(n / b) * a        per sample: o * max(E, 1) + s * units + a / b

  with ``s`` seconds per unit, ``o`` a fixed overhead per explanation (Python, hooks, data, per-sample work; it
  dominates for the embedded tiny models) and ``a`` a fixed overhead per *batch* (kernel launches and Python of
  one batched explanation and its perturbation chunks: what makes a GPU slow at batch 1), per *profile* (family,
  dtype, quantization) and device kind. ``a`` is 0 for the CPU (batching gains little there).
* a run adds its start-up (imports) and merge: ``run_overhead_s + merge_s_per_cell * cells`` per device kind.
* model load ``= load_s_per_gparam * params / 10^9``; selection (``first N correct``) costs one forward over
  ``T_f`` tokens per candidate.
* peak memory ``= runtime + weights + max(explanation activations, perturbation-forward activations)``:
  weights by dtype (NF4: 0.5156 bytes per quantized parameter, double quantization), activations per layer
  and token of the batch (:func:`peak_memory`).

Constants: the shipped ``palrp_bench/assets/cost_defaults.yaml`` (the CPU measured on the development machine, one
H100 fitted to a full-size rehearsal on it, docs/planning.md "On one H100"; other GPU kinds are absent, i.e.
*uncalibrated*: a plan shows no time for them rather than an invented one; other names of the same GPU are
aliases of it), overridden by ``cost.json`` in the user cache (``~/.cache/palrp-bench/``, or
``$XDG_CACHE_HOME`` / ``$PALRP_CACHE_DIR``) that ``mode=calibrate`` writes (:mod:`palrp_bench.planning.calibrate`).
Nothing is ever written into the installed package. :func:`resolve_device_kind` turns ``runner.plan_device`` (a
short name such as ``h100``, or a device kind) into the kind a plan is priced on.
"""
from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from ..errors import BadInputError
from ..models.loading import AUTO_CLASSES, hf_config_json
from ..numerics import device_kind as accelerator_kind
from ..rundir import MAP_SENSITIVITY_METRIC
from ..runner.user_cache import user_cache_dir

__all__ = ["Architecture", "Work", "Profile", "CostConstants", "Estimate", "SHIPPED_CONSTANTS", "user_cost_path",
           "load_constants", "device_kind", "architecture_of", "hf_architecture", "sample_work", "measured_prompts",
           "work_units", "typical_tokens", "peak_memory", "estimate", "batch_seconds", "profile_key",
           "known_device_kinds", "resolve_device_kind", "NLP_FORWARDS", "NEXT_TOKEN_FORWARDS",
           "VISION_FORWARDS", "NF4_BYTES_PER_PARAM", "alti_memory", "explanation_memory", "recompute_forwards",
           "moe_parameters"]

SHIPPED_CONSTANTS = Path(__file__).resolve().parents[1] / "assets" / "cost_defaults.yaml"
GIGA = 1e9
#: perturbed rows per NLP sample actually forwarded: original + 11 generation + 11 pruning steps, minus the three
#: duplicates (generation 100% = pruning 0% = original; generation 0% = pruning 100% = all UNK), docs/protocol.md
#: section 2
NLP_FORWARDS = 20
#: next-token tasks prune by signed relevance, so with an even number N of perturbable tokens generation 50% and
#: pruning 50% keep the same N/2 tokens: one more duplicate for half the samples
NEXT_TOKEN_FORWARDS = 19.5
#: pixel perturbation forwards per image: positive and negative, each 9 steps of the predicted-class map plus the
#: original (for its prediction) and 9 steps of the target-class map (docs/protocol.md section 3)
VISION_FORWARDS = 38
#: bytes per parameter of a 4-bit NF4 layer with double quantization: 4 bits + an 8-bit absmax per 64 weights
#: + a float32 second-level scale per 256 absmax values
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)


# ------------------------------------------------------------------------------------------- architectures
@dataclass(frozen=True)
class Architecture:
    """What the cost model needs of a model: its family (``decoder``, ``vit``, ``none``), parameter counts and
    shape. ``tokens`` / ``pixels``: the fixed token count (patches + class token) and input pixels of a ViT.
    ``source``: where the numbers come from (a config.json, a known architecture, the timm definition)."""

    family: str
    params: int = 0
    body_params: int = 0
    linear_params: int = 0
    layers: int = 0
    hidden: int = 0
    ffn: int = 0
    heads: int = 0
    attention_width: int = 0
    tokens: int | None = None
    source: str = ""
    pixels: int | None = None
    #: an encoder-decoder's decoder blocks (the fields above are then its encoder's)
    decoder_params: int = 0
    decoder_layers: int = 0
    #: parameters of the body that a token is not multiplied with (the routed experts it is not sent to; 0 for
    #: dense models): time counts ``body_params - inactive_params``, memory every parameter
    inactive_params: int = 0


def _blocks(module):
    """The transformer blocks of a model: its ``ModuleList`` holding the most parameters."""
    import torch

    lists = [m for m in module.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def _linear_params(modules) -> int:
    """Parameters of the linear layers (``nn.Linear``; GPT-2's ``Conv1D``) in ``modules``: what NF4 quantizes."""
    import torch

    return sum(p.numel() for block in modules for m in block.modules()
               if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D" for p in m.parameters(recurse=False))


def moe_parameters(blocks, config, hidden: int) -> tuple[int, int]:
    """``(inactive, width)`` of a mixture-of-experts body: the parameters of the routed experts a token is not sent
    to (each sparse block's fused experts, 3-D tensors with one row per expert, times ``1 - k / E`` with ``k =
    config.num_experts_per_tok``), and the widest MLP a token passes through in one block (its ``k`` experts, a
    shared expert and the router, in gated-MLP widths: active parameters / (3 x hidden)), the activation width the
    memory estimate needs instead of one expert's ``intermediate_size``. ``(0, 0)`` for dense models."""
    k = int(getattr(config, "num_experts_per_tok", None) or 0)
    inactive, width = 0.0, 0
    if not k:
        return 0, 0
    for block in (m for layer in blocks for m in layer.modules()):
        experts = [m for m in block.children() if any(p.dim() == 3 for p in m.parameters(recurse=False))]
        if not experts:
            continue
        n_experts = max(p.shape[0] for e in experts for p in e.parameters(recurse=False) if p.dim() == 3)
        unused = sum(p.numel() for e in experts for p in e.parameters()) * (1 - k / n_experts)
        inactive += unused
        width = max(width, round((sum(p.numel() for p in block.parameters()) - unused) / (3 * hidden)))
    return int(inactive), width


@lru_cache(maxsize=64)
def _hf_architecture_cached(config_json: str, kind: str, source: str) -> Architecture:
    import torch
    import transformers

    fields = json.loads(config_json)
    untied = fields.get("tie_word_embeddings") is False  # what the checkpoint's config.json declares
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    cls = getattr(transformers, AUTO_CLASSES.get(kind, "AutoModel"))
    with torch.device("meta"):
        model = cls.from_config(config)
    hidden, heads = int(config.hidden_size), int(config.num_attention_heads)
    params = sum(p.numel() for p in model.parameters())
    if getattr(config, "is_encoder_decoder", False):
        encoder, decoder = _blocks(model.get_encoder()), _blocks(model.get_decoder())
        if untied:  # T5 v1.1 / Flan-T5: transformers 5 builds every T5 head tied, but these checkpoints hold their own
            params += model.get_output_embeddings().weight.numel()
        width = heads * int(getattr(config, "d_kv", None) or hidden // heads)
        return Architecture("seq2seq", params, sum(p.numel() for p in encoder.parameters()),
                            _linear_params(encoder) + _linear_params(decoder), len(encoder), hidden,
                            int(getattr(config, "d_ff", None) or 4 * hidden), heads, width, None, source,
                            decoder_params=sum(p.numel() for p in decoder.parameters()), decoder_layers=len(decoder))
    blocks = _blocks(model)
    # multi-head latent attention's queries and keys are wider than its rotary head_dim (qk_head_dim)
    head_dim = int(getattr(config, "qk_head_dim", None) or getattr(config, "head_dim", None) or hidden // heads)
    ffn = int(getattr(config, "intermediate_size", None) or getattr(config, "ffn_dim", None)
              or getattr(config, "n_inner", None) or 4 * hidden)
    inactive, moe_width = moe_parameters(blocks, config, hidden)
    return Architecture("decoder", sum(p.numel() for p in model.parameters()),
                        sum(p.numel() for p in blocks.parameters()), _linear_params(blocks), len(blocks), hidden,
                        max(ffn, moe_width), heads, heads * head_dim, None, source, inactive_params=inactive)


def hf_architecture(config: dict, kind: str, source: str = "") -> Architecture:
    """The :class:`Architecture` of a Hugging Face model from its ``config.json`` fields and ``model.kind``: the
    library's own class instantiated on the meta device (no memory, no weights), so every family transformers
    knows is counted exactly (equals ``model.num_parameters()``, tested). The body is the model's largest
    ``ModuleList`` (its transformer blocks); an encoder-decoder's is its encoder's, its decoder's blocks are
    ``decoder_params`` / ``decoder_layers`` (family ``seq2seq``)."""
    return _hf_architecture_cached(json.dumps(config, sort_keys=True), kind, source)


def _vit_architecture(module, source: str) -> Architecture:
    import torch

    blocks = list(module.blocks)
    mlp_widths = [m.out_features for m in blocks[0].mlp.modules() if isinstance(m, torch.nn.Linear)]
    hidden = int(module.embed_dim)
    height, width = getattr(module.patch_embed, "img_size", None) or (224, 224)
    return Architecture("vit", sum(p.numel() for p in module.parameters()),
                        sum(p.numel() for b in blocks for p in b.parameters()), _linear_params(blocks), len(blocks),
                        hidden, int(max(mlp_widths, default=4 * hidden)), int(blocks[0].attn.num_heads), hidden,
                        int(module.patch_embed.num_patches + module.num_prefix_tokens), source, int(height * width))


@lru_cache(maxsize=64)
def _timm_architecture(name: str, options_json: str = "{}") -> Architecture:
    import timm
    import torch

    base = name.partition(".")[0]
    with torch.device("meta"):
        module = timm.create_model(base, pretrained=False, **json.loads(options_json))
    return _vit_architecture(module, f"timm definition of {base}")


@lru_cache(maxsize=16)
def _torchvision_architecture(source: str) -> Architecture:
    """A torchvision ViT as the timm ViT it is loaded as (:mod:`palrp_bench.models.torchvision_vit`)."""
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from ..models.torchvision_vit import weights_of

    builder, weights = weights_of(source)
    with torch.device("meta"):
        tv = builder(weights=None, num_classes=len(weights.meta["categories"]))
        module = VisionTransformer(img_size=tv.image_size, patch_size=tv.patch_size, embed_dim=tv.hidden_dim,
                                   depth=len(tv.encoder.layers), num_heads=tv.encoder.layers[0].num_heads,
                                   mlp_ratio=tv.mlp_dim / tv.hidden_dim, num_classes=tv.num_classes, qkv_bias=True)
    return _vit_architecture(module, f"torchvision definition of {source}")


def architecture_of(model, constants: "CostConstants | None" = None) -> Architecture | None:
    """The :class:`Architecture` of a model config without loading weights, or None when nothing describes it
    (a local checkpoint that is not here and no known ``model.base_model``)."""
    constants = constants or load_constants()
    loader = model.loader
    kind = getattr(model.kind, "value", model.kind)
    if loader == "selftest":
        return Architecture("none", source="no model")
    if loader == "timm":
        options = dict(getattr(model, "options", None) or {})
        return _timm_architecture(str(model.source), json.dumps(options, sort_keys=True))
    if loader == "torchvision":
        return _torchvision_architecture(str(model.source))
    if loader == "embedded_vit":
        import torch
        from timm.models.vision_transformer import VisionTransformer

        from ..data.synthetic_vision import tiny_vit_paths

        config = json.loads(tiny_vit_paths()[1].read_text())
        with torch.device("meta"):
            module = VisionTransformer(**config["timm_kwargs"])
        return _vit_architecture(module, "embedded tiny ViT")
    if loader == "embedded_text":
        from ..data.synthetic_text import ASSET_DIR

        path = ASSET_DIR / str(model.source) / "config.json"
        return hf_architecture(json.loads(path.read_text()), kind, f"embedded {model.source}")
    found = hf_config_json(model, constants.architectures)
    if found is None:
        return None
    if kind == "vit":  # a timm checkpoint in the hub's format (model=hf): its architecture and arguments
        return _timm_architecture(str(found[0]["architecture"]),
                                  json.dumps(found[0].get("model_args") or {}, sort_keys=True))
    return hf_architecture(found[0], kind, found[1])


# -------------------------------------------------------------------------------------------------- work
@dataclass(frozen=True)
class Work:
    """Per-sample work of a cell: ``explanations`` over ``explain_tokens`` tokens costing ``explain_forwards``
    forwards each, and ``forwards`` plain forwards over ``forward_tokens`` tokens (means)."""

    explanations: int
    explain_tokens: float
    forwards: float
    forward_tokens: float
    explain_forwards: float = 1.0
    #: the method's attributor (:data:`palrp_bench.methods.registry.PASSES`): ALTI's memory has its own formula
    attributor: str = "lrp"
    #: decoder tokens of every forward of an encoder-decoder (0 for the others)
    decoder_tokens: float = 0.0
    #: tokens of the task's longest sample where the plan measured them (0: unknown); peak memory is sized for a
    #: batch of those (:func:`peak_memory`), time for the mean
    longest_tokens: float = 0.0
    #: metric ``map_sensitivity``: a float64 copy of the model sits beside it and one of the explanations is its
    #: (priced like the others: on GPUs float64 is slower than this says)
    float64_copy: bool = False


def typical_tokens(task, constants: "CostConstants") -> float | None:
    """Mean real tokens per sample of a text task (shipped table by dataset, capped at ``max_length``)."""
    key = task.dataset
    if task.dataset == "synthetic_text":
        key = f"synthetic_text/{task.options.get('kind', 'cls')}"
    tokens = constants.tokens.get(key)
    if tokens is None:
        return None
    cap = task.options.get("max_length")
    return float(min(tokens, cap) if cap else tokens)


def _prompt_key(cell) -> tuple | None:
    """What :func:`measured_prompts` depends on, or None when the task reads no local file."""
    task = cell.task
    if task.path is None or not Path(str(task.path)).expanduser().exists():
        return None
    options = json.dumps(dict(task.options or {}), sort_keys=True, default=str)
    model = cell.model
    return (task.dataset, str(Path(str(task.path)).expanduser().resolve()), options, task.pool_size,
            str(getattr(model.loader, "value", model.loader)), str(model.source), str(getattr(model, "tokenizer", "")),
            str(getattr(model, "base_model", "")))


#: :func:`measured_prompts` per :func:`_prompt_key` (a plan prices every method of a cell on the same file)
_MEASURED: dict[tuple, tuple[float, float, float] | None] = {}


def _measured(cell) -> tuple[float, float, float] | None:
    from ..data.registry import load_dataset
    from ..errors import PalrpError
    from ..evaluation.tasks.seq2seq_qa import prompt_lengths
    from ..models.loading import local_tokenizer

    tokenizer = local_tokenizer(cell.model)
    if tokenizer is None or not getattr(tokenizer, "is_fast", False):
        return None
    try:
        pool = load_dataset(cell.task.dataset, path=cell.task.path, limit=cell.task.pool_size,
                            options=dict(cell.task.options or {}), tokenizer=tokenizer)
        lengths = prompt_lengths(tokenizer, pool)
    except (PalrpError, OSError, ValueError):
        return None  # the preflight names what is wrong with the file
    if not lengths:
        return None
    tokens = [t for t, _ in lengths]
    return sum(tokens) / len(tokens), sum(c for _, c in lengths) / len(lengths), float(max(tokens))


def measured_prompts(cell) -> tuple[float, float, float] | None:
    """``(mean encoder tokens, mean context tokens, longest encoder tokens)`` of a ``seq2seq_qa`` cell's samples,
    tokenised by the model's own tokenizer from the task's local file (the pool the run will draw:
    :func:`~palrp_bench.evaluation.tasks.seq2seq_qa.prompt_lengths`), or None when the file or the tokenizer is not
    on this machine (the shipped token table is used then). Cached per file, options and tokenizer."""
    key = _prompt_key(cell)
    if key is None:
        return None
    if key not in _MEASURED:
        _MEASURED[key] = _measured(cell)
    return _MEASURED[key]


def _padded_length(task) -> int | None:
    """Length every sample is padded to before the explanation (IMDB: max_length; synthetic sentiment: pad_to)."""
    if task.dataset == "imdb":
        from ..data.imdb import IMDB_MAX_LENGTH

        return int(task.options.get("max_length", IMDB_MAX_LENGTH))
    pad_to = task.options.get("pad_to")
    return int(pad_to) if pad_to else None


def explanation_forwards(cell, arch: Architecture, constants: "CostConstants", n_features: int) -> float:
    """Forward-equivalents of one explanation of the cell's method: ``F + B * (r - 1)`` for the method's
    ``(F forwards, B backwards)`` per sample (:meth:`palrp_bench.methods.registry.Method.passes` with the task's
    hyperparameters; LRP is one of each, so exactly ``r``; Integrated Gradients ``n_steps`` of each; AtMan one
    forward per suppressed token)."""
    from ..methods.registry import get_method

    method = get_method(cell.method)
    forwards, backwards = method.passes(method.params_for(cell.task), n_features)
    quant = getattr(cell.model.quantization, "value", cell.model.quantization)
    return forwards + backwards * (constants.explain_forwards(arch, quant) - 1.0)


def _attnlrp_forwards(n_features: float, steps) -> float:
    """Forwards of the AttnLRP-paper perturbation (:mod:`palrp_bench.evaluation.attnlrp_perturbation`): most- and
    least-relevant-first curves over ``min(N, steps) + 1`` steps each, sharing the empty and the full input."""
    s = n_features if steps is None else min(n_features, int(steps))
    return 2.0 * s


def sample_work(cell, arch: Architecture, constants: "CostConstants") -> Work | None:
    """The :class:`Work` of one sample of ``cell`` (None when the task's token count is unknown). Forwards by
    metric: ``nlp_perturbation`` :data:`NLP_FORWARDS` (next token :data:`NEXT_TOKEN_FORWARDS`),
    ``vision_perturbation`` :data:`VISION_FORWARDS` (and a second, target-class explanation),
    ``attnlrp_perturbation`` two curves over the features (tokens / pixels, at most ``perturbation_steps``),
    ``segmentation`` / ``positional_share`` / ``evidence`` none (the evidence metrics score the explanation alone;
    its selection forwards each candidate once, priced apart); ``map_sensitivity`` one more explanation, by the
    model's float64 copy (:attr:`Work.float64_copy`)."""
    work = _metric_work(cell, arch, constants)
    if work is not None and MAP_SENSITIVITY_METRIC in cell.metrics:
        work = replace(work, explanations=work.explanations + 1, float64_copy=True)
    return work


def _metric_work(cell, arch: Architecture, constants: "CostConstants") -> Work | None:
    """:func:`sample_work` of the metrics that evaluate the cell's own explanations."""
    from ..methods.registry import get_method

    kind, metrics = cell.task.kind, set(cell.metrics)
    steps = getattr(cell.task, "perturbation_steps", None)
    attributor = get_method(cell.method).attributor
    if kind == "evidence":
        real = typical_tokens(cell.task, constants)
        if real is None:
            return None
        return Work(1, real, 0.0, real, explanation_forwards(cell, arch, constants, round(real)), attributor)
    if kind in ("text_classification", "next_token"):
        real = typical_tokens(cell.task, constants)
        if real is None:
            return None
        padded = _padded_length(cell.task) if kind == "text_classification" else None
        forwards = 0.0
        if "nlp_perturbation" in metrics:
            forwards += NLP_FORWARDS if kind == "text_classification" else NEXT_TOKEN_FORWARDS
        if "attnlrp_perturbation" in metrics:
            forwards += _attnlrp_forwards(real, steps)
        explained = float(padded or real)
        return Work(1, explained, forwards, real, explanation_forwards(cell, arch, constants, round(explained)),
                    attributor)
    if kind in ("image_classification", "image_segmentation"):
        tokens = float(arch.tokens or 0)
        forwards = VISION_FORWARDS if "vision_perturbation" in metrics else 0.0
        if "attnlrp_perturbation" in metrics:
            size = cell.task.options.get("image_size")
            forwards += _attnlrp_forwards(int(size) ** 2 if size else (arch.pixels or 224 * 224), steps)
        patches = round(tokens) - 1 if tokens else 0
        return Work(2 if "vision_perturbation" in metrics else 1, tokens, forwards, tokens,
                    explanation_forwards(cell, arch, constants, patches), attributor)
    if kind == "seq2seq_qa":
        measured = measured_prompts(cell)
        if measured is not None:  # the task's own file, tokenised: mean for time, longest for memory
            real, context, longest = measured
        else:
            real = typical_tokens(cell.task, constants)
            if real is None:
                return None
            context, longest = float(constants.tokens.get(f"{cell.task.dataset}/context", real)), 0.0
        # the greedy answer (correctness) costs about one more forward
        forwards = 1.0 + (_attnlrp_forwards(context, steps) if "attnlrp_perturbation" in metrics else 0.0)
        return Work(1, real, forwards, real, explanation_forwards(cell, arch, constants, round(context)), attributor,
                    decoder_tokens=1.0, longest_tokens=longest)
    return Work(0, 0.0, 0, 0.0)


def _per_token(arch: Architecture, tokens: float) -> float:
    return arch.body_params - arch.inactive_params + 2.0 * tokens * arch.attention_width * arch.layers


def _forward_work(arch: Architecture, tokens: float, decoder_tokens: float = 0.0) -> float:
    """Parameter-tokens of one forward over ``tokens`` (encoder) tokens and ``decoder_tokens`` decoder tokens."""
    decoder = decoder_tokens * (arch.decoder_params + 2.0 * tokens * arch.attention_width * arch.decoder_layers)
    return tokens * _per_token(arch, tokens) + decoder


def work_units(arch: Architecture, work: Work) -> float:
    """Units (10^9 parameter-tokens) of one sample (module docstring)."""
    return (work.explanations * work.explain_forwards * _forward_work(arch, work.explain_tokens, work.decoder_tokens)
            + work.forwards * _forward_work(arch, work.forward_tokens, work.decoder_tokens)) / GIGA


def forward_units(arch: Architecture, tokens: float, decoder_tokens: float = 0.0) -> float:
    """Units of one plain forward over ``tokens`` tokens (a selection candidate)."""
    return _forward_work(arch, tokens, decoder_tokens) / GIGA


# --------------------------------------------------------------------------------------------- constants
@dataclass(frozen=True)
class Profile:
    """Speed constants of one profile on one device kind (module docstring): ``seconds_per_unit`` (None =
    uncalibrated), ``overhead_s`` per explanation, ``batch_overhead_s`` per batch, ``load_s_per_gparam``;
    ``batch_size``: the batch size they were measured at (``auto`` for the shipped GPU constants, None when not
    recorded); ``origin`` says where they come from."""

    seconds_per_unit: float | None
    overhead_s: float
    load_s_per_gparam: float
    origin: str
    batch_overhead_s: float = 0.0
    batch_size: int | str | None = None


@dataclass
class CostConstants:
    """The merged constants: shipped defaults, then the user's calibration file (``devices`` entries by device
    kind and profile; each profile dict carries its ``origin``). ``aliases``: other device kinds of the same GPU
    (``same_as``, with their own ``short_name`` and ``memory_bytes``)."""

    devices: dict[str, dict] = field(default_factory=dict)
    explain_cost: dict[str, float] = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    tokens: dict[str, float] = field(default_factory=dict)
    pool_sizes: dict[str, int] = field(default_factory=dict)
    architectures: dict[str, dict] = field(default_factory=dict)
    assumed_accuracy: float = 0.9
    user_file: Path | None = None
    aliases: dict[str, dict] = field(default_factory=dict)

    def profile(self, kind: str, key: str) -> Profile | None:
        """Constants of ``key`` on device ``kind``: a calibration or shipped entry of exactly this kind, else of the
        GPU it is an alias of, else (CPUs) the shipped CPU default; None = uncalibrated."""
        candidates = [kind]
        if kind in self.aliases:
            candidates.append(str(self.aliases[kind]["same_as"]))
        if kind.startswith("cpu"):
            candidates.append("cpu")
        for candidate in candidates:
            entry = self.devices.get(candidate)
            if not entry or key not in entry.get("profiles", {}):
                continue
            values = entry["profiles"][key]
            origin = values.get("origin") or entry.get("origin", "")
            if candidate == "cpu" and kind != "cpu":
                origin = f"shipped CPU default ({entry.get('measured_on', 'another CPU')})"
            elif candidate != kind:
                origin = f"constants of {candidate}: {origin}"
            return Profile(values.get("seconds_per_unit"), float(values.get("overhead_s", 0.0)),
                           float(values.get("load_s_per_gparam", 0.0)), origin,
                           float(values.get("batch_overhead_s", 0.0)), values.get("batch_size"))
        return None

    def explain_forwards(self, arch: Architecture, quantization: str) -> float:
        """``r``: the cost of one explanation in forwards over the same tokens."""
        return float(self.explain_cost.get(f"{arch.family}/{quantization}",
                                           self.explain_cost.get(f"{arch.family}/none", 3.0)))

    def device_entry(self, kind: str) -> dict:
        """What is known of a device kind besides its profiles (``short_name``, ``memory_bytes``): its alias
        entry over the entry of the GPU it names, else its own entry."""
        alias = self.aliases.get(kind)
        if alias is not None:
            return {**self.devices.get(str(alias["same_as"]), {}), **alias}
        return self.devices.get(kind, {})


def user_cost_path() -> Path:
    """``cost.json`` in the user's palrp-bench cache (:func:`palrp_bench.runner.user_cache.user_cache_dir`:
    ``$PALRP_CACHE_DIR``, else ``$XDG_CACHE_HOME/palrp-bench``, else ``~/.cache/palrp-bench``)."""
    return user_cache_dir() / "cost.json"


def _read_yaml(path: Path) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def _with_origin(profiles: dict, origin: str) -> dict:
    return {key: {**values, "origin": origin} for key, values in (profiles or {}).items()}


def load_constants(user_file: Path | None = None) -> CostConstants:
    """Shipped defaults, then the calibrations in ``user_file`` (default :func:`user_cost_path`) on top: a
    device kind the user calibrated replaces the shipped profiles it measured (the others keep their origin)."""
    shipped = _read_yaml(SHIPPED_CONSTANTS)
    user_file = user_cost_path() if user_file is None else user_file
    devices = {}
    for kind, entry in (shipped.get("devices") or {}).items():
        origin = f"shipped default (measured on {entry.get('measured_on', '?')})"
        devices[kind] = dict(entry, origin=origin, profiles=_with_origin(entry.get("profiles"), origin))
    if user_file.is_file():
        try:
            user = json.loads(user_file.read_text())
        except (OSError, ValueError):
            user = {}
        for kind, entry in (user.get("devices") or {}).items():
            origin = f"calibrated {entry.get('calibrated', '')} ({user_file})".replace("  ", " ")
            merged = dict(devices.get(kind, {}))
            merged["profiles"] = {**merged.get("profiles", {}), **_with_origin(entry.get("profiles"), origin)}
            merged["measured_on"] = entry.get("measured_on", merged.get("measured_on", ""))
            if entry.get("memory_bytes"):
                merged["memory_bytes"] = entry["memory_bytes"]
            merged["origin"] = origin
            devices[kind] = merged
    return CostConstants(devices=devices, explain_cost=dict(shipped.get("explain_cost") or {}),
                         memory=dict(shipped.get("memory") or {}), tokens=dict(shipped.get("tokens") or {}),
                         pool_sizes=dict(shipped.get("pool_sizes") or {}),
                         architectures=dict(shipped.get("architectures") or {}),
                         assumed_accuracy=float(shipped.get("assumed_accuracy", 0.9)), user_file=user_file,
                         aliases=dict(shipped.get("device_aliases") or {}))


def known_device_kinds(constants: CostConstants) -> dict[str, str | None]:
    """Every device kind with shipped or calibrated constants (its own or an alias's), with its short name."""
    kinds = {kind: entry.get("short_name") for kind, entry in constants.devices.items() if entry.get("profiles")}
    kinds.update({kind: alias.get("short_name") for kind, alias in constants.aliases.items()
                  if alias.get("same_as") in constants.devices})
    return kinds


def resolve_device_kind(name: str, constants: CostConstants, setting: str = "runner.plan_device") -> str:
    """The device kind ``name`` means: a short name (``h100``), a device kind with constants
    (``cuda/NVIDIA H100 80GB HBM3``, ``cpu``), or a GPU name without its ``cuda/`` prefix (letter case aside).
    Anything else is one :class:`~palrp_bench.errors.BadInputError` line listing the kinds with constants."""
    wanted = str(name).strip().lower()
    kinds = known_device_kinds(constants)
    for kind, short in kinds.items():
        names = {kind.lower(), (short or kind).lower(), kind.lower().removeprefix("cuda/")}
        if wanted in names:
            return kind
    listed = ", ".join(f"{short} ({kind})" if short else kind for kind, short in kinds.items())
    raise BadInputError(f"{setting}={name!r}: no cost constants for that device kind (known: {listed})",
                        f"use one of those, or run palrp-bench mode=calibrate on a machine with that device to add it")



def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cpu_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def device_kind(device: str) -> str:
    """The kind of a torch device string that constants are measured for: ``cuda/<GPU name>`` or
    ``cpu/<CPU model>/<threads>t`` (a CPU's speed depends on the threads torch uses)."""
    if str(device).startswith("cuda"):
        return accelerator_kind(device)
    return f"cpu/{_cpu_model()}/{_cpu_threads()}t"


def profile_key(model, arch: Architecture) -> str:
    """``family/dtype/quantization`` (``none`` for the self-test)."""
    if arch.family == "none":
        return "none"
    return (f"{arch.family}/{getattr(model.dtype, 'value', model.dtype)}/"
            f"{getattr(model.quantization, 'value', model.quantization)}")


# ------------------------------------------------------------------------------------------------ memory
#: attributors whose explanation memory is ALTI's (:func:`alti_memory`) rather than a backward's
ALTI_ATTRIBUTORS = ("alti", "alti_logit")
#: query rows of ALTI's transformed vectors are taken this many elements at a time (attributors/alti.py)
ALTI_CHUNK_ELEMENTS = 2 ** 24


def alti_memory(arch: Architecture, tokens: float, batch_size: int, width: int) -> float:
    """Bytes one ALTI / ALTI-Logit explanation holds above the weights (docs/baselines.md "ALTI and ALTI-Logit",
    memory), with ``B`` the batch, ``T`` the tokens, ``L`` blocks, ``H`` heads, ``D`` the width, ``b = width`` bytes
    per element of the model's dtype and ``a = max(b, 4)`` of the accumulation::

        B (L (H T^2 b + 9 T D b + 8 T^2) + H T D a) + 2 min(B T^2 D, 2^24) a  +  B H T^2 (b + 4)

    the recorded attention weights, what the trace keeps per block, the float64 ALTI matrices, one block's values
    through ``W_O`` per head, one chunk of transformed vectors with its copy, and the eager forward's scores and
    weights of one block."""
    b, a = float(width), float(max(width, 4))
    B, T, L, H, D = float(batch_size), float(tokens), float(arch.layers), float(arch.heads), float(arch.hidden)
    return (B * (L * (H * T * T * b + 9 * T * D * b + 8 * T * T) + H * T * D * a)
            + 2 * min(B * T * T * D, float(ALTI_CHUNK_ELEMENTS)) * a + B * H * T * T * (b + 4))


def explanation_memory(arch: Architecture, tokens: float, batch_size: int, width: int, mem: dict,
                       checkpoint: str = "none") -> float:
    """Bytes one batch of explanations keeps for its backward (docs/planning.md "Peak memory", docs/engine.md
    "Long contexts"), with ``B`` the batch, ``T`` the tokens, ``L`` layers, ``d`` the width, ``r`` the head size and
    ``w`` bytes per activation::

        none:    B T L ((a_h d + a_f ffn) w + a_s heads min(T, T_s) w)   every layer's activations (fitted)
        layers:  B T (L d + 4 L r + 2 d + a_h d) w + B c a_f ffn w     the layers' inputs, the RoPE sinks and their
                                                                      gradients, the embeddings and their gradient,
                                                                      one recomputed layer, one MLP chunk

    ``c = min(T, 4096 / B)`` tokens (:data:`palrp_bench.lrp.recompute.CHUNK_ROWS`). The ``none`` coefficients were
    fitted on explanations of up to ``T_s = explain_score_tokens`` (512) tokens; fused attention keeps no scores,
    so beyond that its score term stays at its ``T_s`` value and the formula grows linearly, as measured on GPUs
    (docs/planning.md "Peak memory"). The ``layers`` formula has no score term."""
    from ..lrp.recompute import chunk_tokens

    a_h, a_f = mem.get("explain_per_hidden", 12), mem.get("explain_per_ffn", 4)
    b, t, d = float(batch_size), float(tokens), float(arch.hidden)
    if checkpoint == "none":
        scores = min(t, float(mem.get("explain_score_tokens", 512)))
        per_token_layer = (a_h * d + a_f * arch.ffn + mem.get("explain_per_score", 2) * arch.heads * scores) * width
        return b * t * arch.layers * per_token_layer
    head = arch.attention_width / max(arch.heads, 1)
    kept = (arch.layers * d + 4 * arch.layers * head + 2 * d + a_h * d) * width
    chunk = min(t, float(chunk_tokens(int(batch_size))))
    return b * t * kept + b * chunk * a_f * arch.ffn * width


def recompute_forwards(cell, work: Work) -> float:
    """Forwards one explanation adds under ``runner.checkpoint=layers``: one per backward (each backward recomputes
    every layer once)."""
    from ..methods.registry import get_method

    method = get_method(cell.method)
    return float(method.passes(method.params_for(cell.task), round(work.explain_tokens))[1])


def peak_memory(model, arch: Architecture, work: Work, constants: CostConstants, device: str,
                batch_size: int, forward_batch_size: int, checkpoint: str = "none") -> float:
    """Estimated peak bytes of a job::

        runtime (CPU only) + weights + max(explanation, forward chunk)
        explanation   = explanation_memory(...)       (none: batch_size * T_e * L * ((a_h d + a_f ffn) w + ...))
        forward chunk = rows * T_f * ((f_h * d + f_f * ffn) * w + heads * T_f * w)

    ``w``: bytes of the activation dtype; the explanation keeps every layer's activations (and attention
    scores) for its backward, or under ``checkpoint="layers"`` each layer's input and one layer's activations
    (:func:`explanation_memory`), a perturbation forward chunk of ``rows = min(forward_batch_size, F * batch_size)``
    only one layer's; ALTI and ALTI-Logit (no backward through the model) hold :func:`alti_memory` instead. Weights:
    by dtype, NF4 layers at :data:`NF4_BYTES_PER_PARAM`. ``T_e`` and ``T_f`` are the work's mean tokens, or its
    longest sample's where measured (``Work.longest_tokens``: batches hold samples of similar length, so the
    longest ones meet in one batch). With :attr:`Work.float64_copy` (metric ``map_sensitivity``) the weights take
    8 bytes per parameter more and the explanation's activations 8 bytes per value (the float64 one is the
    larger)."""
    if arch.family == "none":
        return float(constants.memory.get("runtime_bytes", 0)) if not str(device).startswith("cuda") else 0.0
    import torch

    dtype = getattr(model.dtype, "value", model.dtype)
    quant = getattr(model.quantization, "value", model.quantization)
    width = getattr(torch, dtype).itemsize
    quantized = arch.linear_params if quant == "nf4" else 0
    weights = (arch.params - quantized) * width + quantized * NF4_BYTES_PER_PARAM
    mem = constants.memory
    explain = 0.0
    t_e, t_f = max(work.explain_tokens, work.longest_tokens), max(work.forward_tokens, work.longest_tokens)
    if work.explanations and work.attributor in ALTI_ATTRIBUTORS:
        explain = alti_memory(arch, t_e, batch_size, width)
    elif work.explanations:
        explain = explanation_memory(arch, t_e, batch_size, width, mem, checkpoint)
    forward = 0.0
    if work.forwards:
        rows = min(forward_batch_size, math.ceil(work.forwards * batch_size))
        per_token = ((mem.get("forward_per_hidden", 6) * arch.hidden + mem.get("forward_per_ffn", 3) * arch.ffn)
                     + arch.heads * t_f) * width
        forward = rows * t_f * per_token
    if work.float64_copy:
        weights += arch.params * 8
        explain = max(explain, explain * 8 / width)
    runtime = 0.0 if str(device).startswith("cuda") else float(mem.get("runtime_bytes", 0))
    return runtime + weights + max(explain, forward)


# ---------------------------------------------------------------------------------------------- estimate
@dataclass
class Estimate:
    """What one cell costs on a device. ``seconds`` (``n_samples`` samples in batches of ``batch_size``, without
    model load and selection), ``per_sample``, ``load_seconds``, ``select_per_candidate`` are None when
    uncalibrated or unknown (``note`` says why); ``peak_bytes`` is None only when the architecture is unknown."""

    n_samples: int
    seconds: float | None
    per_sample: float | None
    load_seconds: float | None
    select_per_candidate: float | None
    peak_bytes: float | None
    device_kind: str
    profile: str
    origin: str = ""
    note: str = ""
    work: Work | None = None
    units_per_sample: float | None = None
    batch_size: int = 1


def batch_seconds(profile: Profile, explanations: int, units: float, n_samples: int, batch_size: int) -> float:
    """Seconds of ``n_samples`` samples of ``units`` each in batches of ``batch_size`` (module docstring)::

        n * (o * max(E, 1) + s * units) + ceil(n / b) * a"""
    batches = math.ceil(n_samples / max(int(batch_size), 1))
    return (n_samples * (profile.overhead_s * max(explanations, 1) + profile.seconds_per_unit * units)
            + batches * profile.batch_overhead_s)


def _as_cell(cell_or_model, task=None, metrics=None, method: str = "pa_lrp"):
    if task is None:
        return cell_or_model
    from types import SimpleNamespace

    return SimpleNamespace(model=cell_or_model, task=task, method=method, metrics=tuple(metrics or task.metrics))


def estimate(cell_or_model, n_samples: int, device: str = "cpu", *, task=None, metrics=None,
             method: str = "pa_lrp", batch_size: int = 8, forward_batch_size: int = 64,
             constants: CostConstants | None = None, kind: str | None = None, checkpoint: str = "none") -> Estimate:
    """Time and peak memory of ``n_samples`` samples of a cell (a :class:`~palrp_bench.runner.plan.Cell`, or a
    model config with ``task=`` and optional ``metrics=`` / ``method=``) on ``device`` (``cpu``, ``cuda:0``;
    ``kind`` overrides the detected device kind) in batches of ``batch_size`` (time: one batch overhead per batch;
    memory: a full batch) with ``runner.checkpoint`` = ``checkpoint`` (``layers``: one forward more per backward,
    :func:`recompute_forwards`; memory :func:`explanation_memory`). See the module docstring for the formulas."""
    constants = constants or load_constants()
    cell = _as_cell(cell_or_model, task, metrics, method)
    kind = kind or device_kind(device)
    arch = architecture_of(cell.model, constants)
    if arch is None:
        return Estimate(n_samples, None, None, None, None, None, kind, "?", note=(
            f"architecture of {cell.model.name} unknown: its checkpoint is not here; set model.base_model=<hub id>"))
    key = profile_key(cell.model, arch)
    work = sample_work(cell, arch, constants)
    if work is not None and work.explanations and checkpoint != "none":
        work = replace(work, explain_forwards=work.explain_forwards + recompute_forwards(cell, work))
    peak = (peak_memory(cell.model, arch, work, constants, device, min(batch_size, max(n_samples, 1)),
                        forward_batch_size, checkpoint) if work is not None else None)
    profile = constants.profile(kind, key)
    base = Estimate(n_samples, None, None, None, None, peak, kind, key, work=work, batch_size=int(batch_size))
    if work is None:
        base.note = f"tokens per sample of task {cell.task.name} unknown (dataset {cell.task.dataset})"
        return base
    if arch.family == "none":
        delay = float(cell.task.options.get("delay_s", 0.0))
        overhead = profile.overhead_s if profile is not None else 0.0
        return replace(base, seconds=n_samples * (delay + overhead), per_sample=delay + overhead, load_seconds=0.0,
                       select_per_candidate=0.0, origin=profile.origin if profile else "", units_per_sample=0.0)
    units = work_units(arch, work)
    if profile is None or profile.seconds_per_unit is None:
        base.units_per_sample = units
        base.note = f"uncalibrated: no constants for {key} on {kind} (run mode=calibrate on that device)"
        return base
    seconds = batch_seconds(profile, work.explanations, units, n_samples, batch_size)
    # per sample: the run's mean (its last batch may be partial); with no samples, that of a full batch
    per_sample = (seconds / n_samples if n_samples
                  else batch_seconds(profile, work.explanations, units, batch_size, batch_size) / batch_size)
    return replace(base, seconds=seconds, per_sample=per_sample,
                   load_seconds=profile.load_s_per_gparam * arch.params / GIGA,
                   select_per_candidate=profile.seconds_per_unit * forward_units(arch, work.forward_tokens,
                                                                                 work.decoder_tokens),
                   origin=profile.origin, units_per_sample=units)


def format_bytes(n: float | None) -> str:
    """``12.3 GB`` (decimal gigabytes), ``?`` when unknown: how plans print memory."""
    return "?" if n is None else f"{n / 1e9:.1f} GB"
