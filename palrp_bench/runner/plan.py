"""From the config to the job list (docs/architecture.md "Data flow of one run": config -> model x task x method x
shard).

A *cell* is one (model, task, method) with the metrics it evaluates and the settings that change its numbers. A *job* is one shard of a cell. Cells come from the experiment (``experiment=table1``); ``model=``,
``task=``, ``method=`` and ``metric=`` on the command line either name a single cell (all of model, task and
method given) or filter the experiment's cells.

An experiment may set what its paper ran with: a block's ``dtype`` replaces its models' dtype in its cells (also
for a single cell of the experiment named on the command line, unless the command line sets ``model.dtype``), and
the experiment's ``stabilizers`` apply when the command line sets none (``evidence_table1``: float64 on sva and ra, exact rules; docs/evidence.md).

``model=hf`` is resolved from its checkpoint, and a model that is not the paper's checkpoint of the shipped config it
borrows runs in float32 unless ``model.dtype`` is on the command line (:mod:`.model_identity`).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, replace
from enum import Enum
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .. import catalog
from ..errors import BadInputError
from ..lrp.recompute import check_checkpoint
from ..lrp.stabilizers import check_stabilizers, default_stabilizers
from ..numerics import resolve_tf32
from ..rundir import MAP_SENSITIVITY_METRIC, cell_directory
from ..schema import DType, ModelConfig, TaskConfig
from .batching import AUTO, check_batch_size
from .loader import check_loader_workers
from .model_identity import PaperIdentity, paper_identity, resolve_model
from .sharding import check_shard
from .store import store_name

log = logging.getLogger("palrp_bench.runner")


def _plain(value):
    """Dataclass / enum / OmegaConf values as plain JSON-able data (enums by value)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, DictConfig):
        return _plain(OmegaConf.to_container(value, resolve=True, enum_to_str=True))
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass
class Cell:
    """One (model, task, method) cell of a table and everything that determines its per-sample numbers."""

    model: ModelConfig
    task: TaskConfig
    method: str
    metrics: tuple[str, ...]
    protocol: str
    aggregation: str
    rules: str | None
    seed: int
    #: the pixel-perturbation tie-break, resolved (``topk`` / ``random``); None for tasks without pixel perturbation
    tie_break: str | None = None
    #: the epsilon-rule stabilisers asked for (``official`` / ``none``); None = the protocol's default
    stabilizers: str | None = None
    #: float32 arithmetic on GPUs, resolved (``conv`` / ``off``; :mod:`palrp_bench.numerics`)
    tf32: str = "conv"
    #: the run's ``embeddings`` switch as asked (``full`` / ``partial``); where it applies: :attr:`embeddings_setting`
    embeddings: str = "full"
    #: whether the model is the paper's checkpoint of its shipped config (None: no shipped config has its name);
    #: recorded in ``cell.json``, read where published numbers are attached (:mod:`.model_identity`)
    identity: PaperIdentity | None = None

    @property
    def stabilizer_choice(self) -> str:
        """The stabilisers the cell asks for, with the protocol's default filled in (``official`` / ``none``): the
        cell's recorded setting (``cell.json``, its fingerprint). It is a request: which set the explanations use
        also depends on the model's family (``official`` under ``protocol=official`` means the official set only
        for the families the official code ran, none elsewhere; palrp_bench/lrp/stabilizers.py), known once the
        model is loaded. That name is what each sample records (``results.csv``'s ``stabilizers``) and the job's
        status file (``stabilizers``); a job refuses to add samples to a cell whose stored samples used another
        (runner/execute.py)."""
        return default_stabilizers(self.stabilizers, self.protocol)

    @property
    def embeddings_setting(self) -> str | None:
        """The ``embeddings`` switch where it changes this cell's numbers, else None: a text model whose twin adds a
        learned absolute position embedding (GPT-2, OPT, BERT, RoBERTa; read from the model's ``config.json``
        before it loads, :func:`palrp_bench.models.loading.positional_kind_of_config`) and a method that scores the
        semantic part alone (``attnlrp``, ``cp_lrp``, ``grad_x_input``;
        :func:`palrp_bench.methods.token_aggregation.embeddings_switch_applies`). The cell's ``embeddings`` column
        (empty where None); a job checks it against the loaded model (runner/execute.py)."""
        from ..methods.registry import get_method
        from ..methods.token_aggregation import embeddings_switch_applies
        from ..models.loading import positional_kind_of_config

        method, modality = get_method(self.method), MODEL_MODALITY.get(self.model.kind.value)
        if modality != "tokens" or not method.reads_embeddings_switch:
            return None  # decided without reading the model's config
        applies = embeddings_switch_applies(method, positional_kind_of_config(self.model), modality)
        return self.embeddings if applies else None

    @property
    def key(self) -> str:
        return f"{self.model.name}/{self.task.name}/{self.method}"

    def directory(self, run_dir: Path) -> Path:
        return cell_directory(run_dir, self.model.name, self.task.name, self.method)

    def context(self, device: str, cache, forward_batch_size: int, checkpoint: str = "none"):
        """The :class:`~palrp_bench.evaluation.tasks.base.JobContext` task adapters receive."""
        from ..evaluation.tasks.base import JobContext

        return JobContext(task=self.task, method=self.method, rules=self.rules, aggregation=self.aggregation,
                          protocol=self.protocol, metrics=self.metrics, device=device, cache=cache,
                          forward_batch_size=forward_batch_size, tie_break=self.tie_break,
                          stabilizers=self.stabilizers, seed=self.seed, embeddings=self.embeddings,
                          checkpoint=checkpoint)

    def settings(self) -> dict:
        """The settings that change per-sample values (stored in ``cell.json``; resuming with other values is
        refused). Left out on purpose, because they never change a sample's numbers: which samples are evaluated
        (pool size, selection count, ``max_samples``, sharding), the batch sizes, and which metrics are evaluated
        (a later run may add metrics to a cell; each sample's stored record says which it covers)."""
        model = _plain(self.model)
        model.pop("paper_name", None)
        from ..data.registry import dataset_spec
        from ..methods.registry import get_method

        task = _plain(self.task)
        for key in ("pool_size", "select_count", "paper_task", "metrics"):
            task.pop(key, None)
        for key in ("method_params", "perturbation_steps"):  # unset: as before these fields existed
            if not task.get(key):
                task.pop(key, None)
        if task.get("contrastive", True):  # the default: as before the field existed
            task.pop("contrastive", None)
        task["options"] = dataset_spec(self.task.dataset).result_options(task.get("options", {}))
        settings = {"model": model, "task": task, "method": self.method, "protocol": self.protocol,
                    "aggregation": self.aggregation, "rules": self.rules, "stabilizers": self.stabilizer_choice,
                    "seed": self.seed}
        if self.tie_break is not None:  # only cells with pixel perturbation (other cells keep their fingerprint)
            settings["tie_break"] = self.tie_break
        if self.tf32 != "conv":  # conv: the numerics of every run before the switch existed (same fingerprint)
            settings["tf32"] = self.tf32
        if self.embeddings_setting == "full":  # only where it applies; partial: every run before the switch existed
            settings["embeddings"] = "full"
        method = get_method(self.method)
        if method.params:  # a baseline's resolved hyperparameters (defaults, the paper's per-dataset values, task's)
            settings["params"] = _plain(method.resolved_params(method.params_for(self.task)))
        return settings

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.settings(), sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> dict:
        """Self-describing record of the cell (``cell.json``, manifest)."""
        return {"key": self.key, "model": self.model.name, "paper_model": self.model.paper_name or self.model.name,
                "task": self.task.name, "method": self.method,
                "paper_task": self.task.paper_task or self.task.name, "metrics": list(self.metrics),
                "quantization": self.model.quantization.value, "dtype": self.model.dtype.value,
                "protocol": self.protocol, "causal": bool(self.task.causal), "tie_break": self.tie_break,
                "stabilizers": self.stabilizer_choice, "tf32": self.tf32, "embeddings": self.embeddings_setting,
                "aggregation": self.aggregation, "rules": self.rules,
                "fingerprint": self.fingerprint(), "settings": self.settings(),
                **({"paper_checkpoint": self.identity.record()} if self.identity is not None else {})}


