"""Registries fill themselves: each registry imports every module of its package once, so that a new model family,
dataset, task kind or metric is one module whose decorators register it (docs/architecture.md).

:class:`Registry` is the one shape of a name-keyed registry (task kinds, datasets, model loaders, attributors): a
``register(name)`` decorator, the sorted ``names()`` after discovery, and ``lookup(name)`` with the one-line error
that names the choices.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

from .errors import BadInputError

__all__ = ["import_package_modules", "Registry"]

_DONE: set[str] = set()


def import_package_modules(package: str) -> None:
    """Import every module of ``package`` (e.g. ``"palrp_bench.models"``) once per process."""
    if package in _DONE:
        return
    module = importlib.import_module(package)
    for info in pkgutil.iter_modules(module.__path__):
        importlib.import_module(f"{package}.{info.name}")
    _DONE.add(package)


class Registry(dict):
    """``name -> entry``, filled by :meth:`register`. ``what`` names an entry in errors (``"task kind"``),
    ``setting`` the config key that selects one (``"task.kind"``; empty when no config key does), ``package`` the
    package whose modules register entries (all imported before a name is read; ``None`` when the entries are
    registered where the registry is defined)."""

    def __init__(self, what: str, setting: str = "", package: str | None = None):
        super().__init__()
        self.what, self.setting, self.package = what, setting, package

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator: register the decorated class or function as ``name``."""
        def deco(entry):
            self[name] = entry
            return entry
        return deco

    def names(self) -> list[str]:
        """Every registered name, sorted (imports the package's modules once)."""
        if self.package is not None:
            import_package_modules(self.package)
        return sorted(self)

    def lookup(self, name: str, context: str = "") -> Any:
        """The entry of ``name``, or a one-line :class:`~palrp_bench.errors.BadInputError` naming the choices
        (``context`` is appended to the problem, e.g. ``" (model tinyllama)"``)."""
        names = self.names()
        if name not in self:
            choices = ", ".join(names)
            raise BadInputError(f"unknown {self.what} {name!r}{context}",
                                f"set {self.setting} to one of: {choices}" if self.setting else f"use one of: {choices}")
        return self[name]
