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

Every fix is written as the command-line overrides that apply it (``task=<name> task.path=<file>``,
``++task.options.<key>=null`` where the key is new), with the group selection prefixed when the command line did not
select that group.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BadInputError, MissingDataError, PalrpError
from ..findings import Findings, HubNeed
from ..hub import (ACCESS_GATED, ACCESS_NOT_FOUND, HUB_PROBE_TIMEOUT, hub_access, hub_endpoint, hub_offline,
                   hub_reachable)
from ..models.loading import loader_spec
from ..schema import MODEL_KIND_WORDS
from ..runner.devices import DevicePlan
from ..runner.plan import Cell

__all__ = ["Problem", "Preflight", "MissingRequirementsError", "run_preflight", "check_requirements"]


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

    shipped = [catalog.load("model", name) for name in catalog.available("model")]
    matching = sorted((m for m in shipped if _kind(m) in kinds),
                      key=lambda m: (not loader_spec(m.loader).offline, m.name))
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
    if kind == "none" and loader_spec(cell.model.loader).loads_model:
        fix += f", or set model.kind={kinds[0]} if {cell.model.name} is one"
    found.add(f"model {cell.model.name} is {MODEL_KIND_WORDS.get(kind, kind)} (kind {kind}), but task "
              f"{cell.task.name} ({cell.task.kind}) needs {need} (kind {' or '.join(kinds)})", fix)


# ------------------------------------------------------------------------------------------------ methods
def _method_checks(cell: Cell, found: Preflight) -> None:
    """What the cell's method cannot explain, known from the model config before it loads: a positional encoding
    with a single sink for a method ablating per-layer sinks (the twin's positional kind,
    :func:`~palrp_bench.models.loading.positional_kind_of_config`, never asking the hub). A config that cannot tell
    is left to the model's own checks."""
    from ..methods.registry import get_method
    from ..models.loading import positional_kind_of_config

    method = get_method(cell.method)
    if method.positional_abs or not method.is_lrp:
        return
    try:
        kind = positional_kind_of_config(cell.model, download=False)
    except PalrpError:
        return
    try:
        method.check_positional(kind, f"model {cell.model.name}")
    except BadInputError as err:
        found.add(err.problem, err.fix or "")


# ------------------------------------------------------------------------------------------------- models
def _model_checks(model, found: Preflight, needs: list[HubNeed], fix: _Overrides) -> None:
    """The model's loader checks its weights, assets and tokenizer (:attr:`~palrp_bench.models.loading.LoaderSpec.
    check`); a classifier whose finetuned weights are missing is told how to train them."""
    from .training import training_hint

    spec = loader_spec(model.loader, f" (model {model.name})")
    if spec.check is None:
        return
    findings = Findings(model, lambda *assignments: fix("model", model.name, *assignments),
                        weights_hint=training_hint(model))
    spec.check(model, findings)
    for item, how in findings.problems:
        found.add(item, how)
    needs.extend(findings.needs)


# ----------------------------------------------------------------------------------------------- datasets
def _task_checks(task, found: Preflight, needs: list[HubNeed], fix: _Overrides) -> None:
    """The task's dataset checks its data (:meth:`palrp_bench.data.registry.DatasetSpec.preflight`: options, what
    it requires, the file's head in its format; without ``task.path``, the hub repository it reads)."""
    from ..data.registry import dataset_spec

    findings = Findings(task, lambda *assignments: fix("task", task.name, *assignments))
    dataset_spec(task.dataset, f" (task {task.name})").preflight(task, findings)
    for item, how in findings.problems:
        found.add(item, how)
    needs.extend(findings.needs)


# ---------------------------------------------------------------------------------------------------- hub
def _hub_checks(needs: list[HubNeed], found: Preflight) -> None:
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
        _method_checks(cell, found)
    needs: list[HubNeed] = []
    seen_models: set[str] = set()
    seen_tasks: set[str] = set()
    for cell in cells:
        if repr(cell.model) not in seen_models:
            seen_models.add(repr(cell.model))
            _model_checks(cell.model, found, needs, fix)
        if repr(cell.task) not in seen_tasks:
            seen_tasks.add(repr(cell.task))
            _task_checks(cell.task, found, needs, fix)
    unique: dict[tuple[str, str, str], HubNeed] = {}
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