@dataclass
class Job:
    """One shard of one cell: what a worker process (or a SLURM array element) executes."""

    cell: Cell
    shard: int
    n_shards: int
    max_samples: int | None = None
    batch_size: int | str = 8  # or "auto" (runner/batching.py)
    forward_batch_size: int = 64
    cache_explanations: bool = True
    #: ``runner.checkpoint``: ``none`` or ``layers`` (palrp_bench/lrp/recompute.py); never changes a sample's numbers
    checkpoint: str = "none"
    #: ``runner.loader_workers``: ``auto`` or a number of processes (palrp_bench/runner/loader.py); never changes a
    #: sample's numbers
    loader_workers: int | str = "auto"

    @property
    def name(self) -> str:
        return f"{self.cell.key}#{self.shard}/{self.n_shards}"

    def store_path(self, run_dir: Path) -> Path:
        return self.cell.directory(run_dir) / store_name(self.shard, self.n_shards)

    def status_path(self, run_dir: Path) -> Path:
        return self.store_path(run_dir).with_suffix(".status.json")


#: the twin modality of each model kind (``Method.modalities``)
MODEL_MODALITY = {"vit": "pixels", "classifier": "tokens", "causal": "tokens", "masked_lm": "tokens",
                  "seq2seq": "tokens", "vlm": "image_text"}


