"""Before any model loads: is everything the planned cells need on this machine? (``mode=run``, ``plan``,
``calibrate``; docs/planning.md "Preflight")

A paper table on a machine that lacks something must stop at once, listing EVERY problem with its fix, instead
of finding them one per invocation after a model load of minutes. Checked, in this order:

* devices: a model marked ``needs_gpu`` while ``runner.devices=[auto]`` found no GPU; a ``runner.devices`` entry
  this machine does not have;
* model kind vs task kind: a cell whose model kind (``configs/model/*.yaml`` ``kind``) is not one its task kind's
  adapter evaluates (``model_kinds`` of :mod:`palrp_bench.evaluation.tasks`), e.g. an image classifier on a text
  task or a causal LM on a classification task;
* models: embedded assets, DeiT checkpoint files, local checkpoint folders (``config.json`` and weights), the
  tokenizer each text model will load (:func:`palrp_bench.models.loading.tokenizer_source`);
* datasets: each task's dataset spec checks its own data (:meth:`palrp_bench.data.registry.DatasetSpec.preflight`:
  the options, a local path the data needs, the head of ``task.path`` read in its format, expected sizes, and tools
  such as a parser); without ``task.path`` its hub repository is checked with the models';
* the hub, for everything not local: the local cache first (``huggingface_hub.try_to_load_from_cache``, no
  network). Offline (``HF_HUB_OFFLINE=1``) an uncached item is a problem. Online, ONE reachability probe
  (:data:`palrp_bench.hub.HUB_PROBE_TIMEOUT` seconds); when the hub does not answer, uncached items are problems
  and the run continues offline (:func:`palrp_bench.hub.go_offline`: no loader retries a dead hub); when it
  answers, each hub model's access is checked once (``huggingface_hub.auth_check``, bounded), so a gated
  LLaMA without granted access is reported before anything loads.

Every fix is written as the command-line overrides that apply it (``task=imagenet task.options.subset=all``,
``++task.options.expected_count=null`` where the key is new), with the group selection prefixed when the
command line did not select that group.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInputError, MissingDataError
from ..schema import MODEL_KIND_WORDS
from ..hub import (ACCESS_GATED, ACCESS_NOT_FOUND, HUB_PROBE_TIMEOUT, WEIGHT_FILES, cached_hub_file, hub_access,
                   hub_cached, hub_endpoint, hub_model_cached, hub_offline, hub_reachable, hub_tokenizer_cached,
                   is_local_path)
from ..runner.devices import DevicePlan
from ..runner.plan import Cell

__all__ = ["Problem", "Preflight", "MissingRequirementsError", "run_preflight",
           "check_requirements", "local_checkpoint_problem"]

DEIT_WEIGHTS_URL = "https://github.com/facebookresearch/deit"


@dataclass(frozen=True)
class Problem:
    """One thing the run needs and this machine lacks: what, and how to fix it (command-line overrides where the
    fix is a setting)."""

    item: str
    fix: str


class MissingRequirementsError(MissingDataError):
    """Everything the planned cells lack, one problem per line, each with its fix."""

    def __init__(self, what: str, problems: list[Problem]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(f"cannot run {what}: {self.problems[0].item}", self.problems[0].fix)
        else:
            super().__init__(f"cannot run {what}: {len(self.problems)} problems found before loading anything",
                             "fix each as shown, then run the same command again")

    #: the plan's totals (:func:`palrp_bench.planning.budget.format_totals`), shown under a listing of several
    #: problems (a single problem stays a one-line error)
    planned: list[str] = []

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return super().__str__()
        text = "\n".join([f"{self.problem}:"] + format_problems(self.problems))
        if self.planned:
            text += "\n" + "\n".join(["once fixed, the run is planned at (mode=plan shows every cell):"]
                                     + [f"  {line}" for line in self.planned])
        return text


#: width the problem list is wrapped to
WIDTH = 100


def format_problems(problems: list[Problem], indent: str = "  ") -> list[str]:
    """Numbered ``item`` lines, each followed by its ``fix:`` line, wrapped at :data:`WIDTH` columns (overrides are
    never split)."""
    import textwrap

    lines = []
    for i, problem in enumerate(problems, 1):
        head = f"{indent}{i}. "
        pad = " " * len(head)
        lines += textwrap.wrap(problem.item, WIDTH, initial_indent=head, subsequent_indent=pad,
                               break_long_words=False, break_on_hyphens=False)
        lines += textwrap.wrap(problem.fix, WIDTH, initial_indent=f"{pad}fix: ", subsequent_indent=f"{pad}     ",
                               break_long_words=False, break_on_hyphens=False)
    return lines


@dataclass
class Preflight:
    """What the preflight found: the problems, and the hub as seen now (``offline`` = switched off by the user,
    ``unreachable`` = the probe got no answer, ``online``, or ``unused`` = nothing comes from the hub)."""

    problems: list[Problem] = field(default_factory=list)
    hub: str = "unused"

    def add(self, item: str, fix: str) -> None:
        problem = Problem(item, fix)
        if problem not in self.problems:
            self.problems.append(problem)


@dataclass
class _HubNeed:
    """Something a cell takes from the hub: ``repo`` (model or dataset), why (``what``), whether the local cache
    has it, the fix that avoids the hub, and whether to check gated access."""

    repo: str
    repo_type: str
    what: str
    cached: bool
    fix: str
    check_access: bool


class _Overrides:
    """Writes fixes as command-line overrides, prefixing ``group=<name>`` when the command line did not select
    the group (``task.path=...`` alone is refused without ``task=...``)."""

    def __init__(self, selected: frozenset[str]):
        self.selected = selected

    def __call__(self, group: str, name: str, *assignments: str) -> str:
        prefix = [] if group in self.selected else [f"{group}={name}"]
        return " ".join(prefix + list(assignments))


# -------------------------------------------------------------------------------------------- model kinds
def _kind(model) -> str:
    return str(getattr(model.kind, "value", model.kind))


def _example_model(kinds: tuple[str, ...]) -> str | None:
    """A shipped model of one of ``kinds`` to name in a fix (one that runs offline first)."""
    from .. import catalog
    from ..models.loading import OFFLINE_LOADERS

    shipped = [catalog.load("model", name) for name in catalog.available("model")]
    matching = sorted((m for m in shipped if _kind(m) in kinds),
                      key=lambda m: (m.loader not in OFFLINE_LOADERS, m.name))
    return matching[0].name if matching else None


def _kind_checks(cell: Cell, found: Preflight) -> None:
    """The model's kind is one the task kind's adapter evaluates (its ``model_kinds``), else one problem naming
    both (a vision model on a text task would fail only after loading, deep inside the adapter)."""
    from ..evaluation.tasks import TASK_KINDS

    kinds = tuple(TASK_KINDS.lookup(cell.task.kind).model_kinds)
    kind = _kind(cell.model)
    if kind in kinds:
        return
    need = " or ".join(MODEL_KIND_WORDS.get(k, k) for k in kinds)
    example = _example_model(kinds)
    fix = f"pick {need}" + (f", e.g. model={example}" if example else "")
    if kind == "none" and cell.model.loader != "selftest":
        fix += f", or set model.kind={kinds[0]} if {cell.model.name} is one"
    found.add(f"model {cell.model.name} is {MODEL_KIND_WORDS.get(kind, kind)} (kind {kind}), but task "
              f"{cell.task.name} ({cell.task.kind}) needs {need} (kind {' or '.join(kinds)})", fix)


# ------------------------------------------------------------------------------------------------- models
def _embedded_assets(model) -> list[Path]:
    if model.loader == "embedded_text":
        from ..data.synthetic_text import ASSET_DIR, tiny_tokenizer_dir

        return [ASSET_DIR / model.source / "model.safetensors", tiny_tokenizer_dir(model.source) / "tokenizer.json"]
    if model.loader == "embedded_vit":
        from ..data.synthetic_vision import tiny_vit_paths

        return list(tiny_vit_paths())
    return []


NO_SUCH_FOLDER = "no such folder"


def local_checkpoint_problem(source: str | Path) -> str | None:
    """What a local checkpoint folder lacks (``no such folder``, no ``config.json``, no weights), or None when it
    holds a saved Hugging Face model."""
    folder = Path(source).expanduser()
    if not folder.exists():
        return NO_SUCH_FOLDER
    if not (folder / "config.json").is_file():
        return "no config.json in it (not a saved Hugging Face model)"
    if not any((folder / w).is_file() for w in WEIGHT_FILES):
        return f"no weights in it ({', '.join(WEIGHT_FILES[:2])}, ...)"
    return None


def _model_checks(model, found: Preflight, needs: list[_HubNeed], fix: _Overrides) -> None:
    name = model.name
    for path in _embedded_assets(model):
        if not path.is_file():
            found.add(f"embedded asset {path} ({name})",
                      "recreate it: python scripts/train_tiny_text.py / python scripts/train_tiny_vit.py")
    if model.loader == "torchvision":
        from ..models.torchvision_vit import weights_file

        path = Path(model.checkpoint).expanduser() if model.checkpoint else weights_file(model.source)
        if not path.is_file() and (model.checkpoint or hub_offline()):
            found.add(f"torchvision weights {path} ({name}): no such file"
                      + ("" if model.checkpoint else " and the network is switched off (HF_HUB_OFFLINE=1)"),
                      fix("model", name, "model.checkpoint=<weights.pth>")
                      + " (or run once with network: torchvision downloads them)")
        return
    if model.loader == "timm":
        if model.checkpoint is not None:
            if not Path(model.checkpoint).expanduser().is_file():
                found.add(f"DeiT checkpoint file {model.checkpoint} ({name})",
                          fix("model", name, "model.checkpoint=<deit.pth>") + f" (the official weights: {DEIT_WEIGHTS_URL})")
        else:
            from ..models.loading import timm_tagged, timm_weights_repo

            repo = timm_weights_repo(model.source) or f"timm/{timm_tagged(model.source)}"
            needs.append(_HubNeed(repo, "model", f"pretrained weights {repo} ({name})",
                                  cached_hub_file(repo) is not None,
                                  fix("model", name, "model.checkpoint=<deit.pth>") + f" (the official weights: {DEIT_WEIGHTS_URL})",
                                  check_access=False))
        return
    if model.loader != "hf":
        return
    source = str(model.source)
    finetuned = getattr(model.kind, "value", model.kind) == "classifier"
    what = "finetuned weights" if finetuned else "checkpoint"
    source_fix = fix("model", name, "model.source=<folder>")
    if finetuned:
        quantized = " --quantized" if getattr(model.quantization, "value", model.quantization) == "nf4" else ""
        source_fix += (" (train one: python scripts/finetune_imdb.py --model "
                       f"{model.base_model or '<base_model>'}{quantized} --output-dir <dir>; use <dir>/best)")
    if is_local_path(source):
        problem = local_checkpoint_problem(source)
        if problem is not None:
            found.add(f"{what} {source} ({name}): {problem}", source_fix)
        if problem == NO_SUCH_FOLDER:
            return  # its tokenizer depends on what the folder will hold
    else:
        needs.append(_HubNeed(source, "model", f"hub model {source} ({name})", hub_model_cached(source),
                              fix("model", name, "model.source=<folder>"), check_access=True))
    _tokenizer_checks(model, found, needs, fix)


def _tokenizer_checks(model, found: Preflight, needs: list[_HubNeed], fix: _Overrides) -> None:
    from ..models.loading import holds_tokenizer, tokenizer_source

    tokenizer = tokenizer_source(model)
    tok_fix = fix("model", model.name, "model.tokenizer=<tokenizer>") + " (a hub id or folder)"
    if is_local_path(tokenizer):
        if Path(tokenizer).expanduser().exists() and not holds_tokenizer(tokenizer):
            found.add(f"tokenizer of {model.name}: {tokenizer} holds no tokenizer files "
                      "(tokenizer.json, tokenizer_config.json, tokenizer.model)", tok_fix)
        elif not Path(tokenizer).expanduser().exists() and tokenizer != str(model.source):
            found.add(f"tokenizer folder {tokenizer} ({model.name}): no such folder", tok_fix)
        return
    if tokenizer == str(model.source):
        return  # the hub model's own repository: checked with the model
    needs.append(_HubNeed(tokenizer, "model", f"hub tokenizer {tokenizer} ({model.name})",
                          hub_tokenizer_cached(tokenizer), tok_fix, check_access=True))


# ----------------------------------------------------------------------------------------------- datasets
def _task_checks(task, found: Preflight, needs: list[_HubNeed], fix: _Overrides) -> None:
    """The task's dataset checks its data (:meth:`palrp_bench.data.registry.DatasetSpec.preflight`: options, what
    it requires, the file's head in its format); without ``task.path``, its hub repository is a need."""
    from ..data.registry import Findings, dataset_spec

    spec = dataset_spec(task.dataset, f" (task {task.name})")
    findings = Findings(task, lambda *assignments: fix("task", task.name, *assignments))
    spec.preflight(task, findings)
    for item, how in findings.problems:
        found.add(item, how)
    if task.path is not None:
        return
    try:
        repo = spec.hub_repo(spec.resolve_options(task.options))
    except BadInputError:
        return  # listed above
    if repo is None:
        return
    cached = not spec.streamed and hub_cached(repo, "dataset")
    needs.append(_HubNeed(repo, "dataset", f"hub dataset {repo} ({task.name})", cached,
                          fix("task", task.name, f"task.path={spec.local_copy}"), check_access=False))


