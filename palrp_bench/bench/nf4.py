"""What an NF4 layer costs against a dequantised copy of it, at one row and at many (the 4-bit cell of Table 1).

A ``bitsandbytes`` 4-bit linear (``Linear4bit``, NF4, the layers ``model=llama2_7b_4bit`` loads) computes a call of
more than one input row by dequantising its whole weight to the compute dtype and multiplying with it; only a
single row (one token of one sample, generation) has a fused kernel that reads the 4-bit codes directly. Our
explanations and perturbation forwards run hundreds of tokens per call, so every call of every layer pays the
dequantisation, and the backward of an explanation pays it again. This benchmark times, in one process, on one
layer of LLaMA-2-7B's shapes (``--shape``: the MLP's up projection, 4096 -> 11008, by default):

* ``nf4``: the 4-bit layer's forward (and with ``--backward`` forward + the input gradient, as an explanation runs
  it) for each number of input rows (``--rows``: 1, a 512-token sample, 8 of them);
* ``dequantise``: ``bitsandbytes.functional.dequantize_4bit`` of the weight alone (what each call > 1 row pays);
* ``dense``: the same rows through an ``nn.Linear`` holding the dequantised weight (what caching the dequantised
  layer would cost per call; it computes the same numbers: ``bitsandbytes`` multiplies with exactly that weight);

and prints milliseconds per call, the ratio ``nf4 / dense``, the dequantisation's share of an NF4 call, and the
memory a cached dequantised copy takes beside the 4-bit codes. It runs on the CPU (``bitsandbytes`` >= 0.45 has
CPU kernels) and on CUDA::

    python scripts/bench_nf4.py                                      # CPU, bf16
    python scripts/bench_nf4.py --device cuda --rows 1 512 4096 32768 --backward
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

#: the (in, out) features of LLaMA-2-7B's layers, and a tiny one for a dry run
SHAPES = {"up": (4096, 11008), "down": (11008, 4096), "qkvo": (4096, 4096), "tiny": (64, 128)}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _time(fn, device: str, repeats: int, warmup: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def nf4_layer(in_features: int, out_features: int, dtype: torch.dtype, device: str, seed: int = 0):
    """``(4-bit layer, dense layer with its dequantised weight)`` of a random weight (std 0.02, as LLaMA's)."""
    import bitsandbytes as bnb
    from bitsandbytes.functional import dequantize_4bit

    generator = torch.Generator().manual_seed(seed)
    weight = (torch.randn(out_features, in_features, generator=generator) * 0.02).to(dtype)
    layer = bnb.nn.Linear4bit(in_features, out_features, bias=False, compute_dtype=dtype, quant_type="nf4")
    layer.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4")
    layer = layer.to(device)  # quantised here
    dense = torch.nn.Linear(in_features, out_features, bias=False, device=device, dtype=dtype)
    with torch.no_grad():
        dense.weight.copy_(dequantize_4bit(layer.weight.data, layer.weight.quant_state).to(dtype))
    dense.weight.requires_grad_(False)
    return layer, dense


def measure(shape: str, rows: list[int], dtype: torch.dtype, device: str, repeats: int, warmup: int,
            backward: bool) -> dict:
    """The timings of one layer (module docstring) as data."""
    from bitsandbytes.functional import dequantize_4bit

    in_features, out_features = SHAPES[shape]
    layer, dense = nf4_layer(in_features, out_features, dtype, device)
    state = layer.weight.quant_state
    dequantise = _time(lambda: dequantize_4bit(layer.weight.data, state), device, repeats, warmup)
    out = {"shape": shape, "in": in_features, "out": out_features, "dtype": str(dtype).removeprefix("torch."),
           "device": device, "dequantise_ms": 1e3 * dequantise,
           "nf4_bytes": layer.weight.data.numel() * layer.weight.data.element_size(),
           "dense_bytes": dense.weight.numel() * dense.weight.element_size(), "rows": []}
    for n in rows:
        x = torch.randn(n, in_features, device=device, dtype=dtype, generator=None)
        with torch.no_grad():
            agree = float((layer(x) - dense(x)).abs().max())
        row = {"rows": n, "max_abs_difference": agree}
        for name, module in (("nf4", layer), ("dense", dense)):
            def call(module=module):
                if backward:
                    leaf = x.detach().requires_grad_(True)
                    module(leaf).sum().backward()
                else:
                    with torch.no_grad():
                        module(x)
            row[f"{name}_ms"] = 1e3 * _time(call, device, repeats, warmup)
        out["rows"].append(row)
    return out


def report(data: dict, backward: bool) -> str:
    what = "forward + input gradient" if backward else "forward"
    lines = [f"NF4 layer {data['in']} -> {data['out']} ({data['shape']}), {data['dtype']} on {data['device']}, "
             f"{what}; dequantising the weight alone: {data['dequantise_ms']:.2f} ms",
             f"memory: 4-bit codes {data['nf4_bytes'] / 2**20:.1f} MiB, a dequantised copy "
             f"{data['dense_bytes'] / 2**20:.1f} MiB more", "",
             "| rows per call | nf4 ms | dense (dequantised copy) ms | nf4 / dense | dequantisation / nf4 call | "
             "max abs difference |", "|---|---|---|---|---|---|"]
    for r in data["rows"]:
        calls = 2 if backward else 1  # the backward dequantises again
        share = min(1.0, calls * data["dequantise_ms"] / r["nf4_ms"]) if r["rows"] > 1 else 0.0
        lines.append(f"| {r['rows']} | {r['nf4_ms']:.2f} | {r['dense_ms']:.2f} | {r['nf4_ms'] / r['dense_ms']:.2f} | "
                     f"{'-' if r['rows'] == 1 else f'{100 * share:.0f} %'} | {r['max_abs_difference']:.2g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:k]")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="up",
                        help="which LLaMA-2-7B layer's shape (tiny: a dry run)")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 512, 4096],
                        help="input rows per call (tokens x samples)")
    parser.add_argument("--backward", action="store_true", help="time forward + input gradient (an explanation)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch threads on the CPU")
    parser.add_argument("--json", type=Path, help="also write the measurements to this JSON file")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    data = measure(args.shape, args.rows, getattr(torch, args.dtype), args.device, args.repeats, args.warmup,
                   args.backward)
    data["threads"] = torch.get_num_threads()
    print(report(data, args.backward))
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
