"""The Hugging Face hub as seen from this machine: offline mode, reachability, access, the local cache (one
definition).

Checks never wait on a dead network: an offline switch is read at call time (``HF_HUB_OFFLINE`` /
``HF_DATASETS_OFFLINE``, which palrp-bench itself sets for the embedded default), reachability is one short HEAD
request, access to a (gated) repository is one ``huggingface_hub.auth_check`` bounded by a timeout, and cache
lookups use ``huggingface_hub.try_to_load_from_cache`` (no network at all).

Where a model comes from: a source starting with ``/``, ``./``, ``../`` or ``~``, or naming an existing folder, is
local (:func:`is_local_path`); anything else is a hub id (or a timm name for DeiT).
"""
from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["HUB_PROBE_TIMEOUT", "hub_offline", "go_offline", "hub_endpoint", "hub_reachable", "cached_hub_file",
           "hub_cached", "is_local_path", "WEIGHT_FILES", "TOKENIZER_FILES", "hub_model_cached",
           "hub_tokenizer_cached", "hub_access", "ACCESS_OK", "ACCESS_GATED", "ACCESS_NOT_FOUND",
           "ACCESS_UNKNOWN"]

#: seconds the reachability probe (and each access check) waits for an answer
HUB_PROBE_TIMEOUT = 4.0
#: files that hold a checkpoint's weights (single file, sharded index, legacy PyTorch)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
#: files that make a folder / repository a tokenizer (fast tokenizer, its config, SentencePiece, BPE vocabulary)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def hub_offline(repo_type: str = "model") -> bool:
    """True when the user asked for offline mode, read now (the ``huggingface_hub`` constant is read once at
    import, before palrp-bench may set it): ``HF_HUB_OFFLINE`` for everything, ``HF_DATASETS_OFFLINE`` for
    datasets too."""
    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or (
        repo_type == "dataset" and _truthy(os.environ.get("HF_DATASETS_OFFLINE")))


def go_offline() -> None:
    """Switch the hub off for the rest of this process and its workers (the environment variables, and the
    constants ``huggingface_hub`` read at import when it is already imported), so no loader retries a hub that
    did not answer."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import sys

    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None and hasattr(datasets_config, "HF_HUB_OFFLINE"):
        datasets_config.HF_HUB_OFFLINE = True


def hub_endpoint() -> str:
    """The hub address the libraries use (``HF_ENDPOINT`` or huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def hub_reachable(endpoint: str | None = None, timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """One short HEAD request to the hub (honours proxy variables); any HTTP answer counts as reachable."""
    request = urllib.request.Request(endpoint or hub_endpoint(), method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def is_local_path(source: str) -> bool:
    """Whether a model / tokenizer source names a local path rather than a hub id."""
    source = str(source)
    return source.startswith(("/", "./", "../", "~")) or Path(source).expanduser().is_dir()


def cached_hub_file(repo_id: str, filenames: tuple[str, ...] = ("model.safetensors", "pytorch_model.bin"),
                    repo_type: str = "model") -> str | None:
    """Local path of the first of ``filenames`` of ``repo_id`` in the Hugging Face cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    for filename in filenames:
        try:
            path = try_to_load_from_cache(repo_id, filename, repo_type=repo_type)
        except ValueError:  # not a valid repo id (e.g. a path): nothing cached under it
            return None
        if isinstance(path, str):
            return path
    return None


def hub_cached(repo_id: str, repo_type: str = "model") -> bool:
    """Whether some snapshot of ``repo_id`` is in the local Hugging Face cache."""
    from huggingface_hub.constants import HF_HUB_CACHE

    folder = Path(HF_HUB_CACHE) / f"{repo_type}s--{repo_id.replace('/', '--')}"
    return folder.is_dir() and any((folder / "snapshots").glob("*"))


def hub_model_cached(repo_id: str) -> bool:
    """Whether ``repo_id``'s ``config.json`` and complete weights are in the local cache (a sharded checkpoint
    needs its index and every shard the index names)."""
    if cached_hub_file(repo_id, ("config.json",)) is None:
        return False
    weights = cached_hub_file(repo_id, WEIGHT_FILES)
    if weights is None:
        return False
    if weights.endswith(".index.json"):
        try:
            shards = set(json.loads(Path(weights).read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return all(cached_hub_file(repo_id, (shard,)) is not None for shard in shards)
    return True


def hub_tokenizer_cached(repo_id: str) -> bool:
    """Whether a tokenizer of ``repo_id`` is in the local cache."""
    return cached_hub_file(repo_id, TOKENIZER_FILES) is not None


ACCESS_OK, ACCESS_GATED, ACCESS_NOT_FOUND, ACCESS_UNKNOWN = "ok", "gated", "not_found", "unknown"


def hub_access(repo_id: str, repo_type: str = "model", timeout: float = HUB_PROBE_TIMEOUT) -> str:
    """Whether this machine's hub token may read ``repo_id``: ``ACCESS_OK``, ``ACCESS_GATED`` (gated and not
    granted), ``ACCESS_NOT_FOUND`` (no such repository, or private) or ``ACCESS_UNKNOWN`` (no answer within
    ``timeout`` seconds, or another error). One ``huggingface_hub.auth_check`` call, abandoned after ``timeout``
    (the library's session has no timeout of its own). Call it only when the hub is online."""
    from huggingface_hub import auth_check
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    outcome = [ACCESS_UNKNOWN]

    def check() -> None:
        try:
            auth_check(repo_id, repo_type=repo_type)
            outcome[0] = ACCESS_OK
        except GatedRepoError:
            outcome[0] = ACCESS_GATED
        except RepositoryNotFoundError:
            outcome[0] = ACCESS_NOT_FOUND
        except Exception:  # noqa: BLE001 - network trouble of any kind: we do not know
            outcome[0] = ACCESS_UNKNOWN

    worker = threading.Thread(target=check, name=f"hub-access-{repo_id}", daemon=True)
    worker.start()
    worker.join(timeout)
    return outcome[0]
