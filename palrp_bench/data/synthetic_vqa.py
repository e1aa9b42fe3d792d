"""Embedded grounded visual questions about the synthetic shapes, and the tiny vision-language model trained on them
(offline stand-ins for RefCOCO-style data and a real VLM; docs/evidence.md "Visual question answering").

Each image is ``64 x 64`` RGB: the low-saturation gradient and clutter of the synthetic vision suite
(:func:`palrp_bench.data.synthetic_vision.draw_background`) with two saturated objects of the vision suite's shapes
(disk, square, triangle, cross), of different shapes and colour families (red, yellow, green, blue), one wholly in each
half of the image. One question is asked about one of them (kinds :data:`VQA_QUESTIONS`):

* ``colour``: ``what colour is the object on the left ?`` -- its colour; the foil the other object's colour. Which
  object is meant is a matter of position;
* ``side``: ``which side is the red object on ?`` -- ``left`` or ``right``; the foil the other side. The content of a
  patch cannot tell, the position has to;
* ``shape``: ``what colour is the triangle ?`` -- its colour; the foil the other object's. Which object is meant is a
  matter of its form, which a model must gather over the object's patches (the tiny model below does not learn it:
  the default kinds are ``colour`` and ``side``; real models take ``task.options.questions=colour,side,shape``).

The evidence is the asked object's mask (its box in ``box``). Samples are deterministic: sample ``i`` of ``(seed,
split)`` is drawn from its own generator seeded with ``(seed, 10 + split, i)`` (the vision suite's streams are
``(seed, split, i)``), so it does not depend on ``n``; its ``sample_id`` is ``synthetic-vqa-{split}-s{seed}-{i:05d}``.

The tiny model (:func:`load_tiny_vlm`): a ``LlavaForConditionalGeneration`` (a CLIP tower with a learned position
table on 8-pixel patches, 64 image tokens, a LLaMA language model with RoPE; :data:`TINY_VLM_ARCH`) with a word-level
tokenizer over :data:`VQA_VOCAB` and CLIP's image processor at the suite's size, trained by
``scripts/train_tiny_vlm.py`` (:mod:`palrp_bench.finetune.tiny_vlm`). Its chat template puts the question first,
``what colour is the object on the left ? <image> answer :`` (the image tokens read the question), and the model
answers with the next word.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..errors import BadInputError, MissingDataError
from .base import check_generator_args
from .evidence_common import EvidencePool
from .registry import Option, register_dataset
from .synthetic_vision import (SYNTHETIC_COLOUR_HUES, SYNTHETIC_COLOURS, SYNTHETIC_SHAPES, SYNTHETIC_SIDES,
                               SYNTHETIC_SPLITS, draw_background, hsv_to_rgb, shape_mask)
from .vqa import VqaSample, collect_vqa

__all__ = ["VQA_QUESTIONS", "VQA_VOCAB", "VQA_IMAGE_SIZE", "make_synthetic_vqa", "build_vqa_tokenizer",
           "build_tiny_vlm_processor", "TINY_VLM_ARCH", "IMAGE_TOKEN", "tiny_vlm_config", "tiny_vlm_dir", "load_tiny_vlm",
           "load_tiny_vlm_report", "VQA_CHAT_TEMPLATE", "check_questions"]

VQA_IMAGE_SIZE = 64
#: the question kinds and their text: ``colour`` and ``side`` ground the object by where it is / what colour it has,
#: ``shape`` by what it is (``{side}``, ``{colour}``, ``{shape}``: the asked object's)
VQA_QUESTIONS: dict[str, str] = {"colour": "what colour is the object on the {side} ?",
                                 "side": "which side is the {colour} object on ?",
                                 "shape": "what colour is the {shape} ?"}
_OBJECT_HALF_SIZE = (8.0, 12.0)
_NOISE_STD = 0.03
_HUE_JITTER = 0.04


ASSET_DIR = Path(__file__).resolve().parent.parent / "assets" / "vision"
TINY_VLM_NAME = "tiny_vlm"
REPORT_NAME = "training_report.json"

#: the tokenizer's special tokens (ids 0..) and LLaVA's image token
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
IMAGE_TOKEN = "<image>"
VQA_WORDS = ("what", "colour", "is", "the", "which", "side", "on", "object", "answer", "?", ":")
#: token -> id of the tiny model's tokenizer
VQA_VOCAB: dict[str, int] = {t: i for i, t in enumerate((*SPECIAL_TOKENS, IMAGE_TOKEN, *VQA_WORDS, *SYNTHETIC_SHAPES,
                                                          *SYNTHETIC_COLOURS, *SYNTHETIC_SIDES))}
#: the tiny model's prompt: the question, then the image, then "answer :" (the image tokens read the question)
VQA_CHAT_TEMPLATE = ("{% for message in messages %}{% for part in message['content'] %}{% if part['type'] != 'image' %}"
                     "{{ part['text'] }} {% endif %}{% endfor %}{% for part in message['content'] %}"
                     "{% if part['type'] == 'image' %}<image> {% endif %}{% endfor %}{% endfor %}"
                     "{% if add_generation_prompt %}answer :{% endif %}")

#: the tiny model's architecture (LLaVA): a CLIP tower on 8-pixel patches (8 x 8 = 64 image tokens), read at its last
#: layer, and a LLaMA language model
TINY_VLM_ARCH = {
    "text": dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
    "vision": dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=2, image_size=VQA_IMAGE_SIZE, patch_size=8),
    "image_mean": (0.5, 0.5, 0.5), "image_std": (0.25, 0.25, 0.25),
}


def _scene(rng: np.random.Generator, size: int) -> tuple[np.ndarray, list[dict]]:
    """One image ``[3, size, size]`` in [0, 1] and its two objects (shape, colour, side, mask, box), one wholly in
    each half, of different shapes and colour families."""
    image = draw_background(rng, size)
    shapes = rng.choice(len(SYNTHETIC_SHAPES), size=2, replace=False)
    colours = rng.choice(len(SYNTHETIC_COLOURS), size=2, replace=False)
    objects = []
    for side, shape_index, colour_index in zip((0, 1), shapes, colours):
        r = float(rng.uniform(*_OBJECT_HALF_SIZE))
        offset = float(rng.uniform(r + 1, size / 2 - r - 1))
        cx = size / 2 + (offset if side else -offset)
        cy = float(rng.uniform(r + 1, size - r - 1))
        shape = SYNTHETIC_SHAPES[int(shape_index)]
        mask = shape_mask(shape, cy, cx, r, size)
        hue = (SYNTHETIC_COLOUR_HUES[int(colour_index)] + rng.uniform(-_HUE_JITTER, _HUE_JITTER)) % 1.0
        colour = hsv_to_rgb(hue, rng.uniform(0.7, 1.0), rng.uniform(0.6, 1.0))
        shade = 1.0 + 0.08 * rng.standard_normal((1, size, size)).astype(np.float32)
        image = np.where(mask[None], colour[:, None, None] * shade, image)
        rows, cols = np.nonzero(mask)
        objects.append({"shape": shape, "colour": SYNTHETIC_COLOURS[int(colour_index)], "side": SYNTHETIC_SIDES[side],
                        "mask": mask, "center": (cy, cx), "half_size": r,
                        "box": (float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1))})
    image = image + _NOISE_STD * rng.standard_normal(image.shape).astype(np.float32)
    return np.clip(image, 0.0, 1.0).astype(np.float32), objects


def check_questions(questions: str) -> tuple[str, ...]:
    """The question kinds of a comma-separated list (:data:`VQA_QUESTIONS`), else a one-line error."""
    kinds = tuple(k.strip() for k in str(questions).split(",") if k.strip())
    unknown = sorted(set(kinds) - set(VQA_QUESTIONS))
    if not kinds or unknown:
        raise BadInputError(f"unknown synthetic question kinds {unknown or [questions]}",
                            f"use a comma-separated list of {', '.join(VQA_QUESTIONS)}")
    return kinds


def make_synthetic_vqa(n: int, seed: int = 0, split: str = "test", questions: str = "colour,side"
                       ) -> list[VqaSample]:
    """``n`` deterministic grounded questions of ``split`` under ``seed`` (module docstring), of the kinds
    ``questions`` (drawn uniformly): :class:`VqaSample` with ``image`` ``[3, 64, 64]`` float32 in [0, 1], ``mask`` the
    asked object's, ``box`` its bounding box, ``meta`` the question kind and both objects (shape, colour, side,
    centre, half size)."""
    check_generator_args(n, seed, split, SYNTHETIC_SPLITS)
    kinds = check_questions(questions)
    samples = []
    for i in range(int(n)):
        rng = np.random.default_rng([int(seed), 10 + SYNTHETIC_SPLITS[split], i])
        image, objects = _scene(rng, VQA_IMAGE_SIZE)
        kind = kinds[int(rng.integers(0, len(kinds)))]
        asked = int(rng.integers(0, 2))
        target, other = objects[asked], objects[1 - asked]
        if kind == "side":
            answer, foil = target["side"], other["side"]
        else:
            answer, foil = target["colour"], other["colour"]
        meta = {"question_kind": kind, "asked": asked, "split": split, "seed": int(seed), "index": i,
                "objects": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in o.items() if k != "mask"}
                            for o in objects]}
        samples.append(VqaSample(f"synthetic-vqa-{split}-s{int(seed)}-{i:05d}",
                                 VQA_QUESTIONS[kind].format(side=target["side"], colour=target["colour"],
                                                            shape=target["shape"]), answer, foil,
                                 image=torch.from_numpy(image), box=target["box"],
                                 mask=torch.from_numpy(target["mask"]), meta=meta))
    return samples


# ------------------------------------------------------------------------------------------------ the tiny model
def build_vqa_tokenizer():
    """The tiny model's word-level fast tokenizer over :data:`VQA_VOCAB` (BOS first, ``<image>`` a special token, the
    chat template :data:`VQA_CHAT_TEMPLATE`)."""
    from .synthetic_text import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(VQA_VOCAB)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    tokenizer.chat_template = VQA_CHAT_TEMPLATE
    return tokenizer


def build_tiny_vlm_processor(tokenizer=None):
    """LLaVA's processor for the tiny model: CLIP's image processor at the suite's size (images kept at 64 x 64,
    normalised with :data:`TINY_VLM_ARCH`'s mean and std) and the tiny tokenizer; ``<image>`` becomes one token per
    patch."""
    from transformers import CLIPImageProcessor, LlavaProcessor

    side = VQA_IMAGE_SIZE
    image_processor = CLIPImageProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side},
                                         image_mean=list(TINY_VLM_ARCH["image_mean"]),
                                         image_std=list(TINY_VLM_ARCH["image_std"]))
    return LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer or build_vqa_tokenizer(),
                          patch_size=TINY_VLM_ARCH["vision"]["patch_size"], vision_feature_select_strategy="default",
                          num_additional_image_tokens=1, chat_template=VQA_CHAT_TEMPLATE)


def tiny_vlm_config():
    """The tiny model's ``LlavaConfig`` (:data:`TINY_VLM_ARCH`, the vocabulary and image token id of
    :data:`VQA_VOCAB`)."""
    from transformers import LlavaConfig

    text = dict(TINY_VLM_ARCH["text"], vocab_size=len(VQA_VOCAB), bos_token_id=VQA_VOCAB["<s>"],
                eos_token_id=VQA_VOCAB["</s>"], pad_token_id=VQA_VOCAB["<pad>"])
    return LlavaConfig(text_config=text, vision_config=dict(TINY_VLM_ARCH["vision"]),
                       image_token_id=VQA_VOCAB[IMAGE_TOKEN], vision_feature_layer=-1,
                       vision_feature_select_strategy="default", projector_hidden_act="gelu",
                       tie_word_embeddings=False)


def tiny_vlm_dir(asset_dir: str | Path | None = None) -> Path:
    """The tiny model's folder (``save_pretrained`` weights and config, its processor, the training report)."""
    return (Path(asset_dir) if asset_dir is not None else ASSET_DIR) / TINY_VLM_NAME


