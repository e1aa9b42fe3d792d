"""Train the tiny text models of the embedded synthetic suite and ship them as package assets.

(a) ``LlamaForSequenceClassification`` on :func:`palrp_bench.data.synthetic_text.make_synthetic_classification`
    (label = a trigger word among the first 8 words), stand-in for the IMDB classifiers of Tables 1-2;
(b) ``LlamaForCausalLM`` on :func:`palrp_bench.data.synthetic_text.make_synthetic_mcqa` (answer letter of the
    option in the asked category, official ARC prompt), stand-in for the LLaMA-3 model of Table 3;
(c) ``Qwen2ForCausalLM`` (kind ``qwen2_causal``) on the same MCQA task with the causal recipe: a second decoder
    family (q/k/v biases) in the embedded default.

(d) ``LlamaForCausalLM`` (kind ``evidence``, config ``tiny_llama_evidence``) on the three synthetic evidence tasks
    of :mod:`palrp_bench.data.synthetic_evidence` (subject-verb agreement, reflexive anaphora, one-word qa), with its
    own word-level tokenizer: the correct word (``are``, ``himself``, the answer) is learnt as the next token after
    the causal text; the held-out report counts, per task, the samples with logit(target) > logit(foil).

(e) ``T5ForConditionalGeneration`` (kind ``t5_squad``, config ``tiny_t5``) on the synthetic qa samples
    (task ``synthetic_squad``) with the evidence tokenizer: the encoder reads the qa prompt, the decoder answers
    the answer word after its start token, then EOS (T5 v1.1 wiring, 2 + 2 layers, d_model 48,
    :data:`palrp_bench.data.synthetic_text.TINY_T5_ARCH`); the held-out report counts the greedy first answer
    tokens that are the answer word.

(f) ``LlamaForCausalLM`` (kind ``needle``, config ``tiny_llama_needle``) on the needle in a haystack of
    :mod:`palrp_bench.data.needle` with the synthetic filler and its own word-level tokenizer (numbers split into
    digits): the value's digits are learnt after "... for <key> is" at the end of haystacks of 64 to 1,024 tokens
    (64 and 128 for the first :data:`NEEDLE_SHORT_SHARE` of the steps, the retrieval circuit first), with the needle at
    a uniformly random depth; 4,096 positions. The held-out report counts, per length of :data:`NEEDLE_HELDOUT` (one
    beyond the trained lengths), the samples of the ``synthetic_needle`` grid whose arg-max next token is the value's
    first digit.

The LLaMA models: RoPE, 2 layers, hidden 64, 4 heads / 2 KV heads, pad = eos. Training is seeded and single-threaded, on
fresh samples every step (split ``train``); the held-out accuracy is measured on split ``test``. Outputs, in
``--out-dir`` (default ``palrp_bench/assets/text``): ``tokenizer/``, ``cls/`` and ``causal/`` (``save_pretrained``
safetensors + ``training_report.json``; ``qwen2_causal/``; ``evidence/`` and ``t5_squad/`` with their tokenizer files).

    python scripts/train_tiny_text.py              # the LLaMA models (about 15 s + 40 s of CPU time, one thread)
    python scripts/train_tiny_text.py --kind cls
    python scripts/train_tiny_text.py --kind qwen2_causal
    python scripts/train_tiny_text.py --kind evidence
    python scripts/train_tiny_text.py --kind t5_squad
    python scripts/train_tiny_text.py --kind needle  # about 8 min of one CPU thread
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

from ..data import needle as nd
from ..data import synthetic_evidence as se
from ..data import synthetic_text as st
from ..data.evidence_common import render

#: Per kind: optimisation steps, batch size, peak learning rate.
RECIPES: dict[str, dict] = {
    "cls": {"steps": 300, "batch_size": 64, "lr": 5e-3},
    "causal": {"steps": 400, "batch_size": 64, "lr": 5e-3},
    "qwen2_causal": {"steps": 400, "batch_size": 64, "lr": 5e-3},
    "evidence": {"steps": 600, "batch_size": 96, "lr": 5e-3},
    "t5_squad": {"steps": 800, "batch_size": 64, "lr": 5e-3},
    "needle": {"steps": 1000, "batch_size": 16, "lr": 3e-3},
}
#: Causal model: weight of the auxiliary next-token loss over the whole prompt. Without it the answer loss sits
#: at chance (ln 4) for hundreds of steps; predicting the prompt's own tokens (e.g. each option letter after its
#: newline) builds the previous-token circuits the lookup needs, and the answer is then learnt in ~250 steps.
LM_AUX_WEIGHT = 0.5
WARMUP_STEPS = 100
WEIGHT_DECAY = 0.01
GRAD_CLIP = 1.0
HELDOUT = {"split": "test", "seed": 0, "n": 2000}
#: Evidence model: held-out samples per task.
EVIDENCE_HELDOUT = {"split": "test", "seed": 0, "n": 500}
#: Needle model: the haystack lengths of a training step (one per step, drawn by the step's seed), the share of the
#: steps that draw from the short ones only, and the held-out grid (``task=synthetic_needle`` with ``n`` needles)
NEEDLE_SHORT = (64, 128)
NEEDLE_LENGTHS = (64, 128, 256, 512, 1024)
NEEDLE_SHORT_SHARE = 0.3
NEEDLE_HELDOUT = {"split": "test", "seed": 0, "n": 16, "lengths": [256, 512, 1024, 2048],
                  "depths": list(nd.DEFAULT_DEPTHS)}


def _schedule(step: int, steps: int) -> float:
    """Linear warm-up then cosine decay to zero (multiplier of the peak learning rate)."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, steps - WARMUP_STEPS)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _fit(model, steps: int, lr: float, step_loss, desc: str) -> dict:
    """AdamW with :func:`_schedule` and gradient clipping over ``steps`` steps of ``step_loss(step) -> loss``; the
    model ends in eval mode. Returns the report's training figures (final loss, wall-clock and CPU seconds,
    threads)."""
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: _schedule(s, steps))
    start, cpu_start = time.perf_counter(), time.process_time()
    model.train()
    progress = tqdm(range(steps), desc=desc, mininterval=2.0)
    for step in progress:
        loss = step_loss(step)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimiser.step()
        scheduler.step()
        if step % 50 == 0:
            progress.set_postfix(loss=f"{loss.item():.4f}")
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    model.eval()
    return {"final_train_loss": float(loss.item()), "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
            "threads": torch.get_num_threads()}


