"""Crash-safe file writes: nothing a killed job leaves behind is ever half a file (docs/design.md section 6,
"Resume")."""
from __future__ import annotations

import json
import os
from pathlib import Path


def write_json_atomic(path: Path, data) -> None:
    """Write JSON to a temporary name, fsync, rename (readers never see half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_csv_atomic(df, path: Path, float_format: str = "%.10g") -> None:
    """Write a pandas frame as CSV (no index) to a temporary name, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    df.to_csv(tmp, index=False, float_format=float_format)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
