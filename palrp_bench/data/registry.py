"""Registry of datasets by name (``task.dataset``): each data module registers its loader by decorator.

A loader is ``fn(path, limit, options, tokenizer) -> Sequence`` of samples in dataset order (every sample has a
stable ``sample_id``; image datasets may return a lazy sequence whose ``sample_ids`` are known without reading
images). ``path`` is the task's local data path (None: hub or embedded data), ``limit`` the pool size, ``options``
the task's extra options. Every module of :mod:`palrp_bench.data` is imported when the registry is first used, so
a new dataset is one module.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..discovery import Registry

__all__ = ["DATASETS", "register_dataset", "load_dataset", "sample_ids_of"]

#: ``task.dataset`` -> loader ``(path, limit, options, tokenizer) -> samples``
DATASETS = Registry("dataset", "task.dataset", __package__)


def register_dataset(name: str):
    """Decorator: the loader of ``task.dataset == name``."""
    return DATASETS.register(name)


def load_dataset(name: str, *, path=None, limit: int | None = None, options: dict | None = None,
                 tokenizer: Any = None) -> Sequence:
    """The samples of dataset ``name`` (see the module docstring)."""
    return DATASETS.lookup(name)(path, limit, dict(options or {}), tokenizer)


def sample_ids_of(dataset: Sequence) -> list[str]:
    """The sample ids of a dataset in order (``dataset.sample_ids`` when it has them, e.g. lazy image folders)."""
    ids = getattr(dataset, "sample_ids", None)
    return list(ids) if ids is not None else [s.sample_id for s in dataset]
