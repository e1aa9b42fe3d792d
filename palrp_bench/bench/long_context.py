"""Long contexts on one GPU: time and peak memory of ``pa_lrp`` and plain Gradient x Input with layer checkpointing
(docs/engine.md, "Long contexts").

A random Llama-3.1-8B (its shapes, llama3 rope scaling, bf16) is drawn directly on the device (no CPU copy, no
disk: seconds), then for each length (default 4096, 32768, 131072 tokens, batch 1, one unpadded sequence, the last
token's next-token logit explained) each method is timed (median of the repeats, CUDA-synchronised) and its peak
allocator memory read (``torch.cuda.max_memory_allocated``: total, and over the weights). By default every length
runs with ``checkpoint=layers`` and 4096 tokens also without checkpointing (the overhead of recomputing). A
relevance check compares the checkpointed and the plain ``pa_lrp`` scores at the first length.

Guards, so that one run finishes in about four minutes on an H200 (one on an H100, which skips 131072) and never
dies half-way:

* lengths above 65536 tokens run only with ``--min-free-gb`` (100) GB free on the device, else a ``skipped`` row;
* an out-of-memory error is an ``oom`` row (the next row starts from an emptied cache);
* ``--time-box`` seconds (240) in all: a measurement whose predicted time (the previous length's, scaled by the
  forward's FLOPs) would overrun it is a ``skipped`` row; rows predicted above 3 s get no warm-up run, above 5 s one
  timed run.

Rows go to stdout as a table and to ``--out`` (``long_context.json`` and ``long_context.csv``, rewritten after each
row). On the GPU::

    python scripts/bench_long_context.py --out results/long_context

CPU dry run of the same code path (a few seconds)::

    python scripts/bench_long_context.py --device cpu --dtype float32 --layers 2 --hidden 64 --vocab 1000 \\
        --lengths 128 256 --out /tmp/long_context
"""
from __future__ import annotations

import argparse
import csv
import gc
import json
import statistics
import time
from pathlib import Path

import torch
import transformers

from ..api import explain

#: Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json)
LLAMA3_1_8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                   num_key_value_heads=8, vocab_size=128256, rms_norm_eps=1e-5, tie_word_embeddings=False,
                   max_position_embeddings=131072,
                   rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192})
METHODS = ("grad_x_input", "pa_lrp")
FIELDS = ("length", "checkpoint", "method", "status", "ms", "ratio", "peak_gib", "over_weights_gib", "tokens_per_s",
          "note")


