"""The shipped config tree as a catalog: group files loaded by name and validated against their schema.

An experiment lists several models / tasks / methods by name; the runner loads each one's group file here
(``palrp_bench/configs/<group>/<name>.yaml``) instead of asking Hydra to compose it, and validates it with the
dataclass of :mod:`palrp_bench.schema`. Unknown names raise a one-line :class:`BadInputError` with the closest
names (``difflib``) and, for short groups, every name; the long groups point to ``palrp-bench --help``, which lists
every option of every group.
"""
from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .errors import BadInputError
from .schema import GROUP_SCHEMAS

#: the Hydra config tree shipped inside the package (the repository's top-level ``configs/`` points here)
CONFIG_DIR = Path(__file__).resolve().parent / "configs"


def available(group: str) -> list[str]:
    """Names of the options of a config group (``model``, ``task``, ``method``, ``metric``, ``experiment``)."""
    if group not in GROUP_SCHEMAS:
        raise BadInputError(f"unknown config group {group!r}", f"use one of: {', '.join(GROUP_SCHEMAS)}")
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


#: a group with at most this many options lists them all in the unknown-name error; a longer one names the closest
#: and points to ``palrp-bench --help`` (40 model names in one error line hide the one the user meant)
LISTED_IN_FULL = 12


def check_name(group: str, name: str) -> None:
    """Raise a one-line :class:`BadInputError` if ``name`` is not an option of ``group``: "did you mean" with the
    closest names (:func:`difflib.get_close_matches`), then every name of a short group (:data:`LISTED_IN_FULL`) or,
    for a long one, where the full list is (``palrp-bench --help``)."""
    names = available(group)
    if name in names:
        return
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    guess = f"did you mean {' or '.join(filter(None, [', '.join(close[:-1]), close[-1]]))}? " if close else ""
    if len(names) <= LISTED_IN_FULL:
        raise BadInputError(f"unknown {group} {name!r}", f"{guess}use one of: {', '.join(names)}")
    own = " (your own checkpoint: model=hf model.source=<folder or hub id>)" if group == "model" else ""
    raise BadInputError(f"unknown {group} {name!r}", f"{guess}every {group}: palrp-bench --help{own}")


@lru_cache(maxsize=None)
def _load(group: str, name: str) -> DictConfig:
    check_name(group, name)
    schema = OmegaConf.structured(GROUP_SCHEMAS[group])
    try:
        node = OmegaConf.merge(schema, OmegaConf.load(CONFIG_DIR / group / f"{name}.yaml"))
    except Exception as err:  # a broken shipped file is a bug, but say which file
        raise BadInputError(f"invalid config {group}/{name}.yaml: {str(err).splitlines()[0]}",
                            f"fix {CONFIG_DIR / group / (name + '.yaml')}") from None
    OmegaConf.set_readonly(node, True)
    return node


def load(group: str, name: str) -> DictConfig:
    """The validated, read-only config of option ``name`` of ``group``."""
    return _load(group, name)
