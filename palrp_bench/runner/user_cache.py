"""The user's palrp-bench cache, shared by every run directory, and the content fingerprints that key it.

Where: ``$PALRP_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/palrp-bench/`` (``~/.cache/palrp-bench/`` when that
is unset too; the test suite points ``PALRP_CACHE_DIR`` at a temporary folder). It holds what is
expensive to find and valid for any run directory with the same model and data: the prediction flags of the
sample selection (``selection/``, :mod:`palrp_bench.runner.selection`) and the batch size that fitted a device
(``batch_size/``, :mod:`palrp_bench.runner.batching`). Deleting the folder is always safe: it is recomputed.

Fingerprints identify *contents*, not paths (:mod:`palrp_bench.fingerprints`): a model's is its loader's identity
(:meth:`palrp_bench.models.loading.LoaderSpec.identity`) with its loading settings, a task's the content of
``task.path`` (or the dataset's name) with its options.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..fingerprints import digest, source_fingerprint

__all__ = ["CACHE_DIR_ENV", "user_cache_dir", "model_fingerprint", "data_fingerprint"]

#: environment variable naming the cache folder itself (wins over ``XDG_CACHE_HOME``)
CACHE_DIR_ENV = "PALRP_CACHE_DIR"


def user_cache_dir() -> Path:
    """``$PALRP_CACHE_DIR``, else ``$XDG_CACHE_HOME/palrp-bench``, else ``~/.cache/palrp-bench`` (not created here)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base).expanduser() / "palrp-bench"


def model_fingerprint(model_cfg) -> str:
    """What determines a model's predictions: its loader's identity of the weights and tokenizer (by content where
    they are files: a local folder, a checkpoint, a hub snapshot, the embedded assets; by name where a name
    identifies published, immutable weights), and the loading settings (loader, kind, dtype, quantization)."""
    from ..models.loading import loader_spec

    loader = _value(model_cfg.loader)
    identity = {"loader": loader, "kind": _value(model_cfg.kind), "dtype": _value(model_cfg.dtype),
                "quantization": _value(model_cfg.quantization)}
    identity.update(loader_spec(loader).identity(model_cfg))
    return digest(identity)


def data_fingerprint(task_cfg) -> str:
    """The data file(s) of a task by content (``task.path``), or the dataset name for hub / generated data, plus
    the loader options that can change a sample's numbers (:meth:`~palrp_bench.data.registry.DatasetSpec.
    result_options`: the self-test's ``delay_s`` only slows a run down)."""
    from ..data.registry import dataset_spec

    options = dataset_spec(task_cfg.dataset).result_options(task_cfg.options)
    identity = {"dataset": task_cfg.dataset, "options": options,
                "data": source_fingerprint(task_cfg.path) if task_cfg.path else {"name": "hub-or-generated"}}
    return digest(identity)


def _value(x):
    return getattr(x, "value", x)
