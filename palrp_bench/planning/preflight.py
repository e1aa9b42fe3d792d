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
* datasets: local files with their expected sizes (IMDB rows, the 50,000 ImageNet validation images that
  ``subset=protocol5000`` needs, the 4,276 entries of ``gtsegs_ijcv.mat``), using the dataset modules' own
  constants and listing code; the evidence sets: sva's local file (on no hub), and spaCy with its English model
  where a file marks no evidence (:func:`_evidence_checks`);
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

import math
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
           "check_requirements", "local_checkpoint_problem", "HUB_DATASETS"]

#: hub datasets and the repository they come from (``task.path`` unset)
HUB_DATASETS = {"arc": "allenai/ai2_arc", "wikipedia": "wikimedia/wikipedia", "ra": "nyu-mll/blimp",
                "qa": "rajpurkar/squad_v2"}
#: a local copy of each hub dataset (the fix that avoids the hub)
LOCAL_COPIES = {"arc": "<arc> (a folder holding ARC-Easy/train-*.parquet and test-*.parquet)",
                "wikipedia": "<wikipedia> (20231101.en/train-00000-of-00041.parquet)",
                "ra": "<blimp> (anaphor_number_agreement.jsonl, or a folder holding "
                      "anaphor_number_agreement/train-*.parquet)",
                "qa": "<squad> (train-v2.0.json, or a folder holding squad_v2/train-*.parquet; "
                      "task.options.split=validation: dev-v2.0.json)"}
#: the Hugging Face copy of IMDB (``task.options.source=hf`` without ``task.path``)
HUB_IMDB = "stanfordnlp/imdb"
#: hub datasets read by streaming: the loader never fills the local cache, so offline they need ``task.path``
STREAMED_DATASETS = {"wikipedia"}
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
    if getattr(model.kind, "value", model.kind) != "vit":  # a timm checkpoint (model=hf) has no tokenizer
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
def _imdb_checks(task, found: Preflight, fix: _Overrides) -> None:
    from ..data.imdb import KAGGLE_CSV_NAME, KAGGLE_URL, OFFICIAL_TEST_SIZE

    if task.options.get("source", "kaggle_csv") == "hf":  # a local copy in the hub's parquet layout
        from ..data.imdb import HF_NAME
        from ..data.text_common import find_split_files

        split = task.options.get("split", "test")
        how = f"a folder with plain_text/{split}-*.parquet of {HF_NAME}"
        try:
            find_split_files(Path(task.path).expanduser(), split, what="IMDB (Hugging Face format)", how_to_get=how)
        except (MissingDataError, BadInputError) as err:
            found.add(f"IMDB ({HF_NAME} layout) at {task.path} ({task.name}): {err.problem}",
                      fix("task", task.name, "task.path=<folder>") + f" ({how})")
        return
    csv = Path(task.path).expanduser()
    if csv.is_dir():
        csv = csv / KAGGLE_CSV_NAME
    path_fix = fix("task", task.name, "task.path=<csv>") + f" (the Kaggle '{KAGGLE_CSV_NAME}': {KAGGLE_URL})"
    if not csv.is_file():
        found.add(f"IMDB CSV {csv} ({task.name}): no such file", path_fix)
        return
    import pandas as pd

    try:
        n_rows = len(pd.read_csv(csv, usecols=["sentiment"]))
    except (OSError, ValueError) as err:
        found.add(f"IMDB CSV {csv} ({task.name}) cannot be read as the Kaggle file "
                  f"({str(err).splitlines()[0][:80]})", path_fix)
        return
    n_test = math.ceil(OFFICIAL_TEST_SIZE * n_rows)
    if task.pool_size is not None and n_test < task.pool_size:
        found.add(f"IMDB CSV {csv} has {n_rows} rows: its test part ({n_test}) is smaller than the pool of "
                  f"{task.pool_size} ({task.name}; the Kaggle file has 50,000 rows)",
                  path_fix + f", or {fix('task', task.name, f'task.pool_size={n_test}')}")


def _imagenet_checks(task, found: Preflight, fix: _Overrides) -> None:
    from ..data.imagenet import IMAGENET_VAL_SIZE, list_imagenet_val

    path_fix = fix("task", task.name, "task.path=<imagenet>") + " (the folder holding val/)"
    try:
        listing = list_imagenet_val(task.path, task.options.get("labels_file"))
    except (MissingDataError, BadInputError) as err:
        found.add(f"ImageNet validation set at {task.path} ({task.name}): {err.problem}",
                  f"{path_fix} ({err.fix})" if err.fix else path_fix)
        return
    count = len(listing.files)
    subset = task.options.get("subset", "protocol5000")
    if subset == "protocol5000" and count != IMAGENET_VAL_SIZE:
        found.add(f"ImageNet at {task.path} holds {count:,} labelled images; subset=protocol5000 is defined on "
                  f"all {IMAGENET_VAL_SIZE:,} ({task.name})",
                  f"{path_fix} (the complete set), or {fix('task', task.name, 'task.options.subset=all')} "
                  f"(or task.options.subset=<k> <= {count})")
    elif isinstance(subset, int) and not isinstance(subset, bool) and subset > count:
        found.add(f"ImageNet at {task.path} holds {count:,} labelled images, fewer than subset={subset} "
                  f"({task.name})", fix("task", task.name, f"task.options.subset={count}"))


