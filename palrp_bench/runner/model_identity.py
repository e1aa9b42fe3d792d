"""Which model a cell runs: your own checkpoint (``model=hf``) described from its config, and whether a model is the
paper's checkpoint, so that published numbers are compared only with the paper's cell (README "Your own model and
data"; docs/evaluation.md "Published numbers and your own model").

* :func:`resolve_model`: ``model=hf model.source=<folder or hub id>`` gets its kind and its name from the
  checkpoint's ``config.json`` (:func:`palrp_bench.models.checkpoint.describe_checkpoint`) before anything loads (a
  hub id that a shipped config loads keeps that config's name); ``model.kind=`` / ``model.name=`` on the command
  line win. Its dtype is the config's default, float32,
  unless ``model.dtype=`` says otherwise (relevance in bfloat16 is coarse; the paper configs say bfloat16 only
  because the paper ran so).
* :func:`paper_identity`: a model whose name is a shipped config (``tinyllama``, ``deit_tiny``, ...) is the paper's
  model when it loads the paper's weights:

  - the shipped settings as they are (loader, source, checkpoint, kind, quantization, options), or
  - released weights (a hub id, a timm or torchvision name): the same hub id, a local folder whose config and weight
    files (:func:`palrp_bench.fingerprints.weights_fingerprint`) equal those of that hub repository's
    snapshot in the local hub cache, or a weights file whose SHA-256 starts with the hash prefix of the official
    file's URL (``deit_tiny_patch16_224-a1311bcf.pth``; :func:`palrp_bench.models.checkpoint.official_file_prefix`);
  - weights the paper did not release (the IMDB classifiers of Tables 1-2, trained with the official recipe from a
    base model): a sequence classifier with two labels whose architecture (``config.json``: model type, hidden
    size, layers, heads, key-value heads, feed-forward size, vocabulary) is the base model's.

  Anything else is not the paper's model: its published numbers are withheld, with the reason in ``metrics.csv``'s
  ``note`` and the report, and the paper config's dtype does not carry over (``runner/plan.py``: float32 unless
  ``model.dtype=`` is given).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from .. import catalog
from ..errors import PalrpError
from ..hub import is_local_path
from ..schema import ModelConfig, ModelKind

log = logging.getLogger("palrp_bench.runner")

__all__ = ["OWN_MODEL", "resolve_model", "PaperIdentity", "paper_identity", "ARCHITECTURE_FIELDS"]

#: the shipped config of ``model=hf`` (``configs/model/hf.yaml``): its name and kind until the checkpoint says them
OWN_MODEL = "hf"
#: the ``config.json`` fields that fix a decoder's architecture (what an IMDB classifier shares with its base)
ARCHITECTURE_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                       "intermediate_size", "vocab_size")
#: what decides which weights a model config loads (compared with the shipped config of the same name)
_WEIGHT_FIELDS = ("loader", "source", "checkpoint", "kind", "quantization", "options")


def _value(x):
    return getattr(x, "value", x)


def resolve_model(model: ModelConfig) -> ModelConfig:
    """``model=hf``: the kind, name and loader of ``model.source`` (module docstring); other configs unchanged."""
    if model.name != OWN_MODEL and model.kind != ModelKind.auto:
        return model
    from ..models.checkpoint import describe_checkpoint

    found = describe_checkpoint(str(model.source))
    kind = ModelKind(found.kind) if model.kind == ModelKind.auto else model.kind
    name = model.name if model.name != OWN_MODEL else _shipped_name(str(model.source), kind) or found.name
    resolved = replace(model, name=name, kind=kind, paper_name=model.paper_name or name)
    saved = f", saved in {found.saved_dtype}" if found.saved_dtype else ""
    log.info("model %s: %s (%s, %s) from %s; runs in %s%s", name, model.source, found.family, kind.value, found.where,
             _value(resolved.dtype), saved)
    return resolved


def _shipped_name(source: str, kind: ModelKind) -> str | None:
    """The shipped config that loads hub id ``source`` as ``kind`` (``openai-community/gpt2`` -> ``gpt2``): the same
    model keeps one name, and the paper's number where it has one."""
    if is_local_path(source):
        return None
    for name in catalog.available("model"):
        shipped = catalog.load("model", name)
        if shipped.loader == "hf" and str(shipped.source) == source and _value(shipped.kind) == kind.value:
            return name
    return None


