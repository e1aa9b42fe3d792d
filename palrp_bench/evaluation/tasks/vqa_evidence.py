"""``kind: vqa_evidence``: do a vision-language model's explanations land on the image region that holds the answer?
Grounded visual questions scored with the evidence benchmark's PG, MRR, RMA and PTA (docs/evidence.md "Visual
question answering").

The loaders (``vqa``, ``refcoco``, ``synthetic_vqa``; :mod:`palrp_bench.data.vqa`) return model-independent records
(image, question, answer, foil, evidence box or mask). This adapter reads them with the model's own processor
(``bundle.tokenizer`` is the processor of a ``kind: vlm`` model):

* the prompt: the processor's chat template on one user turn holding the image and the question, with the
  generation prompt (the assistant's turn); the model's next token answers;
* target / foil: the first token of the answer / foil as written right after the prompt (after a space unless the
  prompt ends with whitespace);
* the evidence on the language-model image tokens (:func:`evidence_tokens`): the evidence mask goes through the
  model's image processor as an image (no normalisation), so it is resized and cropped exactly as the image is; the
  share of each image token it covers is read by the twin (``image_token_means``): evidence tokens are those at least
  half covered, or the most covered one when none is.

Dropped at load, counted per reason (:data:`ADAPTER_DROPS`, added to the loader's): the answer or the foil is the
tokenizer's unknown token, their first tokens are the same, the evidence reaches no image token or covers all of them
(the pointing game could not miss).

Selection ``correct_only``: a sample is correct when ``logit(answer) > logit(foil)`` after the prompt (one plain
forward with the image), as in the evidence benchmark. One explanation per sample (``palrp_bench.explain`` on the
processor's output with ``target`` and, when the task is ``contrastive``, ``foil``), scored by the ``evidence``
procedure under two masks:

* ``default``: the image tokens only (the heatmap: is the most relevant image region the evidence?);
* ``with_text``: every real token, text and image (is the most relevant input token on the evidence at all?).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch

from ...data.evidence_common import EvidencePool
from ...data.registry import load_dataset
from ...data.vqa import VqaSample
from ...errors import BadInputError
from ..explained import EvidenceBatch, SampleShape
from . import register_task
from .base import JobContext, TaskAdapter, dataset_tokens, explorer_arrays
from .evidence import score_dtype

__all__ = ["VqaEvidenceAdapter", "PreparedVqa", "ADAPTER_DROPS", "prompt_of", "answer_token", "evidence_tokens",
           "EVIDENCE_COVERAGE"]

#: why the adapter drops a record after reading it with the model's processor
ADAPTER_DROPS: dict[str, str] = {
    "unknown_word": "the tokenizer knows the answer or the foil only as its unknown token",
    "same_first_token": "the answer and the foil share their first token",
    "evidence_not_on_tokens": "the evidence covers no language-model image token (cropped away by the processor)",
    "evidence_covers_all": "the evidence covers every image token (the pointing game could not miss)",
}
#: the share of an image token the evidence must cover for the token to count as evidence
EVIDENCE_COVERAGE = 0.5


@dataclass
class PreparedVqa:
    """One record as the model reads it: the record, its prompt text, the answer's and the foil's first token, and the
    evidence per language-model image token (``evidence``, with each token's covered share ``coverage``)."""

    record: VqaSample
    prompt: str
    target_id: int
    foil_id: int
    evidence: list[bool]
    coverage: list[float] = field(default_factory=list)

    @property
    def sample_id(self) -> str:
        return self.record.sample_id

    def __len__(self) -> int:
        return len(self.evidence)


def prompt_of(processor, question: str) -> str:
    """The processor's chat template on one user turn (the image, then the question) with the generation prompt."""
    if getattr(processor, "chat_template", None) is None:
        raise BadInputError(f"the processor {type(processor).__name__} has no chat template",
                            "use the model's own processor (AutoProcessor of its checkpoint)")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def answer_token(tokenizer, prompt: str, word: str) -> int | None:
    """The first token of ``word`` written right after ``prompt`` (after a space unless the prompt ends with
    whitespace), or None when the tokenizer merges it with the prompt's last token."""
    text = prompt + ("" if prompt[-1:].isspace() else " ") + word
    base = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    full = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(full) <= len(base) or full[:len(base)] != base:
        return None
    return int(full[len(base)])


def evidence_tokens(twin, processor, record: VqaSample) -> tuple[list[bool], list[float]]:
    """``(evidence, coverage)`` per language-model image token of the record's image (module docstring)."""
    from PIL import Image

    mask = record.evidence_mask().numpy().astype(np.uint8) * 255
    image = Image.fromarray(mask, "L").convert("RGB")
    processed = processor.image_processor(images=[image], return_tensors="pt", do_normalize=False)
    coverage = twin.image_token_means(processed)[0].clamp(0.0, 1.0)
    evidence = coverage >= EVIDENCE_COVERAGE
    if not bool(evidence.any()) and float(coverage.max()) > 0:
        evidence = coverage == coverage.max()
    return evidence.tolist(), [round(float(c), 6) for c in coverage]


def prepare_vqa(records: Sequence[VqaSample], twin, processor) -> tuple[list[PreparedVqa], dict[str, int]]:
    """The kept records as the model reads them and the drops per reason (:data:`ADAPTER_DROPS`)."""
    tokenizer = processor.tokenizer
    unknown = getattr(tokenizer, "unk_token_id", None)
    kept, dropped = [], {}
    for record in records:
        prompt = prompt_of(processor, record.question)
        target = answer_token(tokenizer, prompt, record.answer)
        foil = answer_token(tokenizer, prompt, record.foil) if record.foil is not None else None
        reason = None
        if target is None or (record.foil is not None and foil is None) or (unknown is not None
                                                                            and unknown in (target, foil)):
            reason = "unknown_word"
        elif foil is not None and target == foil:
            reason = "same_first_token"
        else:
            evidence, coverage = evidence_tokens(twin, processor, record)
            if not any(evidence):
                reason = "evidence_not_on_tokens"
            elif all(evidence):
                reason = "evidence_covers_all"
            else:
                kept.append(PreparedVqa(record, prompt, target, -1 if foil is None else foil, evidence, coverage))
        if reason is not None:
            dropped[reason] = dropped.get(reason, 0) + 1
    return kept, dropped


def _twin(bundle):
    from ...models.registry import twin_for

    twin = twin_for(bundle.model)
    if twin.modality != "image_text":
        raise BadInputError(f"task kind vqa_evidence explains vision-language models, not {type(bundle.model).__name__}",
                            "pick a model of kind vlm (model.kind=vlm)")
    return twin


def _processed(bundle, samples: Sequence[PreparedVqa]) -> dict:
    """The processor's batch of the samples' prompts and images on the model's device."""
    processor = bundle.tokenizer
    out = processor(text=[s.prompt for s in samples], images=[[s.record.load_image()] for s in samples],
                    return_tensors="pt", padding=True)
    return {k: v.to(bundle.device) if isinstance(v, torch.Tensor) else v for k, v in out.items()}


def _last_index(attention_mask: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (positions * attention_mask.long()).argmax(-1)


@register_task("vqa_evidence")
class VqaEvidenceAdapter(TaskAdapter):
    """Grounded visual question answering (module docstring): vision-language models."""

    model_kinds = ("vlm",)

    def sample_length(self, sample: PreparedVqa) -> int:
        return len(sample.record.question.split()) + len(sample)

    def load_samples(self, task, bundle) -> EvidencePool:
        pool = load_dataset(task.dataset, path=task.path, limit=task.pool_size, options=task.options,
                            tokenizer=bundle.tokenizer)
        if not isinstance(pool, EvidencePool) or any(not isinstance(s, VqaSample) for s in pool):
            raise BadInputError(f"dataset {task.dataset!r} holds no visual questions (task {task.name})",
                                "use a VQA dataset: vqa, refcoco, synthetic_vqa")
        prepared, dropped = prepare_vqa(pool, _twin(bundle), bundle.tokenizer)
        merged = dict(pool.dropped)
        for reason, n in dropped.items():
            merged[reason] = merged.get(reason, 0) + n
        return EvidencePool(prepared, merged, pool.source)

    @torch.no_grad()
    def correct(self, bundle, samples, ctx) -> list[bool]:
        inputs = _processed(bundle, samples)
        logits = bundle.model(**inputs).logits
        rows = torch.arange(len(samples), device=logits.device)
        at = logits[rows, _last_index(inputs["attention_mask"])]
        target = at[rows, torch.tensor([s.target_id for s in samples], device=logits.device)]
        foil = at[rows, torch.tensor([s.foil_id for s in samples], device=logits.device)]
        return [bool(t > f) for t, f in zip(target.float().cpu(), foil.float().cpu())]

    def explain(self, bundle, samples, ctx: JobContext, needs=frozenset()) -> Iterator[EvidenceBatch]:
        """One ``palrp_bench.explain`` call on the batch; each sample's scores over its tokens and its evaluation
        masks (module docstring)."""
        import palrp_bench

        samples = list(samples)
        if ctx.task.contrastive and any(s.foil_id < 0 for s in samples):
            raise BadInputError("a contrastive vqa_evidence task needs a foil for every record",
                                "give every record a foil, or set task.contrastive=false")
        inputs = _processed(bundle, samples)
        foil = torch.tensor([s.foil_id for s in samples]) if ctx.task.contrastive else None
        rel = palrp_bench.explain(bundle.model, inputs, target=torch.tensor([s.target_id for s in samples]),
                                  foil=foil, causal=bool(ctx.task.causal), **ctx.explain_kwargs()).to("cpu")
        mask = inputs["attention_mask"].cpu().bool()
        image = rel.extras["image_mask"].bool()
        scores = rel.scores.detach().to(score_dtype(rel.scores.dtype))
        masks, infos, arrays = [], [], []
        for j, sample in enumerate(samples):
            positions = torch.nonzero(image[j]).reshape(-1).tolist()
            if len(positions) != len(sample):
                raise BadInputError(f"sample {sample.sample_id}: the processor gave {len(positions)} image tokens, the "
                                    f"evidence was mapped to {len(sample)}", "use one processor for loading and "
                                    "explaining (model.tokenizer)")
            evidence = [False] * scores.shape[1]
            for p, e in zip(positions, sample.evidence):
                evidence[p] = e
            image_valid = image[j].tolist()
            masks.append({"default": (image_valid, [e and v for e, v in zip(evidence, image_valid)]),
                          "with_text": (mask[j].tolist(), evidence)})
            info = {"rules": rel.rules, "aggregation": rel.aggregation, "stabilizers": rel.stabilizers,
                    "logit": float(rel.logit[j]), "explained": int(rel.target[j]), "n_tokens": int(mask[j].sum()),
                    "image_tokens": len(positions), "evidence_tokens": int(sum(sample.evidence)),
                    "contrastive": bool(ctx.task.contrastive), "forward_passes": int(rel.forward_passes[j])}
            if foil is not None:
                info["foil"] = int(foil[j])
            infos.append(info)
            h, w = (int(v) for v in rel.extras["image_grid"][j])
            arrays.append({"scores": scores[j][mask[j]].numpy().copy(),
                           "image_scores": rel.extras["image_scores"][j, :h, :w].float().numpy().copy(),
                           "evidence": np.asarray(sample.evidence).reshape(h, w),
                           "coverage": np.asarray(sample.coverage, dtype=np.float32).reshape(h, w),
                           "logit": np.asarray(float(rel.logit[j])), "explained": np.asarray(int(rel.target[j])),
                           "rules": np.asarray(rel.rules), "aggregation": np.asarray(rel.aggregation),
                           "stabilizers": np.asarray(rel.stabilizers),
                           **explorer_arrays(rel.extras, j, label=sample.record.answer)})
        finite = [bool(torch.isfinite(scores[j][mask[j]]).all()) for j in range(len(samples))]
        yield EvidenceBatch(bundle, samples, list(range(len(samples))), scores, [i["explained"] for i in infos],
                            infos, arrays, finite, [None] * len(samples), masks=masks)

    @classmethod
    def sample_shape(cls, cell, arch) -> SampleShape | None:
        """The question's tokens (the dataset's mean) and the model's image tokens per image (the architecture's),
        explained once and forwarded once in the selection."""
        text, _, _ = dataset_tokens(cell.task)
        image = getattr(arch, "image_tokens", None)
        if text is None or not image:
            return None
        tokens = float(text) + float(image)
        return SampleShape(tokens, tokens, round(tokens), tokens)

    def batch_tokens(self, batch) -> list[tuple[float, float]]:
        return [(float(self.sample_length(s)), float(self.sample_length(s))) for s in batch]
