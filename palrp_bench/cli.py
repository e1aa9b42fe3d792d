"""The ``palrp-bench`` command (Hydra entry point; configs in ``palrp_bench/configs``).

::

    palrp-bench                                             # embedded default: tiny models, all methods, offline
    palrp-bench model=llama3_8b task=mcqa method=pa_lrp     # one cell
    palrp-bench -m model=llama3_8b task=mcqa method=attnlrp,pe_only,pa_lrp
    palrp-bench experiment=table1                           # a paper table
    palrp-bench -m experiment=selftest hydra/launcher=submitit_slurm runner.n_shards=4 runner.shard=0,1,2,3
    palrp-bench mode=plan experiment=table1                 # samples, time, memory, what is missing; writes nothing
    palrp-bench mode=calibrate experiment=table1            # measure the cost constants on this machine
    palrp-bench mode=report run_dir=runs/<stamp>
    palrp-bench --help | --version

A user mistake (unknown name, a key the schema does not have, a value of the wrong type or outside an option's
allowed values, missing data, a GPU that is not there, a shard index out of range, a ``run_dir`` that is a file or
cannot be created, ...) stops the command with ONE line ``palrp-bench: error: <problem> -- <fix>`` and exit code 2;
results already stored stay. The command line is read with Hydra's own override parser and checked against the
structured-config schema (:mod:`palrp_bench.schema`) before Hydra composes anything. ``-m`` / ``--multirun`` may stand anywhere.
Logs go to stderr and, once a run starts, to ``<run_dir>/logs/``; stdout carries only the result tables. Nothing is
written to the run directory before the run starts (the preflight and the settings checks pass): a refused
invocation leaves no ``runs/<stamp>/`` behind and an earlier run's directory as it was (:func:`record_start`,
:class:`RunDirGuard`). Ctrl-C and SIGTERM end it in one line with the command that resumes the run, exit code 130 /
143 (:func:`interrupted`).
"""
from __future__ import annotations

import enum
import logging
import os
import sys
from pathlib import Path

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from .errors import BadInputError, Interrupted, PalrpError
from . import catalog
from .rundir import check_run_dir
from .schema import register_schemas

#: command-line groups checked before Hydra sees them, so an unknown option gives a one-line message
_CHECKED_GROUPS = ("model", "task", "method", "metric", "experiment")
EXIT_USER_ERROR = 2
_MULTIRUN_FLAGS = ("-m", "--multirun")
#: strings OmegaConf reads as booleans
_BOOLEAN_STRINGS = {"true", "false", "yes", "no", "on", "off", "y", "n", "1", "0"}


class RunLogFileHandler(logging.FileHandler):
    """The run's log file (``<run_dir>/logs/palrp-bench.log``), opened by :func:`record_start`; creates its
    folder."""

    def __init__(self, filename, mode: str = "a", encoding=None, delay: bool = False):
        Path(filename).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(filename, mode, encoding, delay)


#: the format of the run's log file when the console handler has none (``hydra.job_logging`` in the config)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class _Invocation:
    """What this process did to the run directory: whether a run started writing to it (:func:`record_start`),
    and what a multirun sweep found there before Hydra created it (:class:`RunDirGuard`)."""

    started = False
    #: (sweep dir, the first of its ancestors that existed, multirun.yaml's bytes before the sweep or None)
    sweep: tuple[Path, Path, bytes | None] | None = None
    #: run directories of the jobs that finished a run (merged and printed their cells), in order
    finished: list[Path] = []