@dataclass(frozen=True)
class PaperIdentity:
    """Whether a model config loads the paper's checkpoint of the shipped config ``model`` (``matches``: True,
    False, or None when it cannot be told yet, e.g. the folder is not there), and why."""

    model: str
    matches: bool | None
    reason: str

    def record(self) -> dict:
        """The entry of ``cell.json`` (``paper_checkpoint``) that the merge and the report read
        (:func:`palrp_bench.rundir.published_withheld`)."""
        return {"matches": self.matches, "reason": self.reason}


def _differs(model: ModelConfig, shipped: ModelConfig) -> list[str]:
    return [f for f in _WEIGHT_FIELDS if _value(getattr(model, f)) != _value(getattr(shipped, f))]


def paper_identity(model: ModelConfig) -> PaperIdentity | None:
    """The :class:`PaperIdentity` of ``model`` against the shipped config of its name; None when no shipped config
    has that name (the paper has no number for it). Reads only small files (``config.json``), except for a local
    copy of a hub checkpoint whose snapshot is in the hub cache (both fingerprinted, 2 MiB per file)."""
    if model.name not in catalog.available("model") or model.name == OWN_MODEL:
        return None
    shipped = catalog.load("model", model.name)
    differs = _differs(model, shipped)
    if not differs:
        return PaperIdentity(model.name, True, "the shipped configuration")
    names = {f: _value(getattr(shipped, f)) for f in _WEIGHT_FIELDS}
    fixed = [f for f in differs if f not in ("source", "checkpoint")]
    if fixed:
        f = fixed[0]
        return PaperIdentity(model.name, False, f"not the paper's model: model.{f}={_value(getattr(model, f))}, "
                                                f"the paper's {names[f]}")
    source, checkpoint = str(model.source), model.checkpoint
    try:
        if shipped.loader in ("timm", "torchvision"):
            return _official_file(model, shipped)
        if not is_local_path(str(shipped.source)):
            return _hub_copy(model.name, source, str(shipped.source))
        return _finetuned(model, shipped)
    except (OSError, ValueError, PalrpError) as err:
        return PaperIdentity(model.name, None, f"cannot tell whether {checkpoint or source} is the paper's checkpoint "
                                               f"({str(err).splitlines()[0] if str(err) else type(err).__name__})")


def _official_file(model: ModelConfig, shipped: ModelConfig) -> PaperIdentity:
    """timm / torchvision: the same architecture name and, when a weights file is given, the official file's hash."""
    from ..models.checkpoint import official_file_prefix

    if str(model.source) != str(shipped.source):
        return PaperIdentity(model.name, False, f"not the paper's model: model.source={model.source}, the paper's "
                                                f"{shipped.source}")
    if shipped.loader == "timm":
        from timm.models import get_pretrained_cfg

        from ..models.loading import timm_tagged

        cfg = get_pretrained_cfg(timm_tagged(str(shipped.source)))
        url = cfg.url if cfg is not None else None
    else:
        from ..models.torchvision_vit import weights_of

        url = weights_of(str(shipped.source))[1].url
    prefix = official_file_prefix(url)
    path = Path(str(model.checkpoint)).expanduser()
    if prefix is None or not path.is_file():
        return PaperIdentity(model.name, None, f"cannot tell whether {path} is the paper's weights file"
                                               + ("" if path.is_file() else " (no such file)"))
    if _sha256(str(path), path.stat().st_size, path.stat().st_mtime_ns).startswith(prefix):
        return PaperIdentity(model.name, True, f"{path.name} is the official weights file ({Path(url).name})")
    return PaperIdentity(model.name, False, f"not the paper's checkpoint: {path.name} is not the official weights "
                                            f"file {Path(url).name} (its SHA-256 does not start with {prefix})")


