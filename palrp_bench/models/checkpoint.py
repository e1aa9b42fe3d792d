"""What a checkpoint is, read from its ``config.json`` before any weight loads: ``model=hf model.source=<folder or
hub id>`` (README "Your own model and data").

* :func:`describe_checkpoint`: the kind (``causal``, ``classifier``, ``masked_lm``, ``seq2seq``, ``vlm``: a
  vision-language ``*ForConditionalGeneration``, ``vit``), the family (a ``transformers`` ``model_type`` a twin
  covers, or a timm architecture), the dtype the weights were saved in and
  the name a run gives the model (:func:`derived_name`). A Hugging Face ``config.json`` names the head in
  ``architectures`` (``LlamaForSequenceClassification`` -> ``classifier``; the suffixes of
  :data:`palrp_bench.models.text_twin.HEADS`); a timm checkpoint (``timm.models.push_to_hf_hub`` /
  ``save_for_hf``: ``architecture`` and ``pretrained_cfg``) is a ViT. A family no twin covers, a head no twin
  explains, or a config that names none is refused in one line before anything loads.
* :func:`official_file_prefix`: the SHA-256 prefix a library's download URL gives for the official weights file of a
  timm / torchvision model (``deit_tiny_patch16_224-a1311bcf.pth``: the torch hub naming convention, checked by
  ``torch.hub.download_url_to_file(hash_prefix=...)``), which identifies a local copy of that file.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ..errors import BadInputError, MissingDataError, UnsupportedModelError
from ..hub import is_local_path

__all__ = ["CheckpointDescription", "describe_checkpoint", "derived_name", "kind_of_config", "read_config",
           "official_file_prefix", "file_sha256"]

#: folder names that say which save of a training run it is, not what the model is: the name then includes the
#: parent folder's (``train_tinyllama_imdb/best`` -> ``train_tinyllama_imdb_best``)
GENERIC_FOLDER = re.compile(r"^(best|final|last|latest|model|output|checkpoint[-_]?\d*|snapshot|\w{40})$")


@dataclass(frozen=True)
class CheckpointDescription:
    """``kind``: the head (:data:`palrp_bench.schema.ModelKind` values); ``family``: ``model_type`` or the timm
    architecture; ``saved_dtype``: what ``config.json`` says the weights are stored in (None: unsaid);
    ``name``: :func:`derived_name`; ``where``: the file the description was read from."""

    source: str
    kind: str
    family: str
    saved_dtype: str | None
    name: str
    where: str


def derived_name(source: str) -> str:
    """The name a run gives a model known only by its source: a local folder's name (with its parent's when the
    folder's own says only which save it is, :data:`GENERIC_FOLDER`), or a hub id's repository name; characters
    other than letters, digits, ``.``, ``_`` and ``-`` become ``_`` (the name is a folder of the run directory)."""
    source = str(source).rstrip("/")
    if is_local_path(source) or source.count("/") > 1:  # a hub id is <name> or <owner>/<name>
        path = Path(source).expanduser().resolve()
        parts = [path.name]
        if GENERIC_FOLDER.match(path.name) and path.parent.name:
            parts.insert(0, path.parent.name)
            if path.parent.name == "snapshots":  # a hub cache snapshot: models--org--name/snapshots/<commit>
                parts = [path.parent.parent.name.split("--")[-1]]
        name = "_".join(parts)
    else:
        name = source.split("/")[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "model"


def read_config(source: str) -> tuple[dict, str]:
    """``(config.json fields, where they were read)`` of a local folder or hub id (the hub cache first; the file
    alone is fetched when the hub may be asked); a one-line :class:`MissingDataError` when there is none."""
    from .loading import _downloaded_config, hf_config_json

    try:
        found = hf_config_json(SimpleNamespace(source=source, base_model=None, tokenizer=None))
    except ValueError as err:  # json.JSONDecodeError
        raise MissingDataError(f"config.json of {source} is not readable JSON ({err})",
                               "save the checkpoint again (save_pretrained / save_for_hf)") from None
    if found is not None:
        return found
    if is_local_path(source):
        folder = Path(source).expanduser()
        what = "is not a folder" if not folder.is_dir() else "holds no config.json"
        raise MissingDataError(f"model.source {source} {what}",
                               "point model.source at a folder saved with save_pretrained (transformers) or "
                               "timm's save_for_hf, or at a hub id")
    fields = _downloaded_config(source)
    if fields is None:
        raise MissingDataError(f"cannot read config.json of {source!r}: not in the local hub cache and the hub "
                               "cannot be asked (offline, unreachable, gated or no such repository)",
                               "download it once with network access (hf download <id>), or pass its local folder")
    return fields, f"config.json of {source} (hub)"


def kind_of_config(fields: dict, source: str) -> tuple[str, str]:
    """``(kind, family)`` of a checkpoint's ``config.json`` fields (module docstring); one-line refusals."""
    from .registry import TWINS, discover, positional_kind_of
    from .text_twin import HEADS

    if "model_type" not in fields and isinstance(fields.get("architecture"), str):
        import timm

        arch = fields["architecture"]
        if not timm.is_model(arch):
            raise UnsupportedModelError(f"{source} is a timm checkpoint of {arch!r}, which this timm does not know",
                                        "upgrade timm or pass a checkpoint of a timm ViT / DeiT / Eva")
        return "vit", arch
    model_type = str(fields.get("model_type", ""))
    if not model_type:
        raise BadInputError(f"config.json of {source} names no model_type (nor a timm architecture)",
                            "save the model with save_pretrained (transformers) or timm's save_for_hf")
    if positional_kind_of(model_type) is None:
        discover()
        raise UnsupportedModelError(f"{source} is a {model_type!r} model, which no LRP twin covers",
                                    "supported families: " + "; ".join(cls.family() for cls in TWINS))
    heads = [a for a in fields.get("architectures") or [] if isinstance(a, str)]
    kinds = [kind for a in heads for suffix, kind in HEADS.items() if a.endswith(suffix)]
    if kinds[:1] == ["seq2seq"] and not fields.get("is_encoder_decoder"):
        from .vlm import VLM_SPECS

        # a decoder-only *ForConditionalGeneration: a vision-language model (Qwen2-VL, LLaVA, Gemma 3), else text
        vlm = any(model_type in spec.model_types for spec in VLM_SPECS.values())
        kinds[0] = "vlm" if vlm else "causal"
    if not kinds:
        named = f"names the head {heads[0]}" if heads else "names no head (architectures)"
        raise BadInputError(f"config.json of {source} {named}, not one palrp-bench explains",
                            "set model.kind=causal | classifier | masked_lm | seq2seq | vlm to load it with that head")
    return kinds[0], model_type


def describe_checkpoint(source: str) -> CheckpointDescription:
    """What ``source`` (a local folder or hub id) holds, from its ``config.json`` alone (module docstring)."""
    if not str(source).strip():
        raise BadInputError("model=hf needs the checkpoint to load",
                            "add model.source=<folder saved with save_pretrained, or a hub id>")
    fields, where = read_config(str(source))
    kind, family = kind_of_config(fields, str(source))
    saved = fields.get("dtype") or fields.get("torch_dtype")
    return CheckpointDescription(str(source), kind, family, str(saved) if saved else None, derived_name(source),
                                 where)


def official_file_prefix(url: str | None) -> str | None:
    """The SHA-256 prefix in an official weights URL named ``<name>-<hex prefix>.<ext>`` (torch hub convention), or
    None."""
    if not url:
        return None
    found = re.search(r"-([0-9a-f]{8,64})\.(?:pth|pt|bin)$", Path(url).name)
    return found.group(1) if found else None


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def config_fields(path: str | Path) -> dict | None:
    """A folder's ``config.json`` fields, or None when it has none (or it is not JSON)."""
    file = Path(path).expanduser() / "config.json"
    try:
        return json.loads(file.read_text()) if file.is_file() else None
    except (OSError, ValueError):
        return None
