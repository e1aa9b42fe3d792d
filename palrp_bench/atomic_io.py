"""Crash-safe file writes: nothing a killed job leaves behind is ever half a file (docs/design.md section 6,
"Resume")."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary name beside ``path`` to write; on leaving, rename it to ``path`` (readers never see half a
    file). Interrupted (an error, Ctrl-C, SIGTERM) it is removed, so a stopped run leaves no stray file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data) -> None:
    """Write JSON to a temporary name, fsync, rename (:func:`replacing`)."""
    with replacing(path) as tmp, open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())


def write_csv_atomic(df, path: Path, float_format: str = "%.10g") -> None:
    """Write a pandas frame as CSV (no index) to a temporary name, fsync, rename (:func:`replacing`)."""
    with replacing(path) as tmp:
        df.to_csv(tmp, index=False, float_format=float_format)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
