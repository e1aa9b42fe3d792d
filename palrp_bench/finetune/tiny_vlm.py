"""Train the tiny vision-language model of the embedded VQA suite and ship it as a package asset.

A ``LlavaForConditionalGeneration`` (:data:`palrp_bench.data.synthetic_vqa.TINY_VLM_ARCH`: a 2-layer CLIP tower on
8-pixel patches with a learned position table, a 2-layer LLaMA language model of hidden size 64) learns to answer the
grounded questions of :func:`palrp_bench.data.synthetic_vqa.make_synthetic_vqa` (kinds ``colour`` and ``side``) with
the next word after its prompt ``<question> <image> answer :``. The images go through CLIP's image processor's own
steps (8-bit rounding, normalisation) done on tensors, which equal the processor's output (tested), so the shipped
processor feeds the model what it was trained on.

Three parts of the recipe matter (docs/evaluation.md "The embedded suites" gives the runs without them):

* the tower's learned position table starts from 2-D sin-cos values (CLS row 0), as the tiny ViT's
  (:func:`palrp_bench.finetune.tiny_vit.init_pos_embed_sincos`): from its random start the model did not learn where
  an object is;
* the question comes before the image, so that the image tokens can read it;
* an auxiliary loss at the image tokens that the asked object covers (their centre inside its mask): their next-token
  logits are trained on the answer too (weight :data:`RECIPE` ``aux_weight``), which teaches each image token to know
  whether the question asks about it.

Training is seeded and single-threaded, on a pool of ``pool`` training samples (split ``train``) drawn in random order,
with the cross-entropy of the answer word at the last position. The held-out report (split ``test``, 500 samples of
all three kinds) counts the greedy answers (top-1 over the vocabulary) and the samples with ``logit(answer) >
logit(foil)`` (the correctness filter of ``task=vqa_evidence``), per question kind; chance is 1/2 for every kind and
both counts (the answer is one of two colours or sides). The ``shape`` kind is not trained (its accuracy shows it).

    python scripts/train_tiny_vlm.py            # about 2.5 minutes of one CPU thread
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..data import synthetic_vqa as sv

#: optimisation steps, batch size, peak learning rate, warm-up steps, training pool, question kinds trained, weight
#: of the auxiliary loss at the asked object's image tokens
RECIPE = {"steps": 1500, "batch_size": 32, "lr": 1e-3, "warmup": 50, "weight_decay": 0.01, "pool": 6000,
          "questions": "colour,side", "aux_weight": 1.0}
HELDOUT = 500


def image_pixels(images: torch.Tensor) -> torch.Tensor:
    """``[n, 3, 64, 64]``: images in [0, 1] as the tiny processor gives them (8-bit rounding, normalisation)."""
    mean = torch.tensor(sv.TINY_VLM_ARCH["image_mean"])[:, None, None]
    std = torch.tensor(sv.TINY_VLM_ARCH["image_std"])[:, None, None]
    return ((images.clamp(0, 1) * 255).round() / 255 - mean) / std


def image_token_grid() -> int:
    """Image tokens per side (patches of the CLIP tower)."""
    return sv.VQA_IMAGE_SIZE // sv.TINY_VLM_ARCH["vision"]["patch_size"]


def token_answers(sample) -> torch.Tensor:
    """``[tokens]``: the answer's id at the image tokens whose centre the asked object's mask covers, -100 elsewhere
    (the auxiliary target, module docstring)."""
    side = image_token_grid()
    cell = sv.VQA_IMAGE_SIZE // side
    centres = torch.arange(side) * cell + cell // 2
    out = torch.full((side, side), -100, dtype=torch.long)
    out[sample.mask[centres][:, centres]] = sv.VQA_VOCAB[sample.answer]
    return out.reshape(-1)


def init_position_table_sincos(model) -> None:
    """Start the tower's learned position table from 2-D sin-cos patch positions (CLS row 0); it is trained like any
    weight (module docstring)."""
    from timm.layers import build_sincos2d_pos_embed

    table = model.model.vision_tower.embeddings.position_embedding.weight
    side = image_token_grid()
    with torch.no_grad():
        table.zero_()
        table[1:] = build_sincos2d_pos_embed([side, side], dim=table.shape[-1]).reshape(-1, table.shape[-1])


class Batches:
    """Model inputs of samples by index: prompt ids (the tiny processor's text, one per question), images, the answer
    and foil ids and the auxiliary targets."""

    def __init__(self, samples, processor):
        self.samples = samples
        tokens = image_token_grid() ** 2
        self.prompts: dict[str, list[int]] = {}
        for s in samples:
            if s.question not in self.prompts:
                text = processor.apply_chat_template(
                    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": s.question}]}],
                    add_generation_prompt=True, tokenize=False)
                text = text.replace(sv.IMAGE_TOKEN, sv.IMAGE_TOKEN * tokens)
                self.prompts[s.question] = processor.tokenizer(text)["input_ids"]
        self.pixels = image_pixels(torch.stack([s.image for s in samples]))
        self.answer = torch.tensor([sv.VQA_VOCAB[s.answer] for s in samples])
        self.foil = torch.tensor([sv.VQA_VOCAB[s.foil] for s in samples])
        self.token_answers = torch.stack([token_answers(s) for s in samples])

    def inputs(self, index: torch.Tensor) -> dict:
        ids = [self.prompts[self.samples[int(i)].question] for i in index]
        t = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), t), sv.VQA_VOCAB["<pad>"], dtype=torch.long)
        mask = torch.zeros((len(ids), t), dtype=torch.long)
        for j, x in enumerate(ids):
            input_ids[j, :len(x)] = torch.tensor(x)
            mask[j, :len(x)] = 1
        return {"input_ids": input_ids, "attention_mask": mask, "pixel_values": self.pixels[index]}

    def logits(self, model, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``([n, V] next-word logits after each prompt, [n, tokens, V] logits at the image tokens)``."""
        inputs = self.inputs(index)
        logits = model(**inputs).logits
        image = inputs["input_ids"] == sv.VQA_VOCAB[sv.IMAGE_TOKEN]
        return (logits[torch.arange(len(index)), inputs["attention_mask"].sum(1) - 1],
                logits[image].reshape(len(index), -1, logits.shape[-1]))


def evaluate(model, processor, n: int = HELDOUT, seed: int = 0) -> dict:
    """Held-out accuracy on split ``test`` (module docstring), overall and per question kind."""
    samples = sv.make_synthetic_vqa(n, seed, "test", questions=",".join(sv.VQA_QUESTIONS))
    batches = Batches(samples, processor)
    with torch.no_grad():
        logits = torch.cat([batches.logits(model, torch.arange(i, min(i + 125, n)))[0] for i in range(0, n, 125)])
    top1 = logits.argmax(-1) == batches.answer
    contrast = logits.gather(1, batches.answer[:, None])[:, 0] > logits.gather(1, batches.foil[:, None])[:, 0]
    report = {"split": "test", "seed": seed, "n": n, "per_kind": {}}
    for kind in sv.VQA_QUESTIONS:
        keep = torch.tensor([s.meta["question_kind"] == kind for s in samples])
        report["per_kind"][kind] = {"n": int(keep.sum()), "top1_accuracy": round(float(top1[keep].float().mean()), 4),
                                    "contrast_accuracy": round(float(contrast[keep].float().mean()), 4)}
    return report


def train(out_dir: str | Path | None = None, steps: int | None = None, pool: int | None = None, seed: int = 0,
          progress: bool = True) -> dict:
    """Train, evaluate and save the tiny model with its report to ``out_dir`` (default: the package's asset folder);
    returns the report."""
    from transformers import LlavaForConditionalGeneration

    recipe = dict(RECIPE, **({"steps": steps} if steps else {}), **({"pool": pool} if pool else {}))
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    start = time.time()
    processor = sv.build_tiny_vlm_processor()
    samples = sv.make_synthetic_vqa(recipe["pool"], seed, "train", questions=recipe["questions"])
    batches = Batches(samples, processor)
    made = time.time() - start
    model = LlavaForConditionalGeneration(sv.tiny_vlm_config())
    init_position_table_sincos(model)
    model.config._attn_implementation = "sdpa"
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])

    def rate(step: int) -> float:
        warm = min(1.0, (step + 1) / recipe["warmup"])
        return warm * 0.5 * (1 + math.cos(math.pi * min(1.0, step / recipe["steps"])))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in tqdm(range(recipe["steps"]), desc="tiny VLM", disable=not progress):
        index = torch.randint(0, len(samples), (recipe["batch_size"],), generator=generator)
        last, image = batches.logits(model, index)
        loss = torch.nn.functional.cross_entropy(last, batches.answer[index])
        loss = loss + recipe["aux_weight"] * torch.nn.functional.cross_entropy(
            image.reshape(-1, image.shape[-1]), batches.token_answers[index].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
    model.eval()
    report = {"architecture": "LlavaForConditionalGeneration",
              "task": "synthetic grounded VQA: the colour of the object on one side, the side of the object of one "
                      "colour (two objects); the answer word after the prompt",
              "heldout": evaluate(model, processor), "recipe": recipe,
              "train": {"final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 5),
                        "seconds": round(time.time() - start, 1), "seconds_generating": round(made, 1), "threads": 1,
                        "torch": torch.__version__, "machine": platform.machine()},
              "parameters": sum(p.numel() for p in model.parameters())}
    folder = sv.tiny_vlm_dir(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / sv.REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=None, help="asset folder (default: palrp_bench/assets/vision)")
    parser.add_argument("--steps", type=int, default=None, help=f"optimisation steps (default {RECIPE['steps']})")
    parser.add_argument("--pool", type=int, default=None, help=f"training samples (default {RECIPE['pool']})")
    args = parser.parse_args(argv)
    report = train(args.out_dir, args.steps, args.pool)
    print(json.dumps(report["heldout"], indent=2))