# ---------------------------------------------------------------------------------------------------- hub
def _hub_checks(needs: list[_HubNeed], found: Preflight) -> None:
    if not needs:
        return
    offline_models = hub_offline("model")
    if offline_models and all(hub_offline(n.repo_type) for n in needs):
        found.hub = "offline"
    elif hub_reachable(timeout=HUB_PROBE_TIMEOUT):
        found.hub = "online"
    else:
        found.hub = "unreachable"
    endpoint = hub_endpoint()
    access_of: dict[tuple[str, str], str] = {}  # one bounded probe per repository, however many models need it
    for need in needs:
        offline = hub_offline(need.repo_type) or found.hub == "unreachable"
        if need.cached and not (found.hub == "online" and need.check_access):
            continue
        if offline:
            if need.cached:
                continue
            why = ("HF_HUB_OFFLINE=1" if hub_offline(need.repo_type)
                   else f"the hub ({endpoint}) did not answer within {HUB_PROBE_TIMEOUT:g} s")
            found.add(f"{need.what}: not in the local Hugging Face cache and {why}",
                      f"{need.fix}, or download it once on a machine with network (same cache: HF_HOME)")
            continue
        if need.check_access:
            key = (need.repo, need.repo_type)
            if key not in access_of:
                access_of[key] = hub_access(*key)
            access = access_of[key]
            if access == ACCESS_GATED:
                found.add(f"{need.what}: gated on the hub and this machine's token has no access",
                          f"request access on {endpoint}/{need.repo}, then log in (`hf auth login` or HF_TOKEN); "
                          f"or {need.fix}")
            elif access == ACCESS_NOT_FOUND:
                found.add(f"{need.what}: the hub has no such repository (or it is private)", need.fix)


