"""Before any job starts: is everything the planned cells need on this machine? (issue "Makefile", "Bad input")

``make table1`` on a laptop must stop at once with ONE line listing what is missing -- a GPU, model weights,
dataset files -- instead of failing an hour in. Checks never touch the network: a hub model or dataset counts
as present when it is in the local Hugging Face cache; when it is not, it is listed as missing if the hub is
switched off (``HF_HUB_OFFLINE=1``) and otherwise left to the loader (which downloads it, or fails with a
one-line :class:`~palrp_bench.errors.MissingDataError`).

Model sources starting with ``/``, ``./``, ``../`` or ``~`` are local paths; anything else is a hub id (or a timm
name for DeiT).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import MissingDataError
from ..hub import hub_cached, hub_offline
from .devices import DevicePlan
from .plan import Cell

#: how to obtain each dataset (printed once when it is missing)
DATASET_HINTS = {
    "imdb": "download the Kaggle 'IMDB Dataset of 50K Movie Reviews' CSV to task.path",
    "imagenet": "put the ImageNet validation set (class sub-folders) at task.path",
    "imagenet_seg": "download gtsegs_ijcv.mat (http://calvin-vision.net/bigstuff/proj-imagenet/data/gtsegs_ijcv.mat) "
                    "to task.path",
}
HINT_GPU = "run on a GPU machine (runner.devices=[cpu] forces the CPU anyway)"
HINT_WEIGHTS = ("finetune the IMDB classifiers with the official recipe (PROTOCOL.md section 2) and point "
                "model.source at them")
HINT_CHECKPOINT = "point model.source at the checkpoint"
HINT_TORCHVISION = "download the torchvision weights once with network access or point model.checkpoint at them"
HINT_HUB = "download hub models / datasets once with network (HF_HUB_OFFLINE=1 forbids it)"
#: hub datasets and the repository they come from
HUB_DATASETS = {"arc": "allenai/ai2_arc", "wikipedia": "wikimedia/wikipedia"}


def is_local_path(source: str) -> bool:
    return source.startswith(("/", "./", "../", "~"))


HINT_EMBEDDED = "recreate the embedded assets with scripts/train_tiny_text.py / scripts/train_tiny_vit.py"


def _embedded_assets(model) -> list[Path]:
    if model.loader == "embedded_text":
        from ..data.synthetic_text import ASSET_DIR

        return [ASSET_DIR / model.source / "model.safetensors", ASSET_DIR / "tokenizer" / "tokenizer.json"]
    if model.loader == "embedded_vit":
        from ..data.synthetic_vision import tiny_vit_paths

        return list(tiny_vit_paths())
    return []


def _model_missing(cell: Cell) -> list[tuple[str, str]]:
    model = cell.model
    missing = [(f"embedded asset {path} ({model.name})", HINT_EMBEDDED)
               for path in _embedded_assets(model) if not path.is_file()]
    if model.loader == "timm" and model.checkpoint is not None:
        if not Path(model.checkpoint).expanduser().is_file():
            missing.append((f"checkpoint {model.checkpoint} ({model.name})", HINT_CHECKPOINT))
    elif model.loader == "torchvision":
        from ..models.torchvision_vit import weights_file

        path = Path(model.checkpoint).expanduser() if model.checkpoint else weights_file(model.source)
        if not path.is_file() and (model.checkpoint or hub_offline()):
            missing.append((f"torchvision weights {path} ({model.name})", HINT_TORCHVISION))
    elif model.loader in ("hf", "timm"):
        sources = [model.source] + ([model.tokenizer] if model.tokenizer else [])
        for source in sources:
            if is_local_path(source):
                if not Path(source).expanduser().exists():
                    finetuned = model.kind.value == "classifier"
                    missing.append((f"{'finetuned weights' if finetuned else 'checkpoint'} {source} ({model.name})",
                                    HINT_WEIGHTS if finetuned else HINT_CHECKPOINT))
            else:
                repo = f"timm/{source}" if model.loader == "timm" else source
                if not hub_cached(repo) and hub_offline():
                    missing.append((f"hub model {repo} ({model.name})", HINT_HUB))
    return missing


def _data_missing(cell: Cell) -> list[tuple[str, str]]:
    task = cell.task
    if task.path is not None:
        if not Path(task.path).expanduser().exists():
            return [(f"dataset file {task.path} ({task.name})", DATASET_HINTS.get(task.dataset, "set task.path"))]
        return []
    repo = HUB_DATASETS.get(task.dataset)
    if repo is not None and not hub_cached(repo, "dataset") and hub_offline("dataset"):
        return [(f"hub dataset {repo} ({task.name})", HINT_HUB)]
    return []


def missing_requirements(cells: list[Cell], devices: DevicePlan) -> list[tuple[str, str]]:
    """Everything the cells need that this machine lacks, as ``(item, how to get it)`` (empty = ready)."""
    missing: list[tuple[str, str]] = []
    gpu_models = sorted({c.model.name for c in cells if c.model.needs_gpu})
    if gpu_models and devices.cpu_by_fallback:
        missing.append((f"a CUDA GPU (for {', '.join(gpu_models)})", HINT_GPU))
    for cell in cells:
        for item in _model_missing(cell) + _data_missing(cell):
            if item not in missing:
                missing.append(item)
    return missing


def check_requirements(cells: list[Cell], devices: DevicePlan, what: str) -> None:
    """Raise one :class:`MissingDataError` listing every missing requirement of ``what`` and, once each, the
    ways to get them."""
    missing = missing_requirements(cells, devices)
    if missing:
        hints = list(dict.fromkeys(h for _, h in missing))
        raise MissingDataError(f"cannot run {what}: missing " + "; ".join(item for item, _ in missing),
                               "; ".join(hints))
