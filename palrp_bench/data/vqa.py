"""Grounded visual question answering records (``task.kind=vqa_evidence``; docs/data.md, docs/evidence.md "Visual
question answering").

One :class:`VqaSample` per question about an image: the question, the correct answer (``answer``), a wrong one the
model may give instead (``foil``; contrastive explanations and the correctness filter compare their logits) and the
evidence, where in the image the answer lies: a box ``(x0, y0, x1, y1)`` in pixels (corners, ``x`` to the right,
``y`` down; a pixel ``(row, col)`` is inside when ``y0 <= row + 0.5 <= y1`` and ``x0 <= col + 0.5 <= x1``) or a mask of
the image's size. A record knows nothing of models; the task adapter (:mod:`palrp_bench.evaluation.tasks.vqa_evidence`)
sends the image and the evidence mask through the model's own processor, so the evidence lands on the language-model
image tokens whatever the processor's resizing and cropping.

Loaders (registered datasets):

* ``vqa``: JSON lines plus an image folder (``task.path`` = the ``.jsonl`` file; image and mask paths relative to
  its folder): one object per line with ``id``, ``image``, ``question``, ``answer``, ``foil`` (optional) and ``box``
  (``[x0, y0, x1, y1]``) or ``mask`` (a PNG, non-zero = evidence); :func:`save_vqa_jsonl` writes this format;
* ``refcoco``: the RefCOCO / RefCOCO+ / RefCOCOg release as distributed (``task.path`` = a folder with
  ``refs(<split_by>).p``, ``instances.json`` and the COCO images under ``images/``): each referring expression of
  the chosen split becomes a question about its object (``"What is the {expression}?"``, the answer the object's COCO
  category, the foil the category of another object of the image), the evidence its box or its segmentation mask.

Samples whose evidence is empty, whose answer equals their foil, or (``refcoco``) whose image holds no object of
another category are dropped at load and counted (:data:`VQA_DROP_REASONS`).
"""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from ..errors import BadInputError, MissingDataError
from .evidence_common import EvidencePool, check_limit
from .registry import Option, register_dataset

__all__ = ["VqaSample", "VQA_DROP_REASONS", "collect_vqa", "save_vqa_jsonl", "read_vqa_jsonl", "read_refcoco",
           "box_mask", "REFCOCO_QUESTION"]

#: Why a record was dropped at load (the keys of the pool's ``dropped``; the adapter adds its own).
VQA_DROP_REASONS: dict[str, str] = {
    "empty_evidence": "the evidence box or mask covers no pixel of the image",
    "same_answer_foil": "the answer and the foil are the same word (compared case-insensitively)",
    "no_other_category": "refcoco: the image holds no object of another category to contrast the answer with",
}
#: The question a RefCOCO expression becomes (``{expression}``: its first sentence).
REFCOCO_QUESTION = "What is the {expression}?"


