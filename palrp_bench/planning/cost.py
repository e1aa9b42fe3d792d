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
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..attributors import attributor_spec
from ..errors import BadInputError
from ..models.architecture import Architecture, hf_architecture
from ..models.loading import loader_spec
from ..numerics import device_kind
from ..runner.user_cache import user_cache_dir

__all__ = ["Architecture", "Work", "Profile", "CostConstants", "Estimate", "SHIPPED_CONSTANTS", "user_cost_path",
           "load_constants", "architecture_of", "hf_architecture", "sample_work",
           "work_units", "peak_memory", "estimate", "batch_seconds", "profile_key",
           "known_device_kinds", "resolve_device_kind", "NF4_BYTES_PER_PARAM", "explanation_memory",
           "recompute_forwards"]

SHIPPED_CONSTANTS = Path(__file__).resolve().parents[1] / "assets" / "cost_defaults.yaml"
GIGA = 1e9
#: bytes per parameter of a 4-bit NF4 layer with double quantization: 4 bits + an 8-bit absmax per 64 weights
#: + a float32 second-level scale per 256 absmax values
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)


# ------------------------------------------------------------------------------------------- architectures
def architecture_of(model, constants: "CostConstants | None" = None) -> Architecture | None:
    """The :class:`~palrp_bench.models.architecture.Architecture` of a model config without loading weights (its
    loader's, :meth:`~palrp_bench.models.loading.LoaderSpec.architecture`, with the shipped table of known
    architectures), or None when nothing describes it (a local checkpoint that is not here and no known
    ``model.base_model``)."""
    constants = constants or load_constants()
    return loader_spec(model.loader, f" (model {model.name})").architecture(model, constants.architectures)


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
    #: the method's attributor (:class:`palrp_bench.attributors.AttributorSpec`): ALTI's memory has its own formula
    attributor: str = "lrp"
    #: decoder tokens of every forward of an encoder-decoder (0 for the others)
    decoder_tokens: float = 0.0
    #: seconds per sample spent outside the model (the self-test's ``delay_s``)
    wait_s: float = 0.0
    #: tokens of the task's longest sample where the plan measured them (0: unknown); peak memory is sized for a
    #: batch of those (:func:`peak_memory`), time for the mean
    longest_tokens: float = 0.0
    #: a procedure keeps a float64 copy of the model beside it (metric ``map_sensitivity``; its explanation is
    #: priced like the others: on GPUs float64 is slower than this says)
    float64_copy: bool = False


def explanation_forwards(cell, arch: Architecture, constants: "CostConstants", n_features: int) -> float:
    """Forward-equivalents of one explanation of the cell's method: ``F + B * (r - 1)`` for the method's
    ``(F forwards, B backwards)`` per sample (:func:`palrp_bench.attributors.method_passes` with the task's
    hyperparameters; LRP is one of each, so exactly ``r``; Integrated Gradients ``n_steps`` of each; AtMan one
    forward per suppressed token)."""
    from ..attributors import method_passes
    from ..methods.registry import get_method

    method = get_method(cell.method)
    forwards, backwards = method_passes(method, method.params_for(cell.task), n_features)
    quant = getattr(cell.model.quantization, "value", cell.model.quantization)
    return forwards + backwards * (constants.explain_forwards(arch, quant) - 1.0)


def sample_work(cell, arch: Architecture, constants: "CostConstants") -> Work | None:
    """The :class:`Work` of one sample of ``cell``: its task kind's sample (the adapter's
    :meth:`~palrp_bench.evaluation.tasks.base.TaskAdapter.sample_shape`; None when the task's token count is unknown),
    the explanations and plain forwards each of the cell's procedures adds (:mod:`palrp_bench.evaluation.procedures`:
    e.g. ``nlp_perturbation`` 20 rows, ``vision_perturbation`` 38 and a target-class explanation,
    ``attnlrp_perturbation`` two curves over the features, ``map_sensitivity`` one more explanation by the model's
    float64 copy: :attr:`Work.float64_copy`), and the method's cost per explanation
    (:func:`explanation_forwards`). An unregistered task kind is a one-line error."""
    from ..evaluation.procedures import procedure
    from ..evaluation.tasks import TASK_KINDS
    from ..methods.registry import get_method

    kind = cell.task.kind
    shape = TASK_KINDS.lookup(kind, f" (task {cell.task.name})").sample_shape(cell, arch)
    if shape is None:
        return None
    chosen = [procedure(name) for name in cell.metrics]
    forwards = shape.forwards + sum(p.forwards(kind, shape, cell.task) for p in chosen)
    explanations = shape.explanations + sum(p.explanations for p in chosen) if shape.explanations else 0
    explain = explanation_forwards(cell, arch, constants, shape.explain_features) if explanations else 1.0
    return Work(explanations, shape.explain_tokens, forwards, shape.forward_tokens, explain,
                get_method(cell.method).attributor, shape.decoder_tokens, shape.wait_s, shape.longest_tokens,
                any(p.float64_copy for p in chosen))


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
                         memory=dict(shipped.get("memory") or {}),
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



def profile_key(model, arch: Architecture) -> str:
    """``family/dtype/quantization`` (``none`` for the self-test)."""
    if arch.family == "none":
        return "none"
    return (f"{arch.family}/{getattr(model.dtype, 'value', model.dtype)}/"
            f"{getattr(model.quantization, 'value', model.quantization)}")


# ------------------------------------------------------------------------------------------------ memory
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
    from ..attributors import method_passes
    from ..methods.registry import get_method

    method = get_method(cell.method)
    return float(method_passes(method, method.params_for(cell.task), round(work.explain_tokens))[1])


def peak_memory(model, arch: Architecture, work: Work, constants: CostConstants, device: str,
                batch_size: int, forward_batch_size: int, checkpoint: str = "none") -> float:
    """Estimated peak bytes of a job::

        runtime (CPU only) + weights + max(explanation, forward chunk)
        explanation   = explanation_memory(...)       (none: batch_size * T_e * L * ((a_h d + a_f ffn) w + ...))
        forward chunk = rows * T_f * ((f_h * d + f_f * ffn) * w + heads * T_f * w)

    ``w``: bytes of the activation dtype; the explanation keeps every layer's activations (and attention
    scores) for its backward, or under ``checkpoint="layers"`` each layer's input and one layer's activations
    (:func:`explanation_memory`), a perturbation forward chunk of ``rows = min(forward_batch_size, F * batch_size)``
    only one layer's; an attributor with its own memory formula (ALTI and ALTI-Logit: no backward through the model,
    :func:`palrp_bench.attributors.alti.alti_memory`) holds that instead. Weights: by dtype, NF4 layers at
    :data:`NF4_BYTES_PER_PARAM`. ``T_e`` and ``T_f`` are the work's mean tokens, or its longest sample's where
    measured (``Work.longest_tokens``: batches hold samples of similar length, so the longest ones meet in one
    batch). With :attr:`Work.float64_copy` (metric ``map_sensitivity``) the weights take 8 bytes per parameter more
    and the explanation's activations 8 bytes per value (the float64 one is the larger)."""
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
    memory = attributor_spec(work.attributor).memory
    if work.explanations and memory is not None:
        explain = memory(arch, t_e, batch_size, width)
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
    kind = kind or device_kind(device, cpu_detail=True)
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
        delay = work.wait_s
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