def llama_config(args) -> transformers.LlamaConfig:
    """Llama-3.1-8B's config, or its shape scaled down (``--hidden`` / ``--layers`` / ``--vocab``: head size 16 below
    4096, the 4:1 grouping of query to key heads and the 3.5x MLP kept)."""
    fields = dict(LLAMA3_1_8B)
    if args.hidden:
        heads = max(1, args.hidden // (128 if args.hidden >= 4096 else 16))
        fields.update(hidden_size=args.hidden, intermediate_size=int(3.5 * args.hidden), num_attention_heads=heads,
                      num_key_value_heads=max(1, heads // 4))
    if args.layers:
        fields["num_hidden_layers"] = args.layers
    if args.vocab:
        fields["vocab_size"] = args.vocab
    fields["max_position_embeddings"] = max(fields["max_position_embeddings"], max(args.lengths))
    return transformers.LlamaConfig(**fields)


def build(args, device: torch.device):
    """The random model, drawn on ``device`` in ``--dtype``, parameters frozen (the cost floor is one forward and
    one input-gradient backward)."""
    cfg = llama_config(args)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM._from_config(cfg, dtype=getattr(torch, args.dtype)).eval()
    model.requires_grad_(False)
    return model, cfg


def forward_flops(cfg, tokens: int) -> float:
    """FLOPs of one causal forward over ``tokens`` tokens: the layers' matrix products and the attention scores
    and weighted sums (half of the ``T x T`` pairs)."""
    d, layers = cfg.hidden_size, cfg.num_hidden_layers
    kv = d // cfg.num_attention_heads * cfg.num_key_value_heads
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * cfg.intermediate_size
    return 2.0 * tokens * per_layer * layers + 2.0 * tokens * tokens * d * layers


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_oom(err: BaseException) -> bool:
    return isinstance(err, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(err).lower()


def run_once(model, ids, method: str, checkpoint: str, args, device):
    """``(seconds, peak bytes, bytes before, explanation)`` of one explanation (peaks None on the CPU)."""
    synchronize(device)
    before = peak = None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    e = explain(model, ids, method=method, checkpoint=checkpoint, stabilizers=args.stabilizers)
    synchronize(device)
    seconds = time.perf_counter() - t0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    return seconds, peak, before, e


def write(out: Path | None, settings: dict, rows: list[dict]) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "long_context.json").write_text(json.dumps({**settings, "rows": rows}, indent=1))
    with open(out / "long_context.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[4096, 32768, 131072])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--plain-at", type=int, nargs="*", default=[4096],
                    help="lengths also measured without checkpointing (checkpoint=none)")
    ap.add_argument("--stabilizers", choices=["none", "official"], default="none",
                    help="epsilon-rule stabilisers of pa_lrp (none: the exact rules; official: the official set, "
                         "compiled on the first call)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per row where one takes under 5 s, else 1")
    ap.add_argument("--time-box", type=float, default=240.0, help="seconds for the whole run (skipped rows beyond)")
    ap.add_argument("--min-free-gb", type=float, default=100.0,
                    help="free device memory a length above 65536 tokens needs (else a skipped row)")
    ap.add_argument("--hidden", type=int, default=0, help="scale the model down (dry runs)")
    ap.add_argument("--layers", type=int, default=0, help="scale the model down (dry runs)")
    ap.add_argument("--vocab", type=int, default=0, help="scale the vocabulary down (dry runs)")
    ap.add_argument("--out", type=Path, default=None, help="folder for long_context.json / long_context.csv")
    args = ap.parse_args(argv)
    start = time.monotonic()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_long_context: no CUDA device is visible (use --device cpu for the dry run)")
    model, cfg = build(args, device)
    synchronize(device)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    settings = {"model": "Llama-3.1-8B shapes, random weights" if not (args.hidden or args.layers or args.vocab)
                else "Llama-3.1-8B scaled down, random weights",
                "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size, "vocab": cfg.vocab_size,
                "dtype": args.dtype, "device": str(device), "batch": 1, "stabilizers": args.stabilizers,
                "torch": torch.__version__, "transformers": transformers.__version__,
                "weights_gib": weights / 2**30, "build_s": time.monotonic() - start,
                "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                "device_total_gib": (torch.cuda.get_device_properties(device).total_memory / 2**30
                                     if device.type == "cuda" else None)}
    print("# " + " ".join(f"{k}={v if not isinstance(v, float) else round(v, 2)}" for k, v in settings.items()))
    print("| length | checkpoint | method | status | ms | ratio vs grad_x_input | peak GiB | over weights GiB | "
          "tokens/s |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|")
    rows: list[dict] = []
    last: tuple[int, float] | None = None  # (length, seconds of one explanation) of the latest measured row
    plain_scores = {}
    for length in args.lengths:
        ids = torch.randint(3, cfg.vocab_size, (1, length), device=device)
        ids[:, 0] = 1
        modes = (["none"] if length in args.plain_at else []) + ["layers"]
        for checkpoint in modes:
            reference_ms = None
            for method in args.methods:
                row = {"length": length, "checkpoint": checkpoint, "method": method, "status": "ok", "ms": None,
                       "ratio": None, "peak_gib": None, "over_weights_gib": None, "tokens_per_s": None, "note": ""}
                predicted = None if last is None else last[1] * forward_flops(cfg, length) / forward_flops(cfg,
                                                                                                          last[0])
                free = torch.cuda.mem_get_info(device)[0] / 1e9 if device.type == "cuda" else None
                if length > 65536 and free is not None and free < args.min_free_gb:
                    row.update(status="skipped", note=f"{free:.0f} GB free, --min-free-gb {args.min_free_gb:g}")
                elif predicted is not None and time.monotonic() - start + predicted > args.time_box:
                    row.update(status="skipped", note=f"time box: about {predicted:.0f} s predicted")
                else:
                    try:
                        warm = predicted is None or predicted < 3
                        runs = args.repeats if predicted is None or predicted < 5 else 1
                        if warm:
                            run_once(model, ids, method, checkpoint, args, device)
                        results = [run_once(model, ids, method, checkpoint, args, device) for _ in range(runs)]
                        seconds = statistics.median(r[0] for r in results)
                        peak, before, e = results[-1][1], results[-1][2], results[-1][3]
                        row.update(ms=seconds * 1000, tokens_per_s=length / seconds,
                                   peak_gib=None if peak is None else peak / 2**30,
                                   over_weights_gib=None if peak is None else (peak - before) / 2**30)
                        last = (length, seconds)
                        if method == "pa_lrp" and length == args.lengths[0]:
                            plain_scores[checkpoint] = e.scores.float()
                        del e, results
                    except Exception as err:  # noqa: BLE001 - an OOM is a row, anything else is a bug
                        if not is_oom(err):
                            raise
                        row.update(status="oom", note=str(err).splitlines()[0][:160])
                    gc.collect()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                if method == "grad_x_input" and row["ms"] is not None:
                    reference_ms = row["ms"]
                if row["ms"] is not None and reference_ms is not None:
                    row["ratio"] = row["ms"] / reference_ms
                rows.append(row)
                print(f"| {length} | {checkpoint} | {method} | {row['status']} | {fmt(row['ms'], '.0f')} | "
                      f"{fmt(row['ratio'], '.3f')} | {fmt(row['peak_gib'], '.1f')} | "
                      f"{fmt(row['over_weights_gib'], '.1f')} | {fmt(row['tokens_per_s'], '.0f')} |"
                      + (f" {row['note']}" if row["note"] else ""), flush=True)
                write(args.out, settings, rows)
        del ids
    if len(plain_scores) == 2:
        a, b = plain_scores["layers"], plain_scores["none"]
        settings["relevance_check"] = float((a - b).abs().max() / b.abs().max())
        print(f"# pa_lrp scores at {args.lengths[0]} tokens, checkpoint=layers vs none: max difference "
              f"{settings['relevance_check']:.2e} of the largest score")
    settings["total_s"] = time.monotonic() - start
    write(args.out, settings, rows)
    print(f"# total {settings['total_s']:.0f} s")
    return rows
