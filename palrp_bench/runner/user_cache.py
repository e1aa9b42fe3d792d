"""The user's palrp-bench cache, shared by every run directory, and the content fingerprints that key it.

Where: ``$PALRP_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/palrp-bench/`` (``~/.cache/palrp-bench/`` when that
is unset too; the test suite points ``PALRP_CACHE_DIR`` at a temporary folder). It holds what is
expensive to find and valid for any run directory with the same model and data: the prediction flags of the
sample selection (``selection/``, :mod:`palrp_bench.runner.selection`) and the batch size that fitted a device
(``batch_size/``, :mod:`palrp_bench.runner.batching`). Deleting the folder is always safe: it is recomputed.

Fingerprints identify *contents*, not paths, so a checkpoint copied elsewhere keeps its entries and a checkpoint
retrained in place gets new ones. :func:`path_fingerprint` hashes, for every file under a path (sorted by relative
name): the relative name, the size, and the bytes of the first and last MiB. Reading 2 MiB per file keeps the
hash cheap for a 14 GB checkpoint (seconds would go to hashing everything) while any retraining changes the
weight bytes at the start of a safetensors / .pth file (its header and first tensor) and the sizes or tails of
the rest; ``config.json`` and tokenizer files are small, so they are hashed whole. Modification times are not
used: a copy keeps the fingerprint.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "user_cache_dir", "path_fingerprint", "model_fingerprint", "data_fingerprint", "digest",
           "weights_fingerprint", "hub_snapshot"]

#: bytes read from the head and from the tail of each file for its fingerprint
FINGERPRINT_EDGE_BYTES = 1 << 20


#: environment variable naming the cache folder itself (wins over ``XDG_CACHE_HOME``)
CACHE_DIR_ENV = "PALRP_CACHE_DIR"


def user_cache_dir() -> Path:
    """``$PALRP_CACHE_DIR``, else ``$XDG_CACHE_HOME/palrp-bench``, else ``~/.cache/palrp-bench`` (not created here)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base).expanduser() / "palrp-bench"


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
    from ..hub import cached_hub_file

    found = cached_hub_file(repo_id, ("config.json", "tokenizer_config.json"))
    return Path(found).parent if found else None


def _source_fingerprint(source: str | None) -> dict:
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


def model_fingerprint(model_cfg) -> str:
    """What determines a model's predictions: its weights and tokenizer by content (local folder, checkpoint
    file, hub snapshot, or the embedded assets), and the loading settings (loader, kind, dtype, quantization).
    A timm name with its pretrained tag identifies published, immutable weights by name."""
    loader = _value(model_cfg.loader)
    identity = {"loader": loader, "kind": _value(model_cfg.kind), "dtype": _value(model_cfg.dtype),
                "quantization": _value(model_cfg.quantization)}
    if loader == "embedded_text":
        from ..data.synthetic_text import ASSET_DIR, tiny_tokenizer_dir

        identity["weights"] = {"content": path_fingerprint(ASSET_DIR / str(model_cfg.source))}
        identity["tokenizer"] = {"content": path_fingerprint(tiny_tokenizer_dir(str(model_cfg.source)))}
    elif loader == "embedded_vit":
        from ..data.synthetic_vision import tiny_vit_paths

        identity["weights"] = {"content": [path_fingerprint(p) for p in tiny_vit_paths()]}
    elif loader == "timm":
        identity["weights"] = (_source_fingerprint(model_cfg.checkpoint) if model_cfg.checkpoint
                               else {"name": model_cfg.source})
        identity["architecture"] = model_cfg.source
    elif loader == "selftest":
        identity["weights"] = {"name": "selftest"}
    else:
        identity["weights"] = _source_fingerprint(model_cfg.source)
        if model_cfg.tokenizer:
            identity["tokenizer"] = _source_fingerprint(model_cfg.tokenizer)
    return digest(identity)


def data_fingerprint(task_cfg) -> str:
    """The data file(s) of a task by content (``task.path``), or the dataset name for hub / generated data, plus
    the loader options (``delay_s`` of the self-test excluded: it only slows a run down)."""
    options = {k: v for k, v in dict(task_cfg.options or {}).items() if k != "delay_s"}
    identity = {"dataset": task_cfg.dataset, "options": options,
                "data": _source_fingerprint(task_cfg.path) if task_cfg.path else {"name": "hub-or-generated"}}
    return digest(identity)


def _value(x):
    return getattr(x, "value", x)
