"""The Hugging Face hub as seen from this machine: offline mode, reachability, the local cache (one definition).

Checks never wait on a dead network: an offline switch is read at call time (``HF_HUB_OFFLINE`` /
``HF_DATASETS_OFFLINE``, which palrp-bench itself sets for the embedded default), reachability is one short HEAD
request, and cache lookups use ``huggingface_hub.try_to_load_from_cache`` (no network at all).
"""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["HUB_PROBE_TIMEOUT", "hub_offline", "hub_endpoint", "hub_reachable", "cached_hub_file", "hub_cached"]

#: seconds the reachability probe waits for an answer
HUB_PROBE_TIMEOUT = 4.0


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def hub_offline(repo_type: str = "model") -> bool:
    """True when the user asked for offline mode, read now (the ``huggingface_hub`` constant is read once at
    import, before palrp-bench may set it): ``HF_HUB_OFFLINE`` for everything, ``HF_DATASETS_OFFLINE`` for
    datasets too."""
    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or (
        repo_type == "dataset" and _truthy(os.environ.get("HF_DATASETS_OFFLINE")))


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


def cached_hub_file(repo_id: str, filenames: tuple[str, ...] = ("model.safetensors", "pytorch_model.bin"),
                    repo_type: str = "model") -> str | None:
    """Local path of the first of ``filenames`` of ``repo_id`` in the Hugging Face cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    for filename in filenames:
        path = try_to_load_from_cache(repo_id, filename, repo_type=repo_type)
        if isinstance(path, str):
            return path
    return None


def hub_cached(repo_id: str, repo_type: str = "model") -> bool:
    """Whether some snapshot of ``repo_id`` is in the local Hugging Face cache."""
    from huggingface_hub.constants import HF_HUB_CACHE

    folder = Path(HF_HUB_CACHE) / f"{repo_type}s--{repo_id.replace('/', '--')}"
    return folder.is_dir() and any((folder / "snapshots").glob("*"))
