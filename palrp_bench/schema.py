"""Typed schemas of the Hydra configuration (structured configs registered in Hydra's ConfigStore).

Every group file under ``palrp_bench/configs/<group>/`` is validated against one dataclass here, so a typo in a
key (``runner.batchsize=4``) or a wrong type (``runner.batch_size=abc``) or a value outside an enum
(``protocol=offical``) stops ``palrp-bench`` at start-up with OmegaConf's message naming the key and, for enums,
the allowed values. The same dataclasses validate the group files the runner loads by name when an experiment
lists several models / tasks / methods (:mod:`palrp_bench.catalog`).

docs/architecture.md "Data flow of one run": config (Hydra) -> job list (model x task x method x shard) -> ...
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from .protocol import Protocol


class Mode(Enum):
    """What ``palrp-bench`` does: run the jobs (then merge), print the plan (samples, stored, estimated time and
    memory, what is missing; nothing is written), measure the cost constants of the selected models on this
    machine (``calibrate``: written to the user's cache, docs/planning.md), or build the report."""

    run = "run"
    plan = "plan"
    calibrate = "calibrate"
    report = "report"


class Aggregation(Enum):
    """docs/protocol.md section 1: the official token aggregation or the paper's Eq. 11."""

    official = "official"
    eq11 = "eq11"


class Embeddings(Enum):
    """What the token scores of ``attnlrp``, ``cp_lrp`` and ``grad_x_input`` cover on text models with learned
    absolute positions (GPT-2, OPT, BERT, RoBERTa): the full embedding (token + position) or the token embedding
    alone (docs/positional.md, "Full and partial embeddings"; no effect elsewhere)."""

    full = "full"
    partial = "partial"


class DType(Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float64 = "float64"


class Quantization(Enum):
    none = "none"
    nf4 = "nf4"


class ModelKind(Enum):
    """The head a model is explained with; ``auto``: read from the checkpoint's ``config.json`` (``model=hf``,
    :func:`palrp_bench.runner.model_identity.resolve_model`) before the cells are planned."""

    causal = "causal"
    classifier = "classifier"
    masked_lm = "masked_lm"
    seq2seq = "seq2seq"
    vlm = "vlm"
    vit = "vit"
    none = "none"
    auto = "auto"


#: what each model kind is, in words (messages; the model kinds a task kind evaluates are declared by its adapter,
#: ``model_kinds`` in :mod:`palrp_bench.evaluation.tasks`)
MODEL_KIND_WORDS = {"causal": "a causal language model", "classifier": "a text classifier",
                    "masked_lm": "a masked language model",
                    "seq2seq": "an encoder-decoder language model",
                    "vlm": "a vision-language model (images and text to text)", "vit": "an image classifier",
                    "none": "no model (the harness self-test)"}


class Selection(Enum):
    """Which dataset samples are evaluated (docs/protocol.md section 2).

    * ``all``: every sample of the pool (up to ``select_count`` if set).
    * ``correct_only``: only correctly predicted samples, the first ``select_count`` of them (MCQA).
    * ``until_correct``: every sample in pool order up to and including the ``select_count``-th correct
      prediction (IMDB: "stop after 1000 correct predictions, all processed samples count").
    """

    all = "all"
    correct_only = "correct_only"
    until_correct = "until_correct"


@dataclass
class ModelConfig:
    """``configs/model/<name>.yaml``; ``model=hf model.source=<folder or hub id>`` for your own checkpoint
    (``configs/model/hf.yaml``: name and kind read from the checkpoint)."""

    #: the cell's model name (run directory, tables); ``model=hf``: derived from model.source unless given here
    name: str = MISSING
    #: how the model is loaded (:data:`palrp_bench.models.loading.LOADERS`): ``hf`` (Hugging Face hub id or local
    #: folder, optional NF4), ``timm`` (timm name or local checkpoint), ``embedded_text`` / ``embedded_vit`` (the
    #: tiny models shipped with the package), ``random`` (random weights from the Hugging Face config fields in
    #: ``options``, e.g. ``tiny_t5_random``), ``selftest`` (no model: the harness self-test)
    loader: str = MISSING
    kind: ModelKind = ModelKind.none
    #: hub id, timm name, local folder / checkpoint, or the embedded model's kind
    source: str = ""
    #: tokenizer hub id or folder (text models). Unset: ``source`` when it is a hub id or a local folder holding
    #: tokenizer files, else ``base_model`` (:func:`palrp_bench.models.loading.tokenizer_source`)
    tokenizer: Optional[str] = None
    #: hub id of the model a local checkpoint was finetuned from: its tokenizer when ``source`` holds none, and its
    #: architecture for plans before the weights are here (``mode=plan``)
    base_model: Optional[str] = None
    #: local weights file for the architecture named by ``source`` (DeiT: an official facebookresearch .pth)
    checkpoint: Optional[str] = None
    dtype: DType = DType.float32
    quantization: Quantization = Quantization.none
    #: the model is too large for a CPU run in reasonable time; preflight refuses ``runner.devices=[auto]``
    #: without a GPU (an explicit ``runner.devices=[cpu]`` still runs it)
    needs_gpu: bool = False
    #: how the paper calls the model (recorded in cell.json and the manifest)
    paper_name: str = ""
    #: extra keyword arguments of the model constructor (``timm``: e.g. ``img_size``, ``embed_dim``, ``depth``,
    #: ``num_classes`` of a custom checkpoint; on the command line ``+model.options.img_size=64``; ``random``: the
    #: config fields, ``model_type`` first, and ``seed``)
    options: Dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskConfig:
    """``configs/task/<name>.yaml``."""

    name: str = MISSING
    #: the task adapter evaluating it (:data:`palrp_bench.evaluation.tasks.TASK_KINDS`): ``text_classification``
    #: (IMDB, Tables 1-2), ``next_token`` (ARC-Easy MCQA, Wikipedia, Table 3), ``image_classification`` (ImageNet
    #: perturbation, Table 4, Appendix F), ``image_segmentation`` (Table 5), ``evidence`` (sva, ra, qa:
    #: docs/evidence.md), ``selftest``
    kind: str = MISSING
    #: dataset of :data:`palrp_bench.data.registry.DATASETS` (``imdb``, ``arc``, ``wikipedia``, ``imagenet``,
    #: ``imagenet_seg``, ``synthetic_text``, ``synthetic_vision``, the evidence sets ``sva``, ``ra``, ``qa``,
    #: ``synthetic_sva|ra|qa``, ``needle``), or ``selftest``
    dataset: str = MISSING
    #: local data path (IMDB CSV, ImageNet folder, ``gtsegs_ijcv.mat``); None for hub datasets / embedded data
    path: Optional[str] = None
    #: size of the candidate pool in dataset order (IMDB: first 5000 test rows); None = whole dataset
    pool_size: Optional[int] = None
    selection: Selection = Selection.all
    select_count: Optional[int] = None
    #: the procedures run on every sample (``configs/metric/``; each applies to the kinds its registration names,
    #: :mod:`palrp_bench.evaluation.procedures`)
    metrics: List[str] = field(default_factory=list)
    #: the published task this one is compared with in reports (e.g. ``mcqa_noncausal`` -> ``mcqa``)
    paper_task: Optional[str] = None
    #: causal attention (the default, correct). ``false`` reproduces the official code's known defect for ARC /
    #: Wikipedia, whose attention was bidirectional (docs/protocol.md section 2; the ``*_noncausal`` tasks)
    causal: bool = True
    #: evidence tasks: explain ``logit(target) - logit(foil)`` (contrastive, the default) or the target's logit
    #: alone (docs/evidence.md "Contrastive or not"); other task kinds ignore it
    contrastive: bool = True
    #: extra keyword arguments of the dataset loader / the self-test computation
    options: Dict[str, Any] = field(default_factory=dict)
    #: hyperparameters of baseline methods on this task, by method name (overriding ``Method.params``; e.g. the
    #: AttnLRP paper's tuned SmoothGrad sigma / AtMan p per dataset, docs/baselines.md)
    method_params: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    #: metric ``attnlrp_perturbation``: most steps of a perturbation curve; null = one step per input feature
    #: (AttnLRP paper appendix B.2), a number coarsens long inputs (e.g. the 50176 pixels of an image)
    perturbation_steps: Optional[int] = None


@dataclass
class MethodConfig:
    """``configs/method/<name>.yaml``: a row of the paper's tables (:mod:`palrp_bench.methods.registry`)."""

    name: str = MISSING


@dataclass
class MetricConfig:
    """``configs/metric/<name>.yaml``: one evaluation a cell runs on every sample (its per-sample rows feed the
    table metrics of :mod:`palrp_bench.metrics.registry`); ``metric=<name>`` restricts a run to it. The task kinds it
    applies to, what it costs and what it measures are its procedure's registration
    (:mod:`palrp_bench.evaluation.procedures`)."""

    name: str = MISSING


@dataclass
class CellBlock:
    """A product block of an experiment: every model x task x method listed here is one cell."""

    models: List[str] = field(default_factory=list)
    tasks: List[str] = field(default_factory=list)
    methods: List[str] = field(default_factory=list)
    #: metrics of these cells; empty = each task's ``metrics``
    metrics: List[str] = field(default_factory=list)
    #: the models' dtype in these cells, overriding each model config's (e.g. the evidence paper's float64 on sva
    #: and ra); None = the model config's
    dtype: Optional[DType] = None


@dataclass
class ExperimentConfig:
    """``configs/experiment/<name>.yaml``: which cells a paper table needs."""

    name: str = MISSING
    description: str = ""
    cells: List[CellBlock] = field(default_factory=list)
    #: epsilon-rule stabilisers of every cell (``official`` | ``none``) when the command line sets none
    #: (``stabilizers=...`` wins); None = the protocol's default
    stabilizers: Optional[str] = None


@dataclass
class RunnerConfig:
    """How jobs are executed (docs/design.md section 6, "Sharding")."""

    #: ``[auto]`` (all visible CUDA devices, else the CPU), ``[cpu]``, ``[cuda]`` (all GPUs), ``[0, 1]`` or
    #: ``[cuda:0, cuda:1]``; one worker process per entry when there are several (``[cpu, cpu]`` works too)
    devices: List[str] = field(default_factory=lambda: ["auto"])
    #: number of shards per cell; None = one per worker
    n_shards: Optional[int] = None
    #: run only this shard index (SLURM array element); None = all shards
    shard: Optional[int] = None
    #: samples explained together: a positive int, or ``auto`` (the largest that fits the device, halved on
    #: out-of-memory and remembered; a fixed 8 on the CPU: :mod:`palrp_bench.runner.batching`)
    batch_size: Any = 8
    #: perturbed sequences / images per forward in the perturbation procedures (memory knob)
    forward_batch_size: int = 64
    #: processes that read, decode, resize and tokenise the samples ahead of the device: ``auto`` (from the cores: on
    #: a GPU min(8, cores - 1), on the CPU min(2, cores / 2)), 0 (in the job's process) or a number; never changes a
    #: result (palrp_bench/runner/loader.py)
    loader_workers: Any = "auto"
    #: ``none`` (explanations keep every layer's activations for the backward) or ``layers`` (each layer's input
    #: only; the backward recomputes one layer at a time: long sequences, same relevance, about one more forward of
    #: time; text models only; palrp_bench/lrp/recompute.py, docs/engine.md "Long contexts")
    checkpoint: str = "none"
    #: ``mode=plan`` only: price the run on this device kind from a machine without it: a short name (``h100``)
    #: or a device kind with shipped or calibrated constants (``cuda/NVIDIA H100 80GB HBM3``); one worker per GPU
    #: index in ``devices``, else one (docs/planning.md "Pricing a device this machine does not have")
    plan_device: Optional[str] = None
    #: cap on the samples of each cell (first N of the selected samples in dataset order); None = all
    max_samples: Optional[int] = None
    #: no progress bars (clusters); a log line every ``log_every`` samples instead
    quiet: bool = False
    log_every: int = 50
    #: save per-sample explanations (scores, semantic and positional parts) next to the shard's results
    cache_explanations: bool = True
    #: write ``<run_dir>/report.html`` (tables, curves, sample explorer; palrp_bench/report/html.py) after the run
    html: bool = True
    #: most MB of cached explanations that report.html embeds (the samples past it are listed without them)
    html_max_mb: float = 30.0
    #: explain every sample once more with a float64 copy of the model (on the same device: 8 bytes per parameter)
    #: and record how far its map lies from the run's (metric ``map_sensitivity``, per sample in results.csv, the
    #: share above 1e-3 in metrics.csv); added to every cell whose task kind and model take it (docs/evaluation.md
    #: "Maps that rounding decides")
    map_sensitivity: bool = False


@dataclass
class ReportConfig:
    """Intervals of ``metrics.csv`` (BCa bootstrap, :mod:`palrp_bench.metrics.table`) and of the report's paired
    comparisons (``mode=report``, ``palrp-bench-report``)."""

    confidence: float = 0.95
    n_boot: int = 1000
    #: sample ids whose cached explanations are drawn as heatmaps (empty = the first few of each cell)
    gallery_ids: List[str] = field(default_factory=list)
    #: where tables and plots are written; None = ``<run_dir>/report``
    out_dir: Optional[str] = None
    #: folder of published-number CSVs; None = the paper's tables shipped with the package (palrp_bench/paper)
    paper_dir: Optional[str] = None
    #: the needle grid's metric, ``<table metric>:<variant>`` (drawn beside the positional share's grid for results
    #: with ``length`` and ``depth`` columns; docs/evidence.md "Needle in a haystack")
    needle_metric: str = "rma:default"


@dataclass
class PalrpConfig:
    """The root config (``configs/config.yaml``)."""

    mode: Mode = Mode.run
    run_root: str = "runs"
    run_dir: str = MISSING
    protocol: Protocol = Protocol.official
    aggregation: Aggregation = Aggregation.official
    #: composite overriding every method's default rules (``attnlrp``, ``cp_lrp``, ``official_vit``, ...)
    rules: Optional[str] = None
    #: pixel-perturbation tie-break among equal map values (``topk`` | ``random``); None = the protocol's default
    #: (``official`` -> ``topk``, ``corrected`` -> ``random``; palrp_bench/metrics/perturbation.py)
    tie_break: Optional[str] = None
    #: epsilon-rule stabilisers of the LRP rules (``official`` | ``none``); None = the protocol's default
    #: (``official`` -> ``official`` on the families the official code ran, LLaMA and DeiT, ``none`` on the others;
    #: ``corrected`` -> ``none``; palrp_bench/lrp/stabilizers.py)
    stabilizers: Optional[str] = None
    #: float32 arithmetic on GPUs (``conv`` | ``off``): ``conv`` = cuDNN convolutions in TF32, matmuls in float32
    #: (PyTorch's defaults, as the official code ran), ``off`` = both IEEE float32; None = the protocol's default
    #: (``official`` -> ``conv``, ``corrected`` -> ``off``; palrp_bench/numerics.py). No effect on CPUs.
    tf32: Optional[str] = None
    #: ``full`` | ``partial``: on text models with learned absolute positions, whether ``attnlrp``, ``cp_lrp`` and
    #: ``grad_x_input`` score the full embedding (token + position, as "A Close Look at Decomposition-based
    #: Attributions for Transformer Language Models" does by default) or the token embedding alone (every run before
    #: the switch existed); no effect on other models and methods (palrp_bench/methods/token_aggregation.py)
    embeddings: Embeddings = Embeddings.full
    seed: int = 0
    #: a single cell or a filter: set by ``model=...``, ``task=...``, ``method=...``, ``metric=...``
    model: Optional[ModelConfig] = None
    task: Optional[TaskConfig] = None
    method: Optional[MethodConfig] = None
    metric: Optional[MetricConfig] = None
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    report: ReportConfig = field(default_factory=ReportConfig)


GROUP_SCHEMAS: dict[str, type] = {
    "model": ModelConfig,
    "task": TaskConfig,
    "method": MethodConfig,
    "metric": MetricConfig,
    "experiment": ExperimentConfig,
}


def register_schemas() -> None:
    """Register the root schema in Hydra's ConfigStore (idempotent).

    ``configs/config.yaml`` lists ``palrp_schema`` first in its defaults, so every group file merged into
    ``model`` / ``task`` / ... is validated against the typed field of :class:`PalrpConfig` it lands in.
    """
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="palrp_schema", node=PalrpConfig)
