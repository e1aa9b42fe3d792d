"""Registry of datasets by name (``task.dataset``): each data module registers a :class:`DatasetSpec`, the one
place that knows the dataset (docs/architecture.md "How to add ... A dataset").

A spec carries the loader and what planning needs before anything loads: the typed options with their defaults,
the hub repository read when ``task.path`` is unset (and whether it is streamed), the local copy that replaces it,
the pool size and the mean tokens per sample the cost model prices, and the preflight check of a task's data
(:meth:`DatasetSpec.check`: the file's head read in its format, sizes, tools). Planning loops over specs and never
names a dataset.

A loader is ``fn(path, limit, options, tokenizer) -> Sequence`` of samples in dataset order (every sample has a
stable ``sample_id``; image datasets may return a lazy sequence whose ``sample_ids`` are known without reading
images). ``path`` is the task's local data path (None: hub or embedded data), ``limit`` the pool size, ``options``
the task's options with every default filled in (:meth:`DatasetSpec.resolve_options`). Every module of
:mod:`palrp_bench.data` is imported when the registry is first used, so a new dataset is one module.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..discovery import Registry
from ..errors import BadInputError, MissingDataError
from ..findings import Findings
from ..hub import hub_cached

__all__ = ["DATASETS", "DatasetSpec", "Option", "register_dataset", "dataset_spec", "load_dataset",
           "sample_ids_of"]

#: ``task.dataset`` -> :class:`DatasetSpec`
DATASETS = Registry("dataset", "task.dataset", __package__)

_NO_DEFAULT = object()


@dataclass(frozen=True)
class Option:
    """One loader option (``task.options.<name>``): its default and the types it accepts (the default's type when
    ``types`` is empty; ``int`` also accepts no ``bool``; a ``float`` option accepts an ``int``).
    ``changes_results=False``: the option never changes a sample's numbers (it is left out of a cell's fingerprint
    and of the data's, e.g. the self-test's ``delay_s``)."""

    name: str
    default: Any
    help: str = ""
    types: tuple[type, ...] = ()
    changes_results: bool = True

    @property
    def accepted(self) -> tuple[type, ...]:
        types = self.types or ((type(self.default),) if self.default is not None else ())
        return types + ((int,) if float in types else ())

    def check(self, value: Any, dataset: str) -> Any:
        """``value`` if it has an accepted type (None where the default is None), else a one-line error."""
        types = self.accepted
        if value is None and (self.default is None or type(None) in types):
            return value
        if not types or (isinstance(value, types) and not (isinstance(value, bool) and bool not in types)):
            return value
        names = " or ".join(t.__name__ for t in types if t is not type(None))
        raise BadInputError(f"task.options.{self.name} of dataset {dataset} must be {names}, got {value!r}",
                            f"set task.options.{self.name} to {names}, e.g. {self.default!r}")


def _constant(value):
    return value if callable(value) else (lambda options: value)


@dataclass(frozen=True)
class DatasetSpec:
    """Everything about one dataset that the runner and planning read (module docstring).

    * ``load``: the loader ``(path, limit, options, tokenizer) -> samples``;
    * ``options``: its typed options with defaults (an unknown option is a one-line error);
    * ``hub``: the hub repository read when ``task.path`` is unset (a function of the options, or None: no hub);
      ``streamed``: read by streaming (never cached, so offline it needs ``task.path``); ``local_copy``: what
      ``task.path`` takes instead of the hub (shown in fixes);
    * ``needs_path``: the data is on no hub and ``task.path`` is required (the fix says where to get it);
    * ``pool_size``: the candidates of a pool in dataset order before ``task.pool_size`` caps them (None: unknown
      before the data is read); ``tokens``: mean real tokens per sample of a text dataset (capped at the option
      ``max_length``), ``context_tokens`` the tokens of its context (the features a context-only perturbation
      walks), ``padded_length`` the length every sample is padded to (None: no padding), ``longest_tokens`` the
      tokens of its longest sample where the options fix them (the needle's longest length; None: unknown, the plan
      sizes memory for the mean); each a value or a function of the resolved options;
    * ``check``: the preflight check of ``task.path`` ``(task, options, findings)``: it reads the head of the file
      in its format, counts what must be counted, and reports a missing path itself; ``requirements``: what the
      dataset needs besides its data (a parser), checked with or without ``task.path``;
    * ``formats``: the accepted ``task.path`` formats in words (docs/data.md).
    """

    name: str
    load: Callable[..., Sequence]
    options: tuple[Option, ...] = ()
    hub: str | Callable[[dict], str | None] | None = None
    streamed: bool = False
    local_copy: str = "<path>"
    needs_path: str | None = None
    pool_size: int | Callable[[dict], int | None] | None = None
    tokens: float | Callable[[dict], float | None] | None = None
    context_tokens: float | Callable[[dict], float | None] | None = None
    padded_length: int | Callable[[dict], int | None] | None = None
    longest_tokens: int | Callable[[dict], int | None] | None = None
    check: Callable[[Any, dict, Findings], None] | None = None
    requirements: Callable[[Any, dict, Findings], None] | None = None

    def resolve_options(self, given: Mapping[str, Any] | None) -> dict:
        """``given`` with every default filled in and each value's type checked (a config's list, as Hydra gives
        ``task.options.lengths=[1024,4096]``, as a plain list); an unknown key is a one-line error naming the known
        ones."""
        from omegaconf import OmegaConf

        given = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in dict(given or {}).items()}
        known = {o.name: o for o in self.options}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise BadInputError(f"unknown option(s) {unknown} for dataset {self.name}",
                                f"use only {sorted(known)} (task.options)" if known else "remove task.options")
        return {name: option.check(given[name], self.name) if name in given else option.default
                for name, option in known.items()}

    def result_options(self, given: Mapping[str, Any] | None) -> dict:
        """The options of ``given`` (as the task config writes them) that can change a sample's numbers."""
        quiet = {o.name for o in self.options if not o.changes_results}
        return {k: v for k, v in dict(given or {}).items() if k not in quiet}

    def hub_repo(self, options: dict) -> str | None:
        return _constant(self.hub)(options)

    def pool(self, options: dict) -> int | None:
        return _constant(self.pool_size)(options)

    def mean_tokens(self, options: dict) -> float | None:
        """Mean real tokens per sample, capped at the option ``max_length`` (None: unknown)."""
        tokens = _constant(self.tokens)(options)
        cap = options.get("max_length")
        return None if tokens is None else float(min(tokens, cap) if cap else tokens)

    def mean_context_tokens(self, options: dict) -> float | None:
        return _constant(self.context_tokens)(options)

    def padded(self, options: dict) -> int | None:
        value = _constant(self.padded_length)(options)
        return None if value is None else int(value)

    def longest(self, options: dict) -> int | None:
        value = _constant(self.longest_tokens)(options)
        return None if value is None else int(value)

    def preflight(self, task, findings: Findings) -> None:
        """Every problem of ``task``'s data this machine shows before anything loads: its options, what the dataset
        requires besides the data (:attr:`requirements`), a path it needs, then the path read by :attr:`check`
        (which says itself what is missing; without one, a path that does not exist is the problem); without
        ``task.path``, the hub repository it reads is a need (:class:`~palrp_bench.findings.Findings`)."""
        try:
            options = self.resolve_options(task.options)
        except BadInputError as err:
            findings.add(f"{err.problem} ({task.name})", err.fix or "fix task.options")
            return
        if self.requirements is not None:
            self.requirements(task, options, findings)
        if task.path is None:
            repo = self.hub_repo(options)
            if self.needs_path is not None:
                findings.add(f"{self.name} data ({task.name}): not on the Hugging Face hub, it needs a local file",
                             findings.fix(f"task.path={self.local_copy}") + f" ({self.needs_path})")
            elif repo is not None:
                findings.need(repo, "dataset", f"hub dataset {repo} ({task.name})",
                              not self.streamed and hub_cached(repo, "dataset"),
                              findings.fix(f"task.path={self.local_copy}"))
            return
        if self.check is None:
            if not Path(task.path).expanduser().exists():
                findings.add(f"dataset file {task.path} ({task.name}): no such file or folder",
                             findings.fix(f"task.path={self.local_copy}"))
            return
        try:
            self.check(task, options, findings)
        except (BadInputError, MissingDataError) as err:  # what the file's reading found wrong, in one line
            findings.add(f"{self.name} data at {task.path} ({task.name}): {err.problem}",
                         findings.fix(f"task.path={self.local_copy}") + (f" ({err.fix})" if err.fix else ""))


def register_dataset(name: str, **spec):
    """Decorator: the loader of ``task.dataset == name`` and the rest of its :class:`DatasetSpec` (``spec``)."""
    def deco(load):
        DATASETS.register(name)(DatasetSpec(name, load, **spec))
        return load
    return deco


def dataset_spec(name: str, context: str = "") -> DatasetSpec:
    """The registered spec of ``name`` (one-line error naming the datasets otherwise)."""
    return DATASETS.lookup(name, context)


def load_dataset(name: str, *, path=None, limit: int | None = None, options: dict | None = None,
                 tokenizer: Any = None) -> Sequence:
    """The samples of dataset ``name`` (see the module docstring)."""
    spec = dataset_spec(name)
    return spec.load(path, limit, spec.resolve_options(options), tokenizer)


def sample_ids_of(dataset: Sequence) -> list[str]:
    """The sample ids of a dataset in order (``dataset.sample_ids`` when it has them, e.g. lazy image folders)."""
    ids = getattr(dataset, "sample_ids", None)
    return list(ids) if ids is not None else [s.sample_id for s in dataset]
