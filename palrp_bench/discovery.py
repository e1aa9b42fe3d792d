"""Registries fill themselves: each registry imports every module of its package once, so that a new model family,
dataset, task kind or metric is one module whose decorators register it (docs/architecture.md)."""
from __future__ import annotations

import importlib
import pkgutil

__all__ = ["import_package_modules"]

_DONE: set[str] = set()


def import_package_modules(package: str) -> None:
    """Import every module of ``package`` (e.g. ``"palrp_bench.models"``) once per process."""
    if package in _DONE:
        return
    module = importlib.import_module(package)
    for info in pkgutil.iter_modules(module.__path__):
        importlib.import_module(f"{package}.{info.name}")
    _DONE.add(package)