@dataclass
class VqaSample:
    """One grounded question (module docstring). The image is a tensor ``[3, H, W]`` in ``[0, 1]`` (``image``) or a
    file (``image_path``), the evidence a ``box`` or a ``mask`` (``[H, W]`` bool, or ``mask_path``)."""

    sample_id: str
    question: str
    answer: str
    foil: str | None = None
    image: torch.Tensor | None = None
    image_path: str | None = None
    box: tuple[float, float, float, float] | None = None
    mask: torch.Tensor | None = None
    mask_path: str | None = None
    meta: dict = field(default_factory=dict)

    def load_image(self):
        """The image as an RGB ``PIL.Image`` (what processors take)."""
        from PIL import Image

        if self.image is not None:
            array = (self.image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
            return Image.fromarray(array, "RGB")
        try:
            with Image.open(self.image_path) as image:
                return image.convert("RGB")
        except (OSError, ValueError) as err:
            raise MissingDataError(f"cannot read the image {self.image_path} of sample {self.sample_id} "
                                   f"({type(err).__name__})", "check the image folder next to the data file") from None

    def size(self) -> tuple[int, int]:
        """``(height, width)`` of the image (a file's header only)."""
        if self.image is not None:
            return int(self.image.shape[1]), int(self.image.shape[2])
        from PIL import Image

        try:
            with Image.open(self.image_path) as image:
                return image.height, image.width
        except (OSError, ValueError) as err:
            raise MissingDataError(f"cannot read the image {self.image_path} of sample {self.sample_id} "
                                   f"({type(err).__name__})", "check the image folder next to the data file") from None

    def evidence_mask(self) -> torch.Tensor:
        """``[H, W]`` bool: the evidence on the image's pixels (the mask, else the box rasterised)."""
        if self.mask is not None:
            return self.mask.bool()
        if self.mask_path is not None:
            from PIL import Image

            try:
                with Image.open(self.mask_path) as image:
                    mask = torch.from_numpy(np.asarray(image.convert("L")) > 0)
            except (OSError, ValueError) as err:
                raise MissingDataError(f"cannot read the mask {self.mask_path} of sample {self.sample_id} "
                                       f"({type(err).__name__})", "check the mask file") from None
            if tuple(mask.shape) != self.size():
                raise BadInputError(f"the mask of sample {self.sample_id} is {tuple(mask.shape)}, its image "
                                    f"{self.size()}", "give a mask of the image's size")
            return mask
        if self.box is None:
            raise BadInputError(f"sample {self.sample_id} has neither a box nor a mask", "give one of them")
        return box_mask(self.box, self.size())


def box_mask(box, size: tuple[int, int]) -> torch.Tensor:
    """``[H, W]`` bool: the pixels whose centres lie in ``box`` ``(x0, y0, x1, y1)`` (module docstring)."""
    x0, y0, x1, y1 = (float(v) for v in box)
    if not (x1 >= x0 and y1 >= y0):
        raise BadInputError(f"box {list(box)} has x1 < x0 or y1 < y0", "give boxes as [x0, y0, x1, y1] (corners)")
    rows = torch.arange(size[0], dtype=torch.float64) + 0.5
    cols = torch.arange(size[1], dtype=torch.float64) + 0.5
    return ((rows >= y0) & (rows <= y1))[:, None] & ((cols >= x0) & (cols <= x1))[None, :]


def _reason(sample: VqaSample) -> str | None:
    if sample.foil is not None and sample.foil.strip().lower() == sample.answer.strip().lower():
        return "same_answer_foil"
    if not bool(sample.evidence_mask().any()):
        return "empty_evidence"
    return None


def collect_vqa(candidates: Iterable[VqaSample | str], limit: int | None, *, what: str, source: str) -> EvidencePool:
    """The first ``limit`` kept records of ``candidates`` (a drop reason string stands for a record dropped by its
    reader), counting the drops (:data:`VQA_DROP_REASONS`); ids must be unique."""
    check_limit(limit)
    kept, dropped, seen = [], {}, set()
    if limit == 0:
        return EvidencePool([], {}, source)
    for candidate in candidates:
        if isinstance(candidate, str):
            dropped[candidate] = dropped.get(candidate, 0) + 1
            continue
        if candidate.sample_id in seen:
            raise BadInputError(f"{what} contains the id {candidate.sample_id!r} twice", "give every record its own id")
        seen.add(candidate.sample_id)
        reason = _reason(candidate)
        if reason is not None:
            dropped[reason] = dropped.get(reason, 0) + 1
            continue
        kept.append(candidate)
        if limit is not None and len(kept) >= limit:
            break
    return EvidencePool(kept, dropped, source)


# ------------------------------------------------------------------------------------------------ JSON lines
def _field(record: dict, name: str, where: str, kind=str):
    if name not in record:
        raise BadInputError(f"{where} has no {name!r}", "give every line id, image, question, answer and a box or mask")
    value = record[name]
    if kind is str and not isinstance(value, str):
        raise BadInputError(f"{where}: {name!r} must be text, got {value!r}", f"write {name} as a string")
    return value


def read_vqa_jsonl(path: str | Path) -> Iterable[VqaSample]:
    """The records of a ``vqa`` JSON-lines file (module docstring), images and masks relative to its folder."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingDataError(f"VQA file {path} does not exist", "point task.path at the .jsonl file")
    root = path.parent
    with path.open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path.name} line {number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise BadInputError(f"{where} is not JSON ({err.msg})", "write one JSON object per line") from None
            box, mask = record.get("box"), record.get("mask")
            if (box is None) == (mask is None):
                raise BadInputError(f"{where} needs exactly one of 'box' and 'mask'",
                                    "give the evidence as box [x0, y0, x1, y1] or mask <png>")
            if box is not None and (not isinstance(box, list) or len(box) != 4):
                raise BadInputError(f"{where}: box must be [x0, y0, x1, y1], got {box!r}", "give the box's corners")
            yield VqaSample(str(_field(record, "id", where, object)), _field(record, "question", where),
                            _field(record, "answer", where), record.get("foil"),
                            image_path=str(root / _field(record, "image", where)),
                            box=None if box is None else tuple(float(v) for v in box),
                            mask_path=None if mask is None else str(root / mask), meta=dict(record.get("meta") or {}))


def save_vqa_jsonl(samples: Iterable[VqaSample], path: str | Path) -> Path:
    """Write records as the ``vqa`` format (module docstring): the JSON lines at ``path``, each image as
    ``images/<id>.png`` and each mask as ``masks/<id>.png`` beside it (a box stays a box)."""
    from PIL import Image

    path = Path(path)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for s in samples:
        record = {"id": s.sample_id, "image": f"images/{s.sample_id}.png", "question": s.question,
                  "answer": s.answer, "foil": s.foil, "meta": s.meta}
        s.load_image().save(path.parent / record["image"])
        if s.box is not None and s.mask is None and s.mask_path is None:
            record["box"] = list(s.box)
        else:
            (path.parent / "masks").mkdir(exist_ok=True)
            record["mask"] = f"masks/{s.sample_id}.png"
            Image.fromarray(s.evidence_mask().numpy().astype(np.uint8) * 255, "L").save(path.parent / record["mask"])
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


#: text tokens of a question under a real chat template (its role markers, the image markers, the question), the
#: plan's estimate; the image's own tokens are the model's (``Architecture.image_tokens``)
QUESTION_TOKENS = 30.0


def _check_vqa(task, options, findings) -> None:
    """The first record parses and its image is there (a malformed file raises the reader's one-line error)."""
    first = next(iter(read_vqa_jsonl(task.path)), None)
    if first is None:
        raise BadInputError(f"{task.path} holds no record", "write one JSON object per line")
    if not Path(first.image_path).is_file():
        raise MissingDataError(f"the image {first.image_path} of record {first.sample_id} does not exist",
                               "keep the image paths relative to the .jsonl file's folder")


@register_dataset("vqa", options=(), local_copy="<data.jsonl>", tokens=QUESTION_TOKENS, check=_check_vqa,
                  needs_path="JSON lines of id, image, question, answer, foil and a box or mask, images beside it "
                             "(docs/data.md)")
def _vqa_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=vqa``: ``task.path`` = the ``.jsonl`` file."""
    if path is None:
        raise MissingDataError("dataset vqa needs task.path (a .jsonl file)", "set task.path=<data.jsonl>")
    return collect_vqa(read_vqa_jsonl(path), limit, what=str(path), source=str(path))


# ------------------------------------------------------------------------------------------------ RefCOCO
def _polygon_mask(polygons, size: tuple[int, int]) -> torch.Tensor:
    """``[H, W]`` bool of COCO polygons (``[[x0, y0, x1, y1, ...], ...]``), drawn on the pixel grid."""
    from PIL import Image, ImageDraw

    canvas = Image.new("L", (size[1], size[0]), 0)
    draw = ImageDraw.Draw(canvas)
    for polygon in polygons:
        if len(polygon) >= 6:
            draw.polygon([(float(polygon[i]), float(polygon[i + 1])) for i in range(0, len(polygon), 2)], fill=1)
    return torch.from_numpy(np.asarray(canvas) > 0)


def read_refcoco(folder: str | Path, split: str = "val", split_by: str = "unc", evidence: str = "box",
                 question: str = REFCOCO_QUESTION, images: str = "images") -> Iterable[VqaSample | str]:
    """The records of a RefCOCO-style release (module docstring): ``refs(<split_by>).p`` (the referring expressions:
    ``ref_id``, ``ann_id``, ``image_id``, ``split``, ``sentences``), ``instances.json`` (COCO: images, annotations with
    ``bbox`` ``[x, y, w, h]`` and ``segmentation``, categories) and ``<images>/<file_name>``. ``evidence``: ``box`` (the
    annotation's box) or ``mask`` (its polygons; a crowd annotation's RLE falls back to the box)."""
    folder = Path(folder).expanduser()
    refs_path, instances_path = folder / f"refs({split_by}).p", folder / "instances.json"
    for needed in (refs_path, instances_path):
        if not needed.is_file():
            raise MissingDataError(f"RefCOCO file {needed} does not exist",
                                   f"point task.path at the folder holding refs({split_by}).p and instances.json")
    if evidence not in ("box", "mask"):
        raise BadInputError(f"unknown refcoco evidence {evidence!r}", "use box or mask")
    with refs_path.open("rb") as f:
        refs = pickle.load(f)  # noqa: S301 - the dataset's own format
    instances = json.loads(instances_path.read_text())
    images_by_id = {int(im["id"]): im for im in instances["images"]}
    annotations = {int(a["id"]): a for a in instances["annotations"]}
    categories = {int(c["id"]): str(c["name"]) for c in instances["categories"]}
    by_image: dict[int, list[dict]] = {}
    for a in instances["annotations"]:
        by_image.setdefault(int(a["image_id"]), []).append(a)
    for ref in refs:
        if ref.get("split") != split:
            continue
        annotation = annotations[int(ref["ann_id"])]
        image = images_by_id[int(ref["image_id"])]
        answer = categories[int(annotation["category_id"])]
        others = [categories[int(a["category_id"])] for a in by_image[int(ref["image_id"])]
                  if categories[int(a["category_id"])] != answer]
        if not others:
            yield "no_other_category"
            continue
        x, y, w, h = (float(v) for v in annotation["bbox"])
        size = (int(image["height"]), int(image["width"]))
        segmentation = annotation.get("segmentation")
        mask = (_polygon_mask(segmentation, size) if evidence == "mask" and isinstance(segmentation, list)
                else None)
        sentence = str(ref["sentences"][0]["sent"]).strip()
        yield VqaSample(f"refcoco-{split_by}-{ref['ref_id']}", question.format(expression=sentence), answer,
                        max(set(others), key=others.count), image_path=str(folder / images / image["file_name"]),
                        box=(x, y, x + w, y + h), mask=mask,
                        meta={"image_id": int(ref["image_id"]), "ann_id": int(ref["ann_id"]), "expression": sentence,
                              "size": list(size)})


def _check_refcoco(task, options, findings) -> None:
    """The release's files are there and the refs file holds expressions of the split (the COCO instances are read
    at load)."""
    folder = Path(task.path).expanduser()
    refs_path = folder / f"refs({options['split_by']}).p"
    for needed in (refs_path, folder / "instances.json"):
        if not needed.is_file():
            raise MissingDataError(f"{needed.name} is not in {folder}",
                                   f"point task.path at the folder holding refs({options['split_by']}).p and "
                                   "instances.json")
    try:
        with refs_path.open("rb") as f:
            refs = pickle.load(f)  # noqa: S301 - the dataset's own format
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        raise BadInputError(f"{refs_path.name} is not a refs pickle ({type(err).__name__})",
                            "use the release's refs file") from None
    if not any(ref.get("split") == options["split"] for ref in refs):
        raise BadInputError(f"{refs_path.name} holds no expression of split {options['split']!r}",
                            "set task.options.split to one of the release's splits (val, testA, testB, test, train)")


@register_dataset("refcoco", check=_check_refcoco,
                  options=(Option("split", "val", "the release's split: val | testA | testB | test | train"),
                           Option("split_by", "unc", "the refs file: refs(<split_by>).p (unc, google, umd)"),
                           Option("evidence", "box", "the referred object's box or its segmentation mask: box | mask"),
                           Option("question", REFCOCO_QUESTION, "the question, {expression} the referring expression")),
                  local_copy="<refcoco folder>", tokens=QUESTION_TOKENS,
                  needs_path="the RefCOCO release (refs(unc).p, instances.json) with the COCO train2014 images in "
                             "images/ (docs/data.md)")
def _refcoco_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=refcoco``: ``task.path`` = the release's folder (options: ``split``, ``split_by``, ``evidence``,
    ``question``)."""
    if path is None:
        raise MissingDataError("dataset refcoco needs task.path (the release's folder)", "set task.path=<folder>")
    records = read_refcoco(path, str(options["split"]), str(options["split_by"]), str(options["evidence"]),
                           str(options["question"]))
    return collect_vqa(records, limit, what=str(path), source=f"{path} ({options['split']})")