def _versions() -> dict:
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version()}


def _batch_loss(kind: str, model, samples) -> torch.Tensor:
    """Classifier: cross-entropy of the class. Causal: cross-entropy of the answer letter at the last position
    plus :data:`LM_AUX_WEIGHT` times the next-token loss over the prompt."""
    ids, mask = st.batch_inputs(samples)
    if st.TINY_TEXT_MODELS[kind][2] == "cls":
        logits = model(input_ids=ids, attention_mask=mask).logits
        return torch.nn.functional.cross_entropy(logits, torch.tensor([s.label for s in samples]))
    logits = model(input_ids=ids, attention_mask=mask).logits
    last = mask.sum(-1) - 1
    target = torch.tensor([s.meta["answer_token_id"] for s in samples])
    answer_loss = torch.nn.functional.cross_entropy(logits[torch.arange(len(samples)), last], target)
    next_ids = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)  # prompts share one length; ignore pads anyway
    lm_loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), next_ids.reshape(-1),
                                                ignore_index=-100)
    return answer_loss + LM_AUX_WEIGHT * lm_loss


def _evidence_loss(model, tokenizer, samples) -> torch.Tensor:
    """Evidence model: cross-entropy of the target word after the causal text plus :data:`LM_AUX_WEIGHT` times the
    next-token loss over the text."""
    ids, mask = se.causal_batch(tokenizer, samples)
    logits = model(input_ids=ids, attention_mask=mask).logits
    last = mask.sum(-1) - 1
    target = torch.tensor([se.EVIDENCE_VOCAB[s.target] for s in samples])
    answer_loss = torch.nn.functional.cross_entropy(logits[torch.arange(len(samples)), last], target)
    next_ids = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
    lm_loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), next_ids.reshape(-1),
                                                ignore_index=-100)
    return answer_loss + LM_AUX_WEIGHT * lm_loss


