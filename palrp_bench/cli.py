"""The ``palrp-bench`` command (Hydra entry point; configs in ``palrp_bench/configs``).

::

    palrp-bench                                             # embedded default: tiny models, all methods, offline
    palrp-bench model=llama3_8b task=mcqa method=pa_lrp     # one cell
    palrp-bench -m model=llama3_8b task=mcqa method=attnlrp,pe_only,pa_lrp
    palrp-bench experiment=table1                           # a paper table
    palrp-bench -m experiment=selftest hydra/launcher=submitit_slurm runner.n_shards=4 runner.shard=0,1,2,3
    palrp-bench mode=report run_dir=runs/<stamp>

A user mistake (unknown name, missing data, a GPU that is not there, a shard index out of range, ...) stops the
command with ONE line ``palrp-bench: error: <problem> -- <fix>`` and exit code 2; results already stored stay.
Typos in keys and wrong value types are caught by the structured-config schema
(:mod:`palrp_bench.schema`) before anything runs. Logs go to stderr and ``<run_dir>/logs/``; stdout carries only the
result tables.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from .errors import BadInputError, PalrpError
from . import catalog
from .schema import register_schemas

#: command-line groups checked before Hydra sees them, so an unknown option gives a one-line message
_CHECKED_GROUPS = ("model", "task", "method", "metric", "experiment")
EXIT_USER_ERROR = 2


class RunLogFileHandler(logging.FileHandler):
    """The run's log file (``<run_dir>/logs/palrp-bench.log``, configured in ``configs/config.yaml``); creates the
    folder, which does not exist yet when Hydra configures logging."""

    def __init__(self, filename, mode: str = "a", encoding=None, delay: bool = False):
        Path(filename).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(filename, mode, encoding, delay)


def fail(err: PalrpError) -> None:
    """Print the one-line error, record it in the run's log file (if logging to one), exit non-zero."""
    line = f"palrp-bench: error: {err}"
    print(line, file=sys.stderr)
    record = logging.LogRecord("palrp_bench", logging.ERROR, __file__, 0, line, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    sys.exit(EXIT_USER_ERROR)


def _fields(schema) -> dict:
    import dataclasses
    import typing

    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def _unwrap_optional(tp):
    import typing

    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp


def check_key(key: str) -> None:
    """Reject an override of a key the schema does not have (``runner.batchsize``), listing the valid keys."""
    import dataclasses
    import typing

    from .schema import PalrpConfig

    node, path = PalrpConfig, []
    for part in key.split("."):
        fields = _fields(node)
        if part not in fields:
            where = ".".join(path) or "the root config"
            raise BadInputError(f"unknown config key {key!r}",
                                f"keys of {where}: {', '.join(sorted(fields))}")
        path.append(part)
        tp = _unwrap_optional(fields[part])
        if dataclasses.is_dataclass(tp):
            node = tp
        elif typing.get_origin(tp) in (dict, typing.Dict) or tp is typing.Any:
            return  # free-form below this key (task.options)
        else:
            return  # a leaf: anything deeper is Hydra's to reject (it names the key)


def check_overrides(argv: list[str]) -> None:
    """One-line errors for the common command-line mistakes, before Hydra composes anything:

    * an unknown option of a config group (``model=llama9``; comma sweeps ``method=a,b`` are checked too);
    * an unknown key (``runner.batchsize=4``), with the valid keys of that level;
    * a key inside a group that is not selected (``task.path=...`` without ``task=...``).

    Wrong value types and enum values are left to the schema (Hydra's message names the key and the allowed
    values); ``hydra.*`` / ``hydra/...`` overrides and other sweep syntaxes are left to Hydra."""
    overrides = [arg.split("=", 1) for arg in argv if "=" in arg and not arg.startswith("-")]
    chosen = {key.lstrip("+~") for key, value in overrides if value not in ("", "null")}
    for key, value in overrides:
        key = key.lstrip("+~")
        if key.startswith("hydra") or "/" in key or "@" in key:
            continue
        group = key.split(".", 1)[0]
        if "." in key and group in _CHECKED_GROUPS and group != "experiment" and group not in chosen:
            raise BadInputError(f"{key} is set but no {group} is selected",
                                f"add {group}=<name> so the override has a {group} to apply to")
        if key in _CHECKED_GROUPS:
            if value in ("", "null") or "(" in value or "*" in value:
                continue
            for name in value.split(","):
                catalog.check_name(key, name.strip())
        else:
            check_key(key)


register_schemas()


@hydra.main(version_base="1.3", config_path=str(catalog.CONFIG_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from .runner.app import run

    try:
        run(cfg)
    except PalrpError as err:
        fail(err)


def main() -> None:
    """Console-script entry point ``palrp-bench``."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        check_overrides(sys.argv[1:])
    except BadInputError as err:
        fail(err)
    _hydra_main()


if __name__ == "__main__":
    main()