def load_tiny_vlm(asset_dir: str | Path | None = None):
    """``(model, processor)``: the shipped tiny vision-language model (eval mode, CPU, float32) and its processor,
    offline."""
    from transformers import LlavaForConditionalGeneration

    folder = tiny_vlm_dir(asset_dir)
    if not (folder / "model.safetensors").is_file():
        raise MissingDataError(f"tiny vision-language model asset {folder} is missing",
                               "run `python scripts/train_tiny_vlm.py` to (re)create it")
    model = LlavaForConditionalGeneration.from_pretrained(str(folder), local_files_only=True).eval()
    return model, build_tiny_vlm_processor()


def load_tiny_vlm_report(asset_dir: str | Path | None = None) -> dict:
    """The training report the training script wrote next to the weights (held-out accuracy, time, recipe)."""
    path = tiny_vlm_dir(asset_dir) / REPORT_NAME
    if not path.is_file():
        raise MissingDataError(f"training report {path} is missing", "run `python scripts/train_tiny_vlm.py`")
    return json.loads(path.read_text())


#: mean text tokens of a sample through the tiny model's processor (BOS, the question, "answer :"; the image's own
#: tokens are the model's: ``Architecture.image_tokens``), counted over 2000 samples
MEAN_TOKENS = 11.3


@register_dataset("synthetic_vqa",
                  options=(Option("n", 128, "samples"), Option("seed", 0, "generator seed"),
                           Option("split", "test", "train | val | test"),
                           Option("questions", "colour,side", "question kinds: colour, side, shape (comma-separated)")),
                  pool_size=lambda options: options["n"], tokens=MEAN_TOKENS)
def _synthetic_vqa_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=synthetic_vqa``: options ``n`` (128), ``seed`` (0), ``split`` (test | val | train), ``questions``
    (colour,side)."""
    n = int(options["n"]) if limit is None else min(int(options["n"]), int(limit))
    return collect_vqa(make_synthetic_vqa(n, int(options["seed"]), str(options["split"]), str(options["questions"])),
                       None, what="synthetic_vqa", source="synthetic")