def evidence_heldout(model, tokenizer, n: int = EVIDENCE_HELDOUT["n"], seed: int = EVIDENCE_HELDOUT["seed"],
                     split: str = EVIDENCE_HELDOUT["split"]) -> dict:
    """Per task: samples, those with logit(target) > logit(foil) (``n_correct``, ``contrast_accuracy``) and those
    whose arg-max next token is the target (``top1_accuracy``)."""
    out = {}
    for task in se.SYNTHETIC_EVIDENCE_TASKS:
        samples = se.make_synthetic_evidence(task, n, seed=seed, split=split)
        target, foil = se.contrast_logits(model, tokenizer, samples)
        with torch.no_grad():
            ids, mask = se.causal_batch(tokenizer, samples)
            logits = model(input_ids=ids, attention_mask=mask).logits
            top = logits[torch.arange(len(samples)), mask.sum(-1) - 1].argmax(-1)
        n_correct = int((target > foil).sum())
        out[task] = {"n": n, "n_correct": n_correct, "contrast_accuracy": n_correct / n,
                     "top1_accuracy": float(sum(int(t) == se.EVIDENCE_VOCAB[s.target]
                                                for t, s in zip(top, samples)) / n)}
    return out


def train_evidence(seed: int, steps: int, batch_size: int, lr: float, heldout_n: int = EVIDENCE_HELDOUT["n"]):
    """Train the evidence model from scratch on the three synthetic tasks (equal shares of every batch, fresh
    samples every step) and evaluate it on ``heldout_n`` test samples per task; returns ``(model, tokenizer, report
    dict)``."""
    import transformers

    torch.manual_seed(seed)
    tokenizer = se.build_evidence_tokenizer()
    model = transformers.LlamaForCausalLM(st.tiny_text_config("evidence", vocab_size=len(se.EVIDENCE_VOCAB)))
    per_task = batch_size // len(se.SYNTHETIC_EVIDENCE_TASKS)
    pools = [se.make_synthetic_evidence(task, steps * per_task, seed=seed, split="train")
             for task in se.SYNTHETIC_EVIDENCE_TASKS]

    def step_loss(step: int) -> torch.Tensor:
        batch = [s for pool in pools for s in pool[step * per_task:(step + 1) * per_task]]
        return _evidence_loss(model, tokenizer, batch)

    trained = _fit(model, steps, lr, step_loss, "training tiny evidence")
    report = {
        "kind": "evidence",
        "architecture": "LlamaForCausalLM",
        "task": "synthetic evidence tasks (sva, ra, qa): the correct word after the causal text",
        "heldout": {**EVIDENCE_HELDOUT, "n": heldout_n, "per_task": evidence_heldout(model, tokenizer, heldout_n)},
        "train": {"seed": seed, "steps": steps, "batch_size": per_task * len(pools), "lr": lr,
                  "warmup_steps": WARMUP_STEPS, "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP,
                  "lm_aux_weight": LM_AUX_WEIGHT, **trained},
        "vocab_size": len(se.EVIDENCE_VOCAB),
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "versions": _versions(),
    }
    return model, tokenizer, report