def _imagenet_seg_checks(task, found: Preflight, fix: _Overrides) -> None:
    from ..data.imagenet_seg import IMAGENET_SEG_COUNT, IMAGENET_SEG_FILENAME, IMAGENET_SEG_URL, load_imagenet_seg

    path_fix = (fix("task", task.name, f"task.path=<{IMAGENET_SEG_FILENAME}>")
                + f" (download {IMAGENET_SEG_URL}; python scripts/get_imagenet_seg.py checks it)")
    try:
        count = len(load_imagenet_seg(task.path, expected_count=None))
    except (MissingDataError, BadInputError) as err:
        found.add(f"ImageNet-segmentation file ({task.name}): {err.problem}", path_fix)
        return
    expected = task.options.get("expected_count", IMAGENET_SEG_COUNT)
    if expected is not None and count != expected:
        found.add(f"{task.path} holds {count:,} entries, expected {expected:,} ({task.name})",
                  f"{path_fix}, or {fix('task', task.name, '++task.options.expected_count=null')} "
                  "(evaluates the entries it has)")


#: where the official SQuAD v2 files are published
SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset/"


def _squad_checks(task, found: Preflight, fix: _Overrides) -> None:
    """A readable SQuAD v2 split (nested JSON or the hub's flat rows) with at least ``pool_size`` questions (every
    question, or with ``answerable_only`` the answerable ones: the AttnLRP protocol draws its random sample from
    them), read by the task's own loader and options."""
    from ..data.registry import load_dataset
    from ..data.squad import OFFICIAL_FILES

    split = str(task.options.get("split", "validation"))
    official = OFFICIAL_FILES.get(split, "dev-v2.0.json")
    path_fix = (fix("task", task.name, f"task.path=<{official}>")
                + f" (the official file, a folder holding it, or the hub's squad_v2/{split}-*.parquet; download "
                  f"{SQUAD_URL}{official})")
    try:
        pool = load_dataset(task.dataset, path=task.path, limit=None, options=dict(task.options), tokenizer=None)
    except (MissingDataError, BadInputError) as err:
        found.add(f"SQuAD v2 file {task.path} ({task.name}): {err.problem}", path_fix)
        return
    what = "answerable questions" if task.options.get("answerable_only") else "questions"
    if task.pool_size is not None and len(pool) < task.pool_size:
        found.add(f"{task.path} holds {len(pool):,} {what}, fewer than pool_size={task.pool_size:,} "
                  f"({task.name})", f"{path_fix}, or {fix('task', task.name, f'task.pool_size={len(pool)}')}")


#: ``task.dataset`` -> checks of its local file(s) and their expected sizes
DATASET_CHECKS = {"imdb": _imdb_checks, "imagenet": _imagenet_checks, "imagenet_seg": _imagenet_seg_checks,
                  "squad": _squad_checks}


def _evidence_checks(task, found: Preflight, fix: _Overrides) -> None:
    """The evidence sets (docs/evidence.md "Real data"): sva is on no hub (a local file of Goldberg or Linzen);
    files without evidence annotations (Goldberg's TSV, BLiMP from the hub or its JSON lines) need spaCy and its
    English model, which is not on PyPI."""
    from ..data import ra, sva
    from ..data.evidence_parse import SPACY_FIX, SPACY_MODEL, parser_missing

    if task.dataset == "sva" and task.path is None:
        found.add(f"sva data ({task.name}): not on the Hugging Face hub, it needs a local file",
                  fix("task", task.name, "task.path=<lgd_dataset.tsv or agr_50_mostcommon_10K.tsv.gz>")
                  + f" ({sva.SOURCES})")
        return
    if task.dataset == "sva":
        parsed = sva.needs_parser(task.path)
    elif task.dataset == "ra":
        parsed = ra.needs_parser(task.path, str(task.options.get("paradigm", ra.PARADIGM)))
    else:
        return
    model = str(task.options.get("spacy_model", SPACY_MODEL))
    missing = parser_missing(model) if parsed else None
    if missing is not None:
        where = task.path if task.path is not None else f"the hub's {ra.HF_NAME}"
        found.add(f"{missing} ({task.name}): {where} marks no evidence, which spaCy's parse finds",
                  SPACY_FIX if model == SPACY_MODEL else
                  f'pip install -e ".[evidence]" && python -m spacy download {model}')


def _task_checks(task, found: Preflight, needs: list[_HubNeed], fix: _Overrides) -> None:
    if task.kind == "evidence":
        _evidence_checks(task, found, fix)
    if task.path is not None:
        check = DATASET_CHECKS.get(task.dataset)
        if check is not None:
            check(task, found, fix)
        elif not Path(task.path).expanduser().exists():
            found.add(f"dataset file {task.path} ({task.name}): no such file or folder",
                      fix("task", task.name, "task.path=<path>"))
        return
    repo = HUB_DATASETS.get(task.dataset)
    if task.dataset == "imdb" and task.options.get("source") == "hf":
        repo = HUB_IMDB
    if repo is None:
        return
    cached = task.dataset not in STREAMED_DATASETS and hub_cached(repo, "dataset")
    local_copy = LOCAL_COPIES.get(task.dataset, "<path>")
    needs.append(_HubNeed(repo, "dataset", f"hub dataset {repo} ({task.name})", cached,
                          fix("task", task.name, f"task.path={local_copy}"), check_access=False))


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