def _to_object(node, schema):
    return node if isinstance(node, schema) else OmegaConf.to_object(node)


def _metric_applies(metric: str, task: TaskConfig) -> bool:
    """Whether the procedure ``metric`` evaluates the task's kind (its registration,
    :mod:`palrp_bench.evaluation.procedures`; an unknown metric is a one-line error)."""
    from ..evaluation.procedures import applies

    return applies(metric, task.kind)


def plan_cells(cfg: DictConfig) -> list[Cell]:
    """The cells of this invocation (see the module docstring), validated: every name exists, every metric
    applies to its task, the rules override is a known composite, the model loader, the task kind and the dataset
    are registered."""
    from ..data.registry import dataset_spec
    from ..evaluation.tasks import TASK_KINDS
    from ..methods.registry import get_method
    from ..methods.token_aggregation import check_embeddings
    from ..metrics.perturbation import resolve_tie_break
    from ..models.loading import LOADERS

    chosen = {g: cfg[g].name for g in ("model", "task", "method") if cfg.get(g) is not None}
    metric_choice = cfg.metric.name if cfg.get("metric") is not None else None
    protocol = cfg.protocol.value if isinstance(cfg.protocol, Enum) else str(cfg.protocol)
    tie_break = resolve_tie_break(cfg.get("tie_break"), protocol)
    stabilizers = cfg.get("stabilizers")
    if stabilizers is None:  # the experiment's, when the command line sets none
        stabilizers = getattr(cfg.experiment, "stabilizers", None)
    stabilizers = check_stabilizers(stabilizers)
    tf32 = resolve_tf32(cfg.get("tf32"), protocol)
    embeddings = cfg.get("embeddings", "full")
    embeddings = check_embeddings(embeddings.value if isinstance(embeddings, Enum) else str(embeddings))
    if cfg.rules is not None:
        from ..lrp.composites import get_composite

        get_composite(cfg.rules)

    triples: list[tuple[str, str, str, tuple[str, ...], object]] = []
    blocks = [(m, t, me, tuple(block.metrics), getattr(block, "dtype", None)) for block in cfg.experiment.cells
              for m in block.models for t in block.tasks for me in block.methods]
    if len(chosen) == 3:
        # a cell of the experiment keeps the dtype its block gives (e.g. evidence_table1's float64 on sva / ra)
        dtype = next((b[4] for b in blocks if b[:3] == (chosen["model"], chosen["task"], chosen["method"])), None)
        triples.append((chosen["model"], chosen["task"], chosen["method"], (), dtype))
    else:
        triples = blocks
        wanted = {"model": 0, "task": 1, "method": 2}
        triples = [c for c in triples if all(c[wanted[g]] == v for g, v in chosen.items())]
        if not triples:
            given = " ".join(f"{g}={v}" for g, v in chosen.items())
            raise BadInputError(f"no cell of experiment {cfg.experiment.name!r} matches {given}",
                                "give all of model=, task= and method= to run a single cell, or choose the "
                                f"experiment that contains it ({', '.join(catalog.available('experiment'))})")

    cells: list[Cell] = []
    seen: set[str] = set()
    map_sensitivity = bool(cfg.runner.get("map_sensitivity", False))
    without_map_sensitivity: list[str] = []
    for model_name, task_name, method_name, block_metrics, block_dtype in triples:
        model = _to_object(cfg.model, ModelConfig) if "model" in chosen else catalog.load("model", model_name)
        task = _to_object(cfg.task, TaskConfig) if "task" in chosen else catalog.load("task", task_name)
        model = _to_object(model, ModelConfig)
        task = _to_object(task, TaskConfig)
        if block_dtype is not None and ("model" not in chosen
                                        or model.dtype == _to_object(catalog.load("model", model_name),
                                                                     ModelConfig).dtype):
            # the block's dtype, unless the command line set model.dtype (a value other than the config file's)
            model = replace(model, dtype=DType(getattr(block_dtype, "value", block_dtype)))
        model = resolve_model(model)  # model=hf: kind and name from the checkpoint's config.json
        identity = paper_identity(model)
        if (identity is not None and identity.matches is False and model.dtype != DType.float32
                and not _dtype_told(model)):
            log.info("model %s: %s; it runs in float32, not the paper config's %s (model.dtype=... to choose)",
                     model.name, identity.reason, model.dtype.value)
            model = replace(model, dtype=DType.float32)
        method = get_method(method_name)
        modality = MODEL_MODALITY.get(model.kind.value)
        if modality is not None:  # e.g. a ViT-only composite on a language model: refused before any job runs
            method.check_modality(modality)
        method.check_model_kind(model.kind.value, model.name)  # e.g. alti_logit on a masked LM
        LOADERS.lookup(model.loader, f" (model {model.name})")
        TASK_KINDS.lookup(task.kind, f" (task {task.name})")
        dataset_spec(task.dataset, f" (task {task.name})")
        metrics = tuple(block_metrics) or tuple(task.metrics)
        for metric in metrics:
            if not _metric_applies(metric, task):
                raise BadInputError(f"metric {metric!r} does not apply to task {task.name!r} ({task.kind})",
                                    "remove it from the experiment / task metrics")
        if metric_choice is not None:
            if not _metric_applies(metric_choice, task):
                if len(chosen) == 3:
                    raise BadInputError(f"metric {metric_choice!r} does not apply to task {task.name!r}",
                                        "choose a metric of that task: " + ", ".join(task.metrics))
                continue
            metrics = (metric_choice,)
        if not metrics:
            raise BadInputError(f"task {task.name!r} has no metrics", "list them in its task config (metrics: [...])")
        if map_sensitivity and MAP_SENSITIVITY_METRIC not in metrics:
            if _metric_applies(MAP_SENSITIVITY_METRIC, task) and model.quantization.value == "none":
                metrics = (*metrics, MAP_SENSITIVITY_METRIC)
            else:  # the evidence and seq2seq kinds, the self-test, NF4 models (no float64 copy)
                without_map_sensitivity.append(f"{model.name}/{task.name}")
        cell = Cell(model=model, task=task, method=method_name, metrics=metrics, protocol=protocol,
                    aggregation=cfg.aggregation.value if isinstance(cfg.aggregation, Enum) else str(cfg.aggregation),
                    rules=cfg.rules, seed=int(cfg.seed), stabilizers=stabilizers, tf32=tf32, embeddings=embeddings,
                    tie_break=tie_break if _metric_applies("vision_perturbation", task) else None,
                    identity=identity)
        if cell.key in seen:
            continue
        seen.add(cell.key)
        cells.append(cell)
    if not cells:
        raise BadInputError(f"metric={metric_choice} applies to none of the selected cells",
                            "choose a metric that fits the tasks (see configs/metric/)")
    if without_map_sensitivity:
        from ..evaluation.procedures import procedure

        log.warning("runner.map_sensitivity: no float64 maps for %s (the metric applies to the task kinds %s of "
                    "unquantized models)", ", ".join(sorted(set(without_map_sensitivity))),
                    ", ".join(procedure(MAP_SENSITIVITY_METRIC).applies_to))
    return cells