def needle_batch(tokenizer, step: int, length: int, batch_size: int, split: str = "train") -> torch.Tensor:
    """``[batch_size, length + digits]`` token ids of step ``step``'s needles (data/needle.py, synthetic filler of
    seed ``step``, needle ``b`` of that seed at a depth drawn uniformly): the causal input of ``length`` tokens, then
    the value's digits (the targets)."""
    stream = nd.token_stream(nd.filler_documents(step, split), tokenizer, batch_size * length + 64,
                             what="needle filler")
    depths = torch.Generator().manual_seed(step)
    rows = []
    for b in range(batch_size):
        draw = nd.draw_needle(step, b, nd.DEFAULT_VALUE_DIGITS, split)
        sample = nd.build_needle(stream, tokenizer, start=b * length, length=length,
                                 depth=float(torch.rand((), generator=depths)), draw=draw, sample_id=f"train-{b}")
        rows.append(tokenizer(render(sample, "causal").text)["input_ids"] + [nd.NEEDLE_VOCAB[d] for d in draw.value])
    return torch.tensor(rows)


def _needle_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the value's digits after the input plus :data:`LM_AUX_WEIGHT` times the next-token loss over
    the whole sequence."""
    logits = model(input_ids=ids[:, :-1]).logits
    targets = ids[:, 1:]
    digits = nd.DEFAULT_VALUE_DIGITS
    answer = torch.nn.functional.cross_entropy(logits[:, -digits:].reshape(-1, logits.shape[-1]),
                                               targets[:, -digits:].reshape(-1))
    lm = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return answer + LM_AUX_WEIGHT * lm


@torch.no_grad()
def needle_heldout(model, tokenizer, lengths=tuple(NEEDLE_HELDOUT["lengths"]), n: int = NEEDLE_HELDOUT["n"],
                   seed: int = NEEDLE_HELDOUT["seed"]) -> dict:
    """Per length of the ``synthetic_needle`` grid (every depth of :data:`NEEDLE_HELDOUT`, ``n`` needles, filler
    seed ``seed``): samples and those whose arg-max next token is the value's first digit (``retrieved``,
    ``accuracy``; chance is 1/9), and the same per depth over all lengths."""
    samples = nd.make_needle_samples(tokenizer, nd.filler_documents(seed), lengths=list(lengths),
                                     depths=NEEDLE_HELDOUT["depths"], n=n, seed=seed)
    per_length: dict[int, list[bool]] = {}
    per_depth: dict[str, list[bool]] = {}
    for s in samples:
        ids = torch.tensor([tokenizer(render(s, "causal").text)["input_ids"]])
        hit = int(model(input_ids=ids).logits[0, -1].argmax()) == nd.NEEDLE_VOCAB[s.target[0]]
        per_length.setdefault(s.meta["length"], []).append(hit)
        per_depth.setdefault(nd.depth_label(s.meta["depth"]), []).append(hit)

    def summary(hits):
        return {"n": len(hits), "retrieved": int(sum(hits)), "accuracy": sum(hits) / len(hits)}

    return {"per_length": {str(k): summary(v) for k, v in per_length.items()},
            "per_depth": {k: summary(v) for k, v in per_depth.items()}}


def train_needle(seed: int, steps: int, batch_size: int, lr: float, heldout_n: int = NEEDLE_HELDOUT["n"],
                 heldout_lengths=tuple(NEEDLE_HELDOUT["lengths"])):
    """Train the needle model from scratch (module docstring, (f)) and evaluate it on the held-out grid
    (:func:`needle_heldout` with ``heldout_n`` needles at ``heldout_lengths``); returns ``(model, tokenizer, report
    dict)``."""
    import random

    import transformers

    torch.manual_seed(seed)
    tokenizer = nd.build_needle_tokenizer()
    model = transformers.LlamaForCausalLM(st.tiny_text_config("needle", vocab_size=len(nd.NEEDLE_VOCAB)))

    def length_of(step: int) -> int:
        choices = NEEDLE_SHORT if step < NEEDLE_SHORT_SHARE * steps else NEEDLE_LENGTHS
        return random.Random(seed * 1_000_003 + step).choice(choices)

    def step_loss(step: int) -> torch.Tensor:
        return _needle_loss(model, needle_batch(tokenizer, seed * steps + step, length_of(step), batch_size))

    trained = _fit(model, steps, lr, step_loss, "training tiny needle")
    report = {
        "kind": "needle",
        "architecture": "LlamaForCausalLM",
        "task": "needle in a haystack of synthetic filler (synthetic_needle): the value's digits after the question",
        "heldout": {**{k: v for k, v in NEEDLE_HELDOUT.items() if k != "depths"}, "n": heldout_n,
                    "lengths": list(heldout_lengths), **needle_heldout(model, tokenizer, heldout_lengths, heldout_n)},
        "train": {"seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": WARMUP_STEPS,
                  "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP, "lm_aux_weight": LM_AUX_WEIGHT,
                  "lengths": list(NEEDLE_LENGTHS), "short_lengths": list(NEEDLE_SHORT),
                  "short_share": NEEDLE_SHORT_SHARE, "value_digits": nd.DEFAULT_VALUE_DIGITS, **trained},
        "vocab_size": len(nd.NEEDLE_VOCAB),
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "versions": _versions(),
    }
    return model, tokenizer, report


def _t5_batch(tokenizer, samples) -> dict:
    """Encoder inputs (the qa prompt) and labels (the answer word, then EOS) of the tiny T5."""
    ids, mask = se.causal_batch(tokenizer, samples)
    labels = torch.tensor([[se.EVIDENCE_VOCAB[s.target], st.EOS_ID] for s in samples])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def t5_squad_heldout(model, tokenizer, n: int = EVIDENCE_HELDOUT["n"], seed: int = EVIDENCE_HELDOUT["seed"],
                     split: str = EVIDENCE_HELDOUT["split"]) -> dict:
    """Held-out synthetic qa samples whose greedy answer (first decoder token after the start token) is the answer
    word."""
    samples = se.make_synthetic_qa(n, seed=seed, split=split)
    batch = _t5_batch(tokenizer, samples)
    with torch.no_grad():
        start = torch.full((n, 1), model.config.decoder_start_token_id)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       decoder_input_ids=start).logits[:, -1]
    n_correct = int((logits.argmax(-1) == batch["labels"][:, 0]).sum())
    return {"n": n, "n_correct": n_correct, "top1_accuracy": n_correct / n}


def train_t5_squad(seed: int, steps: int, batch_size: int, lr: float, heldout_n: int = EVIDENCE_HELDOUT["n"]):
    """Train the tiny T5 of ``synthetic_squad`` from scratch (``T5ForConditionalGeneration``, teacher-forced
    cross-entropy of the answer word and EOS, fresh synthetic qa samples every step); returns ``(model, tokenizer,
    report dict)``."""
    import transformers

    torch.manual_seed(seed)
    tokenizer = se.build_evidence_tokenizer()
    model = transformers.T5ForConditionalGeneration(st.tiny_text_config("t5_squad", vocab_size=len(se.EVIDENCE_VOCAB)))
    pool = se.make_synthetic_qa(steps * batch_size, seed=seed, split="train")
    trained = _fit(model, steps, lr,
                   lambda step: model(**_t5_batch(tokenizer, pool[step * batch_size:(step + 1) * batch_size])).loss,
                   "training tiny t5_squad")
    report = {
        "kind": "t5_squad",
        "architecture": "T5ForConditionalGeneration",
        "task": "synthetic qa (synthetic_squad): the answer word as the first decoder token, then EOS",
        "heldout": {**EVIDENCE_HELDOUT, **t5_squad_heldout(model, tokenizer, heldout_n)},
        "train": {"seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": WARMUP_STEPS,
                  "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP, **trained},
        "vocab_size": len(se.EVIDENCE_VOCAB),
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "versions": _versions(),
    }
    return model, tokenizer, report


def train(kind: str, seed: int, steps: int, batch_size: int, lr: float):
    """Train one tiny model from scratch; returns ``(model, report dict)``."""
    import transformers

    torch.manual_seed(seed)
    config = st.tiny_text_config(kind)
    model = getattr(transformers, st.TINY_TEXT_MODELS[kind][1])(config)
    is_cls = st.TINY_TEXT_MODELS[kind][2] == "cls"
    make = st.make_synthetic_classification if is_cls else st.make_synthetic_mcqa
    # Fresh training samples every step: step k uses train samples k*B .. (k+1)*B - 1 of this seed.
    pool = make(steps * batch_size, seed=seed, split="train")
    trained = _fit(model, steps, lr,
                   lambda step: _batch_loss(kind, model, pool[step * batch_size:(step + 1) * batch_size]),
                   f"training tiny {kind}")
    heldout = make(HELDOUT["n"], seed=HELDOUT["seed"], split=HELDOUT["split"])
    if is_cls:
        accuracy = st.classification_accuracy(model, heldout)
    else:
        accuracy = st.mcqa_accuracy(model, st.build_tiny_tokenizer(), heldout)
    report = {
        "kind": kind,
        "architecture": st.TINY_TEXT_MODELS[kind][1],
        "task": "synthetic classification (early trigger)" if is_cls else "synthetic MCQA (option lookup)",
        "heldout_accuracy": accuracy,
        "heldout": dict(HELDOUT),
        "train": {"seed": seed, "steps": steps, "batch_size": batch_size, "lr": lr, "warmup_steps": WARMUP_STEPS,
                  "weight_decay": WEIGHT_DECAY, "grad_clip": GRAD_CLIP,
                  "lm_aux_weight": 0.0 if is_cls else LM_AUX_WEIGHT, **trained},
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "versions": _versions(),
    }
    return model, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=[*st.TINY_TEXT_MODELS, "both"], default="both",
                        help="which model to train (both = the two LLaMA models of the text suite)")
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation and training samples")
    parser.add_argument("--steps", type=int, default=None, help="override the recipe's number of steps")
    parser.add_argument("--out-dir", type=Path, default=st.ASSET_DIR, help="asset folder to write")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # reproducible float summation order; the models are tiny anyway
    args.out_dir.mkdir(parents=True, exist_ok=True)
    kinds = ["cls", "causal"] if args.kind == "both" else [args.kind]
    if any(kind not in ("evidence", "t5_squad", "needle") for kind in kinds):
        st.build_tiny_tokenizer().save_pretrained(str(args.out_dir / "tokenizer"))
    for kind in kinds:
        recipe = dict(RECIPES[kind])
        if args.steps is not None:
            recipe["steps"] = args.steps
        folder = args.out_dir / kind
        if kind == "evidence":
            model, tokenizer, report = train_evidence(args.seed, **recipe)
            tokenizer.save_pretrained(str(folder))
            per_task = report["heldout"]["per_task"].items()
            accuracy = ", ".join(f"{task} {r['n_correct']}/{r['n']}" for task, r in per_task)
        elif kind == "needle":
            model, tokenizer, report = train_needle(args.seed, **recipe)
            tokenizer.save_pretrained(str(folder))
            accuracy = ", ".join(f"{length} tokens {r['retrieved']}/{r['n']}"
                                 for length, r in report["heldout"]["per_length"].items())
        elif kind == "t5_squad":
            model, tokenizer, report = train_t5_squad(args.seed, **recipe)
            tokenizer.save_pretrained(str(folder))
            accuracy = f"{report['heldout']['n_correct']}/{report['heldout']['n']}"
        else:
            model, report = train(kind, args.seed, **recipe)
            accuracy = f"{report['heldout_accuracy']:.4f} on {HELDOUT['n']} samples"
        model.save_pretrained(str(folder))
        (folder / st.REPORT_NAME).write_text(json.dumps(report, indent=2) + "\n")
        size = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
        print(f"{kind}: held-out accuracy {accuracy}, {report['train']['seconds']:.0f} s training "
              f"({report['train']['cpu_seconds']:.0f} s CPU), {size:.2f} MB in {folder}")
    return 0