def record_start(run_dir: Path, cfg: DictConfig) -> None:
    """The run starts writing to ``run_dir`` (called by :func:`palrp_bench.app.run`; nothing is written
    there before, so a refused invocation leaves nothing behind): write this invocation's resolved config to
    ``<run_dir>/.hydra/<stamp>/`` (``config.yaml``, ``hydra.yaml``, ``overrides.yaml``, as Hydra would; one folder
    per job of a sweep) and log to ``<run_dir>/logs/palrp-bench.log`` as well as to stderr."""
    import time

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    _Invocation.started = True
    run_dir = Path(run_dir)
    hydra_cfg = HydraConfig.get()
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    if hydra_cfg.mode == RunMode.MULTIRUN:
        stamp += f"-job{hydra_cfg.job.num}"
    folder, n = run_dir / ".hydra" / stamp, 1
    while folder.exists():  # another invocation on this run dir in the same second
        n += 1
        folder = run_dir / ".hydra" / f"{stamp}-{n}"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (folder / "hydra.yaml").write_text(OmegaConf.to_yaml(HydraConfig.instance().cfg))
    (folder / "overrides.yaml").write_text(OmegaConf.to_yaml(hydra_cfg.overrides.task))
    root = logging.getLogger()
    formatter = next((h.formatter for h in root.handlers if h.formatter is not None), logging.Formatter(LOG_FORMAT))
    handler = RunLogFileHandler(run_dir / "logs" / f"{hydra_cfg.job.name}.log")
    handler.setFormatter(formatter)
    root.addHandler(handler)


def _undo_sweep_dir() -> None:
    """A multirun that never started a run leaves the run dir as it found it: Hydra's ``multirun.yaml`` goes back
    to what it was (or away), and the directories Hydra created go if empty (never one holding anything else)."""
    if _Invocation.started or _Invocation.sweep is None:
        return
    sweep, ancestor, before = _Invocation.sweep
    _Invocation.sweep = None
    record = sweep / "multirun.yaml"
    try:
        if before is not None:
            record.write_bytes(before)
        else:
            record.unlink(missing_ok=True)
            folder = sweep
            while folder != ancestor and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent
    except OSError:  # pragma: no cover - left as it is; the user error matters more
        pass