@lru_cache(maxsize=16)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    from ..models.checkpoint import file_sha256

    return file_sha256(path)


def _hub_copy(name: str, source: str, repo: str) -> PaperIdentity:
    """Released on the hub: the same id, or a local copy with the config and weights of the cached snapshot."""
    from ..fingerprints import hub_snapshot, weights_fingerprint

    if not is_local_path(source):
        return PaperIdentity(name, False, f"not the paper's checkpoint: model.source={source}, the paper's {repo}")
    snapshot = hub_snapshot(repo)
    if snapshot is None:
        return PaperIdentity(name, False, f"not known to be the paper's checkpoint: {source} is a local folder and "
                                          f"{repo} is not in the hub cache to compare it with (pass "
                                          f"model.source={repo}, or download it once)")
    mine, theirs = weights_fingerprint(source), weights_fingerprint(snapshot)
    if mine is not None and mine == theirs:
        return PaperIdentity(name, True, f"{source} holds the config and weights of {repo}")
    return PaperIdentity(name, False, f"not the paper's checkpoint: the config and weights in {source} differ from "
                                      f"{repo}'s")


def _known_architecture(base: str) -> dict | None:
    """``config.json`` fields of the hub model ``base``: the local hub cache's, else the table of known
    architectures shipped for the cost model (``assets/cost_defaults.yaml``); nothing is downloaded."""
    from types import SimpleNamespace

    from ..models.loading import hf_config_json

    found = hf_config_json(SimpleNamespace(source=base, base_model=None, tokenizer=None), _shipped_architectures())
    return found[0] if found is not None else None


@lru_cache(maxsize=1)
def _shipped_architectures() -> dict:
    from importlib import resources

    import yaml

    text = (resources.files("palrp_bench") / "assets" / "cost_defaults.yaml").read_text()
    return dict(yaml.safe_load(text).get("architectures") or {})


def _finetuned(model: ModelConfig, shipped: ModelConfig) -> PaperIdentity:
    """Weights the paper did not release: a two-label classifier of the base model's architecture."""
    from ..models.checkpoint import config_fields

    source = str(model.source)
    if not is_local_path(source):
        return PaperIdentity(model.name, False, f"not the paper's checkpoint: model.source={source} is a hub "
                                                "model, the paper's is a classifier finetuned from "
                                                f"{shipped.base_model} with the official recipe")
    fields = config_fields(source)
    if fields is None:
        return PaperIdentity(model.name, None, f"cannot tell whether {source} is the paper's checkpoint: no "
                                               "config.json there")
    base = _known_architecture(str(shipped.base_model)) if shipped.base_model else None
    if base is None:
        return PaperIdentity(model.name, None, f"cannot tell whether {source} is the paper's checkpoint: the "
                                               f"architecture of {shipped.base_model} is unknown here")
    base = {**base, "num_key_value_heads": base.get("num_key_value_heads", base.get("num_attention_heads"))}
    mine = {**fields, "num_key_value_heads": fields.get("num_key_value_heads", fields.get("num_attention_heads"))}
    wrong = [f for f in ARCHITECTURE_FIELDS if f in base and mine.get(f) != base[f]]
    labels = len(fields.get("id2label") or {}) or fields.get("num_labels")
    if wrong:
        f = wrong[0]
        return PaperIdentity(model.name, False, f"not the paper's checkpoint: {source} has {f}={mine.get(f)}, "
                                                f"{shipped.base_model} has {base[f]}")
    if labels not in (None, 2):
        return PaperIdentity(model.name, False, f"not the paper's checkpoint: {source} has {labels} labels, the "
                                                "paper's IMDB classifier 2")
    return PaperIdentity(model.name, True, f"a classifier of {shipped.base_model}'s architecture (finetuned weights "
                                           "were not released; trained with the official recipe)")
