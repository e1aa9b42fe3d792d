"""Throughput of the NLP perturbation protocol: batched forwards versus one forward per perturbed input.

Both modes run :func:`palrp_bench.evaluation.procedures.nlp_perturbation.nlp_perturbation_curves` in the same process on
the
same tiny random LLaMA and the same random scores (docs/protocol.md section 2: 11 steps x generation/pruning per
sample):

* ``batched``: every sample of the batch in one call, ``--batch-size`` perturbed sequences per forward;
* ``per_step``: one call per sample with ``batch_size=1``, i.e. one forward per perturbed input (the structure of
  the official loop, which runs a forward for each step).

It prints samples/second of each, their ratio, and the largest difference between the two sets of curves.

    python scripts/bench_nlp_perturbation.py                          # defaults: wikipedia, 8 x 128 tokens
    python scripts/bench_nlp_perturbation.py --task imdb --length 512 --samples 4 --hidden 256 --layers 4
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


from ..evaluation.procedures.nlp_perturbation import TASKS, nlp_perturbation_curves
from ..protocol import PROTOCOLS


def build_model(task: str, *, layers: int, hidden: int, heads: int, kv_heads: int, vocab: int, length: int,
                dtype: torch.dtype, seed: int):
    """A random LLaMA of the requested size (classifier for imdb, causal LM otherwise)."""
    import transformers
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=layers, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, max_position_embeddings=max(length, 16),
                                      bos_token_id=1, eos_token_id=2, pad_token_id=2, num_labels=2)
    torch.manual_seed(seed)
    cls = (transformers.LlamaForSequenceClassification if TASKS[task].head == "classifier"
           else transformers.LlamaForCausalLM)
    return cls(config).to(dtype).eval()


def make_batch(samples: int, length: int, vocab: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (samples, length), generator=generator)
    ids[:, 0] = 1
    scores = torch.randn(samples, length, generator=generator)
    labels = torch.randint(0, 2, (samples,), generator=generator)
    return ids, scores, labels


def run_mode(mode: str, model, task: str, ids, scores, labels, batch_size: int, protocol: str):
    """Curves of every sample (stacked) and the wall time."""
    label_arg = labels if TASKS[task].tracked == "label" else None
    start = time.perf_counter()
    if mode == "batched":
        curves = nlp_perturbation_curves(model, ids, scores, task, labels=label_arg, unk_id=0, protocol=protocol,
                                         batch_size=batch_size, show_progress=False)
    else:
        parts = [nlp_perturbation_curves(model, ids[b:b + 1], scores[b:b + 1], task,
                                         labels=None if label_arg is None else label_arg[b:b + 1], unk_id=0,
                                         protocol=protocol, batch_size=1, show_progress=False)
                 for b in range(ids.shape[0])]
        curves = {variant: {metric: np.concatenate([p[variant][metric] for p in parts])
                            for metric in ("ac", "mse")} for variant in ("generation", "pruning")}
    return curves, time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="wikipedia", choices=sorted(TASKS))
    p.add_argument("--protocol", default="official", choices=PROTOCOLS)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--length", type=int, default=128, help="tokens per sample (BOS included)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=64, help="perturbed sequences per forward (batched mode)")
    p.add_argument("--repeats", type=int, default=2, help="timed repetitions per mode (best is reported)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    dtype = getattr(torch, args.dtype)
    model = build_model(args.task, layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                        vocab=args.vocab, length=args.length, dtype=dtype, seed=args.seed)
    ids, scores, labels = make_batch(args.samples, args.length, args.vocab, args.seed)
    # warm-up (allocator, kernels) on one sample, both modes
    for mode in ("batched", "per_step"):
        run_mode(mode, model, args.task, ids[:1], scores[:1], labels[:1], args.batch_size, args.protocol)

    results, curves = {}, {}
    for mode in ("batched", "per_step"):
        times = []
        for _ in range(args.repeats):
            curves[mode], seconds = run_mode(mode, model, args.task, ids, scores, labels, args.batch_size,
                                             args.protocol)
            times.append(seconds)
        results[mode] = {"seconds": min(times), "samples_per_second": args.samples / min(times)}
    difference = max(float(np.abs(curves["batched"][v][m] - curves["per_step"][v][m]).max())
                     for v in ("generation", "pruning") for m in ("ac", "mse"))
    ratio = results["batched"]["samples_per_second"] / results["per_step"]["samples_per_second"]

    print(f"task={args.task} protocol={args.protocol} samples={args.samples} length={args.length} "
          f"layers={args.layers} hidden={args.hidden} heads={args.heads}/{args.kv_heads} vocab={args.vocab} "
          f"dtype={args.dtype} threads={torch.get_num_threads()} batch_size={args.batch_size}")
    for mode, row in results.items():
        print(f"  {mode:9s} {row['samples_per_second']:9.2f} samples/s  ({row['seconds']:.3f} s)")
    print(f"  speed-up batched / per-step: {ratio:.2f}x   max |curve difference|: {difference:.2e}")
    if args.json:
        args.json.write_text(json.dumps({"config": {k: (str(v) if isinstance(v, Path) else v)
                                                    for k, v in vars(args).items()},
                                         "results": results, "ratio": ratio, "max_abs_difference": difference},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