# ---------------------------------------------------------------------------------------------- entry points
def run_preflight(cells: list[Cell], devices: DevicePlan, selected: frozenset[str] | set[str] = frozenset(),
                  device_problem: Problem | None = None) -> Preflight:
    """Every problem of ``cells`` on this machine (see the module docstring). ``selected``: the config groups
    the command line selected (fixes then omit ``group=<name>``); ``device_problem``: a ``runner.devices``
    problem found while resolving the devices."""
    fix = _Overrides(frozenset(selected))
    found = Preflight()
    if device_problem is not None:
        found.add(device_problem.item, device_problem.fix)
    gpu_models = sorted({c.model.name for c in cells if c.model.needs_gpu})
    if gpu_models and devices.cpu_by_fallback:
        found.add(f"a CUDA GPU (for {', '.join(gpu_models)}): runner.devices=[auto] found none",
                  "runner.devices=[cpu] (runs them on the CPU anyway; mode=plan shows how long that takes)")
    for cell in cells:
        _kind_checks(cell, found)
    needs: list[_HubNeed] = []
    seen_models: set[str] = set()
    seen_tasks: set[str] = set()
    for cell in cells:
        if repr(cell.model) not in seen_models:
            seen_models.add(repr(cell.model))
            _model_checks(cell.model, found, needs, fix)
        if repr(cell.task) not in seen_tasks:
            seen_tasks.add(repr(cell.task))
            _task_checks(cell.task, found, needs, fix)
    unique: dict[tuple[str, str, str], _HubNeed] = {}
    for need in needs:
        unique.setdefault((need.repo, need.repo_type, need.what), need)
    _hub_checks(list(unique.values()), found)
    return found


def check_requirements(cells: list[Cell], devices: DevicePlan, what: str,
                       selected: frozenset[str] | set[str] = frozenset(),
                       device_problem: Problem | None = None) -> Preflight:
    """Raise :class:`MissingRequirementsError` listing every problem of ``what``; else return the preflight."""
    found = run_preflight(cells, devices, selected, device_problem)
    if found.problems:
        raise MissingRequirementsError(what, found.problems)
    return found
