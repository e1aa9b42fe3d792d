"""What finetuning an IMDB classifier costs: hours, peak memory, whether it fits a device and the cheapest setting
that does (docs/planning.md "Finetuning the classifiers"; the recipe: docs/protocol.md section 2,
``palrp-bench-finetune``).

Table 1 needs classifiers nobody released; training them is the largest GPU cost of the paper. ``mode=plan`` prices
every classifier whose finetuned weights are missing (:func:`price_missing_classifiers`), and the finetuning script
refuses a run that cannot fit before it loads anything (:func:`estimate_training`, :func:`cheapest_fit`).

Work, in the cost model's units (10^9 parameter-tokens, :func:`palrp_bench.planning.cost.forward_units`)::

    units = epochs * (train_rows * f + selection_rows) * U(T)       U(T) = T * P(T) / 10^9,  T = max_length
    f     = 1 + backward_forwards (+ recompute_forwards with gradient checkpointing)     full finetuning
          = 1                                                                             head only (4-bit row)
    seconds = s * units   (on N processes: wall-clock seconds / N, device-seconds unchanged)

Every batch is padded to its longest review, and 32 reviews truncated at 512 tokens nearly always include one
that reaches the cap, so each row counts ``T = max_length`` tokens. Peak memory of one process (``w``: bytes of the
weights' dtype; full finetuning keeps float32 master weights, as the script trains)::

    weights + gradients + AdamW states = (P + 3 P_t) * w         P_t: trainable (all but the embeddings)
    activations   = b * T * L * (a_h d + a_f ffn) * w                                  without checkpointing
                  = b * T * (L * a_c d + a_h d + a_f ffn) * w                          with it
    FSDP over N:    (P + 3 P_t) * w / N  +  u * (P_body / L) * w,  b = ceil(batch / N)
    head only:      NF4 weights + one layer's activations (bfloat16), the head's gradient and states

Constants: ``palrp_bench/assets/training_defaults.yaml`` (measured on an H100; other kinds take the cost model's
forward constant of the same dtype on that kind).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from ..models.architecture import Architecture, hf_architecture
from ..models.loading import hf_config_json, loader_spec
from .cost import NF4_BYTES_PER_PARAM, CostConstants, architecture_of, format_bytes, forward_units, load_constants

__all__ = ["Recipe", "OFFICIAL_RECIPE", "TrainingConstants", "SHIPPED_TRAINING_CONSTANTS", "load_training_constants",
           "Setting", "Memory", "TrainingEstimate", "ClassifierTraining", "classifier_architecture",
           "trainable_params", "training_memory", "training_units", "estimate_training", "settings_to_try",
           "cheapest_fit", "verdict", "needs_training", "training_hint", "price_missing_classifiers", "COMMAND",
           "MODULE"]

SHIPPED_TRAINING_CONSTANTS = Path(__file__).resolve().parents[1] / "assets" / "training_defaults.yaml"
#: the command that trains a classifier (named in plans and fixes; :mod:`palrp_bench.finetune`), and its module
#: (``accelerate launch -m`` runs it on several GPUs)
COMMAND = "palrp-bench-finetune"
MODULE = "palrp_bench.finetune"


@dataclass(frozen=True)
class Recipe:
    """The official finetuning hyper-parameters (docs/protocol.md section 2; ``palrp-bench-finetune``).
    ``val_rows``: the held-out selection rows the script evaluates after every epoch by default."""

    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.0
    batch_size: int = 32
    warmup_epochs: int = 5
    schedule_epochs: int = 200
    grad_clip: float = 1.0
    max_length: int = 512
    train_rows: int = 5000
    epochs: int = 10
    val_rows: int = 1000


OFFICIAL_RECIPE = Recipe()


# --------------------------------------------------------------------------------------------- constants
@dataclass(frozen=True)
class TrainingConstants:
    """The shipped constants (module docstring; each one's measurement: docs/planning.md)."""

    backward_forwards: float
    recompute_forwards: float
    per_hidden: float
    per_ffn: float
    checkpoint_per_hidden: float
    fsdp_unsharded_blocks: float
    max_gpus: int
    devices: dict = field(default_factory=dict)

    def device(self, kind: str) -> tuple[str, dict] | None:
        """The entry whose ``match`` the device kind contains (case-insensitive), else None."""
        for name, entry in self.devices.items():
            if str(entry.get("match", name)).lower() in kind.lower():
                return name, entry
        return None


@lru_cache(maxsize=4)
def load_training_constants(path: Path = SHIPPED_TRAINING_CONSTANTS) -> TrainingConstants:
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    acts = data["activations"]
    return TrainingConstants(float(data["backward_forwards"]), float(data["recompute_forwards"]),
                             float(acts["per_hidden"]), float(acts["per_ffn"]), float(acts["checkpoint_per_hidden"]),
                             float(data["fsdp_unsharded_blocks"]), int(data["max_gpus"]), dict(data["devices"]))


# ------------------------------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Setting:
    """How a run is laid out: gradient checkpointing on or off, and the processes (one GPU each) FSDP shards the
    weights, gradients and optimizer states over (1 = no sharding)."""

    gradient_checkpointing: bool = False
    processes: int = 1

    def describe(self) -> str:
        """``--gradient-checkpointing``, ``2 GPUs with FSDP``, ``2 GPUs with FSDP and --gradient-checkpointing``."""
        gpus = f"{self.processes} GPUs with FSDP" if self.processes > 1 else ""
        flag = "--gradient-checkpointing" if self.gradient_checkpointing else ""
        return " and ".join(part for part in (gpus, flag) if part) or "as is"

    def command(self, arguments: str = "...") -> str:
        """The command line of this setting."""
        launch = (f"accelerate launch --num_processes {self.processes} -m {MODULE}" if self.processes > 1
                  else COMMAND)
        flag = " --gradient-checkpointing" if self.gradient_checkpointing else ""
        return f"{launch} {arguments}{flag}"


@dataclass(frozen=True)
class Memory:
    """Peak bytes of one process, by part (module docstring)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    unsharded: float = 0.0
    runtime: float = 0.0

    @property
    def states(self) -> float:
        """Weights, gradients and optimizer states (what FSDP shards)."""
        return self.weights + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return self.states + self.activations + self.unsharded + self.runtime


@dataclass(frozen=True)
class TrainingEstimate:
    """One setting of one training run on one device kind. ``seconds``: wall-clock (None when the kind has no
    constant for this regime); ``device_memory``: bytes of one device (None = unknown)."""

    setting: Setting
    head_only: bool
    dtype: str
    memory: Memory
    units: float
    seconds: float | None
    device_kind: str
    device_memory: float | None
    origin: str = ""

    @property
    def device_seconds(self) -> float | None:
        return None if self.seconds is None else self.seconds * self.setting.processes

    @property
    def fits(self) -> bool | None:
        return None if self.device_memory is None else self.memory.total <= self.device_memory


def _gpu(kind: str) -> bool:
    return not kind.lower().startswith("cpu")


# -------------------------------------------------------------------------------------------- architecture
def classifier_architecture(name_or_path: str, constants: CostConstants | None = None) -> Architecture | None:
    """The :class:`~palrp_bench.models.architecture.Architecture` of the 2-label classifier built from a base
    checkpoint (a local folder's ``config.json``, the hub cache's, or the shipped table of known architectures),
    without loading weights; None when nothing describes it."""
    constants = constants or load_constants()
    found = hf_config_json(SimpleNamespace(source=str(name_or_path)), constants.architectures)
    return None if found is None else hf_architecture(found[0], "classifier", found[1])


def trainable_params(arch: Architecture, head_only: bool) -> int:
    """Parameters the recipe trains: the 2-label head (``head_only``), or everything but the embeddings (the
    parameters outside the blocks less the final norm and the head)."""
    head = 2 * arch.hidden
    if head_only:
        return head
    embeddings = arch.params - arch.body_params - arch.hidden - head
    return arch.params - max(embeddings, 0)


def _dtype_bytes(dtype: str) -> int:
    return {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]


def training_memory(arch: Architecture, *, head_only: bool = False, dtype: str = "float32",
                    setting: Setting = Setting(), recipe: Recipe = OFFICIAL_RECIPE,
                    constants: TrainingConstants | None = None, runtime_bytes: float = 0.0) -> Memory:
    """Peak bytes of one process (module docstring)."""
    constants = constants or load_training_constants()
    tokens = recipe.max_length
    per_layer = constants.per_hidden * arch.hidden + constants.per_ffn * arch.ffn
    if head_only:  # NF4 linear layers, the rest (embeddings, norms, head) in bfloat16; no graph upstream of the head
        weights = arch.linear_params * NF4_BYTES_PER_PARAM + (arch.params - arch.linear_params) * 2
        head = trainable_params(arch, True) * 2
        return Memory(weights, head, 2 * head, recipe.batch_size * tokens * per_layer * 2, runtime=runtime_bytes)
    width = _dtype_bytes(dtype)
    n = setting.processes
    trainable = trainable_params(arch, False)
    rows = math.ceil(recipe.batch_size / n)
    if setting.gradient_checkpointing:
        activations = rows * tokens * (arch.layers * constants.checkpoint_per_hidden * arch.hidden + per_layer) * width
    else:
        activations = rows * tokens * arch.layers * per_layer * width
    unsharded = constants.fsdp_unsharded_blocks * arch.body_params / max(arch.layers, 1) * width if n > 1 else 0.0
    return Memory(arch.params * width / n, trainable * width / n, 2 * trainable * width / n, activations, unsharded,
                  runtime_bytes)


def training_units(arch: Architecture, *, head_only: bool = False, gradient_checkpointing: bool = False,
                   recipe: Recipe = OFFICIAL_RECIPE, constants: TrainingConstants | None = None) -> float:
    """Units of the whole run: every epoch's training rows and selection rows (module docstring)."""
    constants = constants or load_training_constants()
    per_row = 1.0
    if not head_only:
        per_row += constants.backward_forwards + (constants.recompute_forwards if gradient_checkpointing else 0.0)
    return recipe.epochs * (recipe.train_rows * per_row + recipe.val_rows) * forward_units(arch, recipe.max_length)


def _seconds_per_unit(kind: str, head_only: bool, dtype: str, constants: TrainingConstants,
                      cost_constants: CostConstants) -> tuple[float | None, str]:
    """``s`` for the regime on ``kind`` and where it comes from. Full finetuning: the measured training constant of
    the kind, else the cost model's forward constant for the dtype. Head only (forwards through a frozen NF4
    backbone): the cost model's NF4 constant of the kind first (a calibration of the GPU at hand measures exactly
    that), else the shipped training one."""
    regime = "head/nf4" if head_only else f"full/{dtype}"
    entry = constants.device(kind)
    table = None if entry is None else entry[1].get("seconds_per_unit", {}).get(regime)
    trained = (None if table is None else
               (float(table), f"shipped training constant ({entry[0]}, {regime}; docs/planning.md)"))
    profile = cost_constants.profile(kind, "decoder/bfloat16/nf4" if head_only else f"decoder/{dtype}/none")
    forward = (None if profile is None or profile.seconds_per_unit is None
               else (float(profile.seconds_per_unit), f"forward constant of the cost model ({profile.origin})"))
    for found in ((forward, trained) if head_only else (trained, forward)):
        if found is not None:
            return found
    return None, f"no constant for {regime} training on {kind}"


def estimate_training(arch: Architecture, *, kind: str, head_only: bool = False, dtype: str = "float32",
                      setting: Setting = Setting(), device_memory: float | None = None,
                      recipe: Recipe = OFFICIAL_RECIPE, constants: TrainingConstants | None = None,
                      cost_constants: CostConstants | None = None) -> TrainingEstimate:
    """Hours and peak memory of one run of ``recipe`` on ``setting`` on device kind ``kind`` (``cpu/...``,
    ``cuda/<GPU name>``, or a planned kind's name). ``device_memory``: bytes of one device; None takes the kind's
    shipped figure, if any. See the module docstring for the formulas."""
    constants = constants or load_training_constants()
    cost_constants = cost_constants or load_constants()
    if head_only:
        dtype, setting = "bfloat16", Setting()
    entry = constants.device(kind)
    if device_memory is None and entry is not None and entry[1].get("memory_bytes") is not None:
        device_memory = float(entry[1]["memory_bytes"])
    runtime = 0.0 if _gpu(kind) else float(cost_constants.memory.get("runtime_bytes", 0.0))
    memory = training_memory(arch, head_only=head_only, dtype=dtype, setting=setting, recipe=recipe,
                             constants=constants, runtime_bytes=runtime)
    units = training_units(arch, head_only=head_only, gradient_checkpointing=setting.gradient_checkpointing,
                           recipe=recipe, constants=constants)
    per_unit, origin = _seconds_per_unit(kind, head_only, dtype, constants, cost_constants)
    seconds = None if per_unit is None else per_unit * units / setting.processes
    return TrainingEstimate(setting, head_only, dtype, memory, units, seconds, kind, device_memory, origin)


def settings_to_try(kind: str, head_only: bool, constants: TrainingConstants | None = None) -> list[Setting]:
    """Candidate settings, cheapest first: fewest GPUs (a machine with fewer is easier to get, and sharding is not
    free), then without gradient checkpointing (16 % faster). A CPU trains in one process; the 4-bit row has
    nothing to shard or checkpoint."""
    constants = constants or load_training_constants()
    if head_only:
        return [Setting()]
    counts = [1]
    while _gpu(kind) and counts[-1] * 2 <= constants.max_gpus:
        counts.append(counts[-1] * 2)
    return [Setting(checkpointing, n) for n in counts for checkpointing in (False, True)]


def cheapest_fit(arch: Architecture, *, kind: str, head_only: bool = False, dtype: str = "float32",
                 device_memory: float | None = None, recipe: Recipe = OFFICIAL_RECIPE,
                 constants: TrainingConstants | None = None,
                 cost_constants: CostConstants | None = None) -> TrainingEstimate | None:
    """The first of :func:`settings_to_try` whose peak fits one device of ``kind``; None when none fits or the
    device's memory is unknown."""
    for setting in settings_to_try(kind, head_only, constants):
        found = estimate_training(arch, kind=kind, head_only=head_only, dtype=dtype, setting=setting,
                                  device_memory=device_memory, recipe=recipe, constants=constants,
                                  cost_constants=cost_constants)
        if found.fits:
            return found
    return None


def verdict(plain: TrainingEstimate, best: TrainingEstimate | None) -> str:
    """What fits, in a few words: ``fits``, ``fits with --gradient-checkpointing``, ``needs 2 GPUs with FSDP and
    --gradient-checkpointing``, ``does not fit ...``."""
    if plain.fits is None:
        return f"memory of {plain.device_kind} unknown"
    if best is None:
        most = (f"on {load_training_constants().max_gpus} GPUs with FSDP and --gradient-checkpointing"
                if _gpu(plain.device_kind) and not plain.head_only else
                "with --gradient-checkpointing" if not plain.head_only else "")
        return f"does not fit {format_bytes(plain.device_memory)}" + (f" even {most}" if most else "")
    if best.setting == plain.setting:
        return "fits"
    if best.setting.processes == 1:
        return f"fits with {best.setting.describe()}"
    return f"needs {best.setting.describe()}"


# ---------------------------------------------------------------------------------------------------- plans
def needs_training(model) -> bool:
    """A classifier config whose loader finds its local checkpoint folder without a saved model
    (:attr:`~palrp_bench.models.loading.LoaderSpec.missing_weights`): its finetuned weights are missing and
    ``palrp-bench-finetune`` trains them."""
    kind = getattr(model.kind, "value", model.kind)
    return kind == "classifier" and loader_spec(model.loader).missing_weights(model) is not None


def training_hint(model) -> str:
    """What the preflight adds to the fix of a classifier's missing weights: the command that trains them from its
    ``base_model`` (empty for the other kinds)."""
    if getattr(model.kind, "value", model.kind) != "classifier":
        return ""
    quantized = " --quantized" if getattr(model.quantization, "value", model.quantization) == "nf4" else ""
    return (f" (train one: {COMMAND} --model {getattr(model, 'base_model', None) or '<base_model>'}{quantized} "
            "--output-dir <dir>; use <dir>/best)")


@dataclass(frozen=True)
class ClassifierTraining:
    """The training a plan prices for one missing classifier: the recipe as is (``plain``) and the cheapest setting
    that fits (``best``); ``note`` says why nothing is estimated (architecture unknown)."""

    model: str
    base_model: str | None
    head_only: bool
    plain: TrainingEstimate | None
    best: TrainingEstimate | None
    note: str = ""

    @property
    def estimate(self) -> TrainingEstimate | None:
        """What the plan counts: the cheapest setting that fits, else the recipe as is."""
        return self.best or self.plain

    @property
    def verdict(self) -> str:
        return self.note if self.plain is None else verdict(self.plain, self.best)


def price_missing_classifiers(cells, kind: str, device_memory: float | None,
                              cost_constants: CostConstants | None = None, recipe: Recipe = OFFICIAL_RECIPE,
                              constants: TrainingConstants | None = None) -> list[ClassifierTraining]:
    """One :class:`ClassifierTraining` per distinct model of ``cells`` whose finetuned weights are missing
    (:func:`needs_training`), trained from its ``base_model`` with the official recipe on device kind ``kind``
    (``device_memory``: bytes of one device, None = the kind's shipped figure). 4-bit configs
    (``quantization: nf4``) train the head only."""
    cost_constants = cost_constants or load_constants()
    found: dict[str, ClassifierTraining] = {}
    for cell in cells:
        model = cell.model
        if model.name in found or not needs_training(model):
            continue
        head_only = getattr(model.quantization, "value", model.quantization) == "nf4"
        arch = architecture_of(model, cost_constants)
        base = getattr(model, "base_model", None)
        if arch is None:
            found[model.name] = ClassifierTraining(model.name, base, head_only, None, None,
                                                   "architecture unknown: set model.base_model=<hub id>")
            continue
        common = dict(kind=kind, head_only=head_only, device_memory=device_memory, recipe=recipe,
                      constants=constants, cost_constants=cost_constants)
        plain = estimate_training(arch, **common)
        found[model.name] = ClassifierTraining(model.name, base, head_only, plain, cheapest_fit(arch, **common))
    return list(found.values())