def _last_line(line: str, level: int, code: int) -> None:
    """Print ``line`` to stderr, record it in the run's log file (if logging to one), undo what a sweep that never
    started a run created (:func:`_undo_sweep_dir`), exit with ``code``."""
    print(line, file=sys.stderr)
    record = logging.LogRecord("palrp_bench", level, __file__, 0, line, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    _undo_sweep_dir()
    sys.exit(code)


def fail(err: PalrpError) -> None:
    """The one-line error, exit code 2 (:func:`_last_line`)."""
    _last_line(f"palrp-bench: error: {err}", logging.ERROR, EXIT_USER_ERROR)


class RunDirGuard(Callback):
    """Hydra callback (``hydra.callbacks`` in ``configs/config.yaml``).

    Before Hydra creates anything, a ``run_dir`` that is a file or cannot be created is one line
    (:func:`palrp_bench.rundir.check_run_dir`), not Hydra's traceback. A multirun's sweep directory (the run dir,
    where Hydra writes ``multirun.yaml`` and a cluster launcher its job files) is recorded as found, so a sweep
    that stops before any of its runs started leaves it as it was (:func:`_undo_sweep_dir`)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config)

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(config)
        sweep = Path(str(config.hydra.sweep.dir))
        ancestor = sweep
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        record = sweep / "multirun.yaml"
        _Invocation.sweep = (sweep, ancestor, record.read_bytes() if record.is_file() else None)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        _undo_sweep_dir()  # e.g. a sweep of mode=plan: nothing of it stays
        print_sweep_summary(float(config.report.confidence))

    @staticmethod
    def _check(config: DictConfig) -> None:
        try:
            check_run_dir(Path(str(config.run_dir)))
        except BadInputError as err:
            fail(err)  # SystemExit passes through Hydra's callback wrapper, which turns exceptions into warnings


def print_sweep_summary(confidence: float) -> None:
    """After a sweep whose jobs ran: every cell of its run directories in one summary
    (:func:`palrp_bench.app.sweep_summary`; each job printed its own cells when it finished)."""
    from .app import sweep_summary

    finished, _Invocation.finished = _Invocation.finished, []
    if len(finished) >= 2:
        print(sweep_summary(finished, confidence))


def _fields(schema) -> dict:
    import dataclasses
    import typing

    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def _unwrap_optional(tp):
    import typing

    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp


def check_key(key: str):
    """Reject an override of a key the schema does not have (``runner.batchsize``), listing the valid keys; returns
    the key's type when it is a leaf the schema types (``Protocol``, ``int``, ...), else None."""
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
        elif typing.get_origin(tp) in (dict, typing.Dict, list, typing.List) or tp is typing.Any:
            return None  # free-form or a list below this key (task.options, runner.devices)
        else:
            return tp if len(path) == len(key.split(".")) else None  # deeper than a leaf: Hydra names the key
    return None


def check_value(key: str, tp, value) -> None:
    """Reject a value the schema type of ``key`` cannot take, naming the allowed values (enums) or the type.
    ``value`` is what Hydra's override parser made of the text (str, int, float, bool, None, ...)."""
    if value is None or (isinstance(value, str) and ("${" in value or value == "null")):
        return
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = [m.name for m in tp]
        if str(value) not in allowed:
            raise BadInputError(f"{key}: {str(value)!r} is not an allowed value",
                                f"use one of: {', '.join(allowed)}")
    elif tp is bool:
        if not isinstance(value, bool) and str(value).lower() not in _BOOLEAN_STRINGS:
            raise BadInputError(f"{key}: {str(value)!r} is not a boolean", f"use {key}=true or {key}=false")
    elif tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise BadInputError(f"{key}: {str(value)!r} is not an integer", f"give {key} a whole number, e.g. {key}=8")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInputError(f"{key}: {str(value)!r} is not a number", f"give {key} a number, e.g. {key}=0.95")


def _values(override) -> list:
    """The values an override sets: one, or each value of a ``a,b`` / ``choice(a,b)`` sweep; ``[]`` for range and
    interval sweeps (Hydra generates those values)."""
    from hydra.core.override_parser.types import QuotedString, ValueType

    if not override.is_sweep_override():
        return [override.value()]
    if override.value_type in (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP):
        return [v.text if isinstance(v, QuotedString) else v for v in override.sweep_iterator()]
    return []  # glob, range and interval sweeps: Hydra generates the values


def check_overrides(argv: list[str]) -> None:
    """One-line errors for the common command-line mistakes, before Hydra composes anything. Overrides are read
    with Hydra's own parser (``hydra.core.override_parser``), so sweeps (``method=a,b``, ``choice(...)``) and
    quoting work as in Hydra:

    * an override Hydra cannot parse;
    * an unknown option of a config group (``model=llama9``; every value of a sweep is checked);
    * an unknown key (``runner.batchsize=4``), with the valid keys of that level;
    * a key inside a group that is not selected (``task.path=...`` without ``task=...``);
    * a value outside an option's allowed values (``protocol=corected``) or of the wrong type
      (``runner.batch_size=abc``), naming the allowed values or the type;
    * several values where one run takes one: a list given to a config group, a sweep without ``-m``
      (:func:`_check_several_values`: the fix is the ``-m`` form of the same command).

    ``hydra.*`` / ``hydra/...`` overrides are left to Hydra; arguments without ``=`` are flags or flag values."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    overrides, parsed = [], []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            overrides.append(parser.parse_override(arg))
            parsed.append((arg, overrides[-1]))
        except HydraException as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else "syntax error"
            raise BadInputError(f"cannot read the override {arg!r}: {reason}",
                                "write key=value (quote values with spaces or special characters)") from None
    chosen = {o.key_or_group for o in overrides if not o.is_delete() and o.value() not in ("", None)}
    for o in overrides:
        key = o.key_or_group
        if o.is_hydra_override() or key.startswith("hydra") or "/" in key or o.package is not None or o.is_delete():
            continue
        group = key.split(".", 1)[0]
        if "." in key and group in _CHECKED_GROUPS and group != "experiment" and group not in chosen:
            raise BadInputError(f"{key} is set but no {group} is selected",
                                f"add {group}=<name> so the override has a {group} to apply to")
        if key in _CHECKED_GROUPS:
            for value in _values(o):
                for name in value if isinstance(value, list) else [value]:  # a list is refused below, names first
                    if name not in ("", None) and isinstance(name, (str, int, float)):
                        catalog.check_name(key, str(name).strip())
            continue
        tp = check_key(key)
        if tp is not None:
            for value in _values(o):
                check_value(key, tp, value)
    _check_several_values(argv, parsed)


def sweep_command(argv: list[str], replace: dict[str, str] | None = None) -> str:
    """The ``palrp-bench -m ...`` command line of ``argv`` (flags ``-m`` / ``--multirun`` left out, the arguments of
    ``replace`` swapped for their values), quoted for a POSIX shell."""
    import shlex

    replace = replace or {}
    return shlex.join(["palrp-bench", "-m", *(replace.get(a, a) for a in argv if a not in _MULTIRUN_FLAGS)])


def _check_several_values(argv: list[str], parsed: list[tuple[str, object]]) -> None:
    """One run per value only under ``-m``: a list given to a config group (``method=[attnlrp,pa_lrp]``: Hydra
    would merge the options and run the last one alone) and a sweep without ``-m`` (``method=attnlrp,pa_lrp``:
    Hydra's "Ambiguous value") are refused with the ``-m`` form of the same command."""
    multirun = any(a in _MULTIRUN_FLAGS for a in argv)
    for arg, o in parsed:
        key = o.key_or_group
        if o.is_hydra_override() or key.startswith("hydra") or "/" in key or o.is_delete():
            continue
        if key in _CHECKED_GROUPS and not o.is_sweep_override() and isinstance(o.value(), list):
            names = [str(v) for v in o.value()]
            prefix = arg[:arg.index("=") + 1]
            if len(names) == 1:
                raise BadInputError(f"{arg}: a {key} takes one name, not a list", f"write {prefix}{names[0]}")
            swept = prefix + ",".join(names)
            raise BadInputError(f"{arg}: a {key} takes one name (a list would merge the options into one run)",
                                f"run one job per {key} with -m: {sweep_command(argv, {arg: swept})}")
        if o.is_sweep_override() and not multirun:
            alternative, value = "", arg.split("=", 1)[1]
            if key not in _CHECKED_GROUPS and _is_list_key(key):
                alternative = f"; for one list value write {key}=[{value}]"
            elif key not in _CHECKED_GROUPS and check_key(key) is str:
                alternative = f"; for one value holding commas, quote it: {key}='{value}'"
            raise BadInputError(f"{arg} gives several values, which run one job each only with -m",
                                f"sweep with: {sweep_command(argv)}{alternative}")


def _is_list_key(key: str) -> bool:
    """Whether the schema types ``key`` as a list (``runner.devices``, ``report.gallery_ids``)."""
    import dataclasses
    import typing

    from .schema import PalrpConfig

    node = PalrpConfig
    for part in key.split("."):
        if not dataclasses.is_dataclass(node) or part not in _fields(node):
            return False
        node = _unwrap_optional(_fields(node)[part])
    return typing.get_origin(node) in (list, typing.List)


def checkout_commit() -> str | None:
    """The git commit of the source checkout this package runs from (None for an installed copy, even one whose
    site-packages lies inside some other git repository)."""
    from .runner.manifest import git_state

    root = Path(__file__).resolve().parent.parent
    if not ((root / ".git").exists() and (root / "pyproject.toml").is_file()):
        return None
    state = git_state(root)
    if state["commit"] is None:
        return None
    return state["commit"][:12] + (" with uncommitted changes" if state["dirty"] else "")


def version_text() -> str:
    """``palrp-bench <version>`` (of the installed distribution) plus the git commit when running from a
    checkout."""
    from importlib import metadata

    try:
        version = metadata.version("palrp-bench")
    except metadata.PackageNotFoundError:
        version = "(not installed)"
    commit = checkout_commit()
    return f"palrp-bench {version}" + (f" (git {commit})" if commit else "")


def normalise_argv(argv: list[str]) -> list[str]:
    """``-m`` / ``--multirun`` moved to the front: Hydra's argument parser accepts it only before the overrides."""
    multirun = [a for a in argv if a in _MULTIRUN_FLAGS]
    rest = [a for a in argv if a not in _MULTIRUN_FLAGS]
    return (["--multirun"] if multirun else []) + rest


def defer_keys_of_swept_groups(argv: list[str]) -> list[str]:
    """In a multirun, ``task.options.n=12`` beside a swept ``task=a,b`` becomes ``task.options.n=choice(12)``.

    Hydra composes a multirun's base config without the swept groups, so a plain override of a key inside one of
    them has no node to land on there (its own error is an assertion with a traceback); as a one-value sweep it is
    applied in each job, after the job's group is chosen, with the same value and the same job override line."""
    if "--multirun" not in argv:
        return argv
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = {arg: parser.parse_override(arg) for arg in argv if not arg.startswith("-") and "=" in arg}
    swept = {o.key_or_group for o in parsed.values() if o.key_or_group in _CHECKED_GROUPS and o.is_sweep_override()}
    out = []
    for arg in argv:
        o = parsed.get(arg)
        if (o is not None and "." in o.key_or_group and o.key_or_group.split(".", 1)[0] in swept
                and not o.is_sweep_override() and not o.is_delete() and o.package is None):
            key, _, value = arg.partition("=")
            arg = f"{key}=choice({value})"
        out.append(arg)
    return out


register_schemas()


@hydra.main(version_base="1.3", config_path=str(catalog.CONFIG_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from .app import run

    try:
        outcome = run(cfg, on_start=lambda run_dir: record_start(run_dir, cfg))
    except PalrpError as err:
        fail(err)
    if outcome is not None and outcome.merge is not None:
        _Invocation.finished.append(outcome.run_dir)


def resume_command(argv: list[str], run_dir: Path) -> str:
    """The command line that resumes an invocation of ``argv`` in ``run_dir``: the same arguments (a sweep's ``-m``
    included) with ``run_dir`` set, quoted for a POSIX shell."""
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()

    def sets_run_dir(arg: str) -> bool:
        if arg.startswith("-") or "=" not in arg:
            return False
        try:
            return parser.parse_override(arg).key_or_group == "run_dir"
        except Exception:  # noqa: BLE001 - not an override this check has to understand
            return False

    kept = [a for a in normalise_argv(argv) if not sets_run_dir(a)]
    return shlex.join(["palrp-bench", *(["-m"] if kept[:1] == ["--multirun"] else []),
                       *(a for a in kept if a != "--multirun"), f"run_dir={run_dir}"])


def interrupted(err: KeyboardInterrupt, argv: list[str]) -> None:
    """Ctrl-C or SIGTERM: one line, no traceback, exit ``128 + signum`` (130 / 143). Once a run has started
    (:class:`~palrp_bench.errors.Interrupted` carries its ``run_dir``), the line says how many samples this
    invocation stored and the command that resumes the run (stored samples are skipped, docs/design.md section 6)."""
    import signal

    signum = err.signum if isinstance(err, Interrupted) else int(signal.SIGINT)
    name = signal.Signals(signum).name
    if isinstance(err, Interrupted) and err.run_dir is not None:
        line = (f"palrp-bench: interrupted ({name}) after {err.samples} sample(s); resume with: "
                f"{resume_command(argv, err.run_dir)}")
    else:
        line = f"palrp-bench: interrupted ({name}) before a run started; nothing to resume"
    _last_line(line, logging.WARNING, 128 + signum)


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signum)


def main() -> None:
    """Console-script entry point ``palrp-bench``. SIGINT and SIGTERM raise
    :class:`~palrp_bench.errors.Interrupted`, which ends the invocation in one line (:func:`interrupted`)."""
    import signal

    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    original = sys.argv[1:]
    argv = normalise_argv(original)
    if "--version" in argv:
        print(version_text())
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_interrupted)
    try:
        try:
            check_overrides(argv)
        except BadInputError as err:
            fail(err)
        sys.argv = [sys.argv[0], *defer_keys_of_swept_groups(argv)]
        _hydra_main()
    except KeyboardInterrupt as err:
        interrupted(err, original)


if __name__ == "__main__":  # python -m palrp_bench.cli: run the imported module, whose state the Hydra callback sees
    from palrp_bench.cli import main as _main

    _main()
