"""Registry of datasets by name (``task.dataset``): each data module registers its loader by decorator.

A loader is ``fn(path, limit, options, tokenizer) -> Sequence`` of samples in dataset order (every sample has a
stable ``sample_id``; image datasets may return a lazy sequence whose ``sample_ids`` are known without reading
images). ``path`` is the task's local data path (None: hub or embedded data), ``limit`` the pool size, ``options``
the task's extra options. Every module of :mod:`palrp_bench.data` is imported when the registry is first used, so
a new dataset is one module.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..discovery import import_package_modules
from ..errors import BadInputError

__all__ = ["DATASETS", "register_dataset", "load_dataset", "sample_ids_of"]

DATASETS: dict[str, Callable[..., Sequence]] = {}


def register_dataset(name: str):
    """Decorator: the loader of ``task.dataset == name``."""
    def deco(fn):
        DATASETS[name] = fn
        return fn
    return deco


def load_dataset(name: str, *, path=None, limit: int | None = None, options: dict | None = None,
                 tokenizer: Any = None) -> Sequence:
    """The samples of dataset ``name`` (see the module docstring)."""
    import_package_modules(__package__)
    loader = DATASETS.get(name)
    if loader is None:
        raise BadInputError(f"unknown dataset {name!r}", f"set task.dataset to one of: {', '.join(sorted(DATASETS))}")
    return loader(path, limit, dict(options or {}), tokenizer)


def sample_ids_of(dataset: Sequence) -> list[str]:
    """The sample ids of a dataset in order (``dataset.sample_ids`` when it has them, e.g. lazy image folders)."""
    ids = getattr(dataset, "sample_ids", None)
    return list(ids) if ids is not None else [s.sample_id for s in dataset]