def _dtype_told(model: ModelConfig) -> bool:
    """Whether the command line chose the dtype of ``model`` (named after a shipped config): Hydra's record of the
    overrides says ``model.dtype=``, or the dtype differs from the shipped config's (outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized() and any(o.split("=", 1)[0].lstrip("+~") == "model.dtype"
                                         for o in HydraConfig.get().overrides.task):
        return True
    return model.dtype != _to_object(catalog.load("model", model.name), ModelConfig).dtype


def plan_jobs(cfg: DictConfig, cells: list[Cell], n_workers: int) -> list[Job]:
    """Every (cell, shard) job of this invocation, grouped by model so a worker loads each model once.

    ``runner.n_shards`` defaults to the number of workers; ``runner.shard`` restricts the list to one shard
    index (a SLURM array element runs exactly one)."""
    runner = cfg.runner
    n_shards = runner.n_shards if runner.n_shards is not None else max(1, n_workers)
    if runner.shard is not None:
        if runner.n_shards is None:
            raise BadInputError("runner.shard is set but runner.n_shards is not",
                                "give both, e.g. runner.n_shards=8 runner.shard=3")
        check_shard(int(runner.shard), int(n_shards))
        shards = [int(runner.shard)]
    else:
        check_shard(0, int(n_shards))
        shards = list(range(int(n_shards)))
    if runner.max_samples is not None and runner.max_samples < 1:
        raise BadInputError(f"runner.max_samples must be >= 1, got {runner.max_samples}",
                            "set a positive cap or leave it unset (null) for every sample")
    batch_size = check_batch_size(runner.batch_size)
    if runner.forward_batch_size < 1:
        raise BadInputError(f"runner.forward_batch_size must be >= 1, got {runner.forward_batch_size}",
                            "set runner.forward_batch_size to a positive integer")
    checkpoint = check_checkpoint(getattr(runner, "checkpoint", None))
    loader_workers = check_loader_workers(getattr(runner, "loader_workers", AUTO))
    jobs = [Job(cell, s, int(n_shards), runner.max_samples, batch_size, int(runner.forward_batch_size),
                bool(runner.cache_explanations), checkpoint, loader_workers)
            for cell in sorted(cells, key=lambda c: (c.model.name, c.task.name))
            for s in shards]
    return jobs
