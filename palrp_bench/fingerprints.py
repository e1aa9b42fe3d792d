"""Content fingerprints: what identifies a checkpoint or a data file by its bytes, not its path (the keys of the
user cache, :mod:`palrp_bench.runner.user_cache`, and of a model loader's identity, :mod:`palrp_bench.models.loading`).

:func:`path_fingerprint` hashes, for every file under a path (sorted by relative name): the relative name, the
size, and the bytes of the first and last MiB. Reading 2 MiB per file keeps the hash cheap for a 14 GB checkpoint
while any retraining changes the weight bytes at the start of a safetensors / .pth file (its header and first
tensor) and the sizes or tails of the rest; ``config.json`` and tokenizer files are small, so they are hashed
whole. Modification times are not used: a copy keeps the fingerprint, a checkpoint retrained in place gets a new
one (docs/planning.md, "the user cache").
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["FINGERPRINT_EDGE_BYTES", "digest", "path_fingerprint", "source_fingerprint", "weights_fingerprint",
           "hub_snapshot"]

#: bytes read from the head and from the tail of each file for its fingerprint
FINGERPRINT_EDGE_BYTES = 1 << 20


def digest(data) -> str:
    """sha256 (hex, 20 characters) of the canonical JSON of ``data``."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _file_hash(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= 2 * FINGERPRINT_EDGE_BYTES:
            h.update(f.read())
        else:
            h.update(f.read(FINGERPRINT_EDGE_BYTES))
            f.seek(size - FINGERPRINT_EDGE_BYTES)
            h.update(f.read(FINGERPRINT_EDGE_BYTES))
    return h.hexdigest()


def path_fingerprint(path: str | Path) -> str | None:
    """Content fingerprint of a file or of every file under a folder (module docstring); None if ``path`` does
    not exist. Hidden files and folders (``.cache``, ``.git``) are skipped."""
    root = Path(path).expanduser()
    if root.is_file():
        files = [(root.name, root)]
    elif root.is_dir():
        files = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    else:
        return None
    entries = []
    for name, file in files:
        size = file.stat().st_size
        entries.append((name, size, _file_hash(file, size)))
    return digest(entries)


#: what a checkpoint's identity is made of (:func:`weights_fingerprint`): its config and its weight files
CHECKPOINT_FILES = ("config.json", "*.safetensors", "*.bin", "*.pth", "*.pt")


def weights_fingerprint(folder: str | Path) -> str | None:
    """Content fingerprint of a checkpoint folder's ``config.json`` and weight files only (:data:`CHECKPOINT_FILES`,
    top level; hashed as :func:`path_fingerprint` does), so that a copy with other extra files (a README, the
    tokenizer, ``original/``) is the same checkpoint; None when the folder holds none of them."""
    root = Path(folder).expanduser()
    files = sorted({p for pattern in CHECKPOINT_FILES for p in root.glob(pattern) if p.is_file()})
    if not files:
        return None
    return digest([(p.name, p.stat().st_size, _file_hash(p, p.stat().st_size)) for p in files])


def hub_snapshot(repo_id: str) -> Path | None:
    """The local snapshot folder of a hub repository (its name is the commit), or None."""
    from .hub import cached_hub_file

    found = cached_hub_file(repo_id, ("config.json", "tokenizer_config.json"))
    return Path(found).parent if found else None


def source_fingerprint(source: str | None) -> dict:
    """``{"content": <fingerprint>}`` of a local path or a cached hub snapshot, else ``{"name": source}``."""
    if not source:
        return {"name": None}
    local = Path(source).expanduser()
    if local.exists():
        return {"content": path_fingerprint(local)}
    if "/" in source and not source.startswith((".", "/")):
        snapshot = hub_snapshot(source)
        if snapshot is not None:
            return {"content": path_fingerprint(snapshot)}
    return {"name": source}
