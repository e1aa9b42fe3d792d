#!/usr/bin/env python
"""Cost of one attribution: grad_x_input vs attnlrp vs pa_lrp, measured in the same run, per model family.

For each family, sequence length and ``--checkpoint`` mode: milliseconds per attribution (median of --repeats after
--warmup; ``--no-time`` skips it) and peak memory over the built model (CUDA: torch.cuda.max_memory_allocated; CPU:
in a fresh process, the peak resident memory of the attribution minus the resident memory before it, from the
kernel's max RSS where the attribution set it, else sampled every millisecond; ``--no-memory`` skips it), and the
ratio to plain Gradient x Input with the same checkpointing. Parameters are frozen for every method, so the
floor is one forward plus one input-gradient backward. Target (docs/engine.md): pa_lrp <= 1.15x grad_x_input;
memory linear in length (fused SDPA: no attention matrix is materialised).

Families (``--family``, several at once or ``all``): random causal LMs of each RoPE decoder family with the
``--preset`` sizes and the family's own features switched on as in its real checkpoints (Qwen2 biases, Qwen3 and
Gemma 3 q/k norms, Gemma 2 soft-capping and local/global layers, Phi-3 fused projections and sliding window,
GPT-NeoX parallel residual and partial rotary), the mixture-of-experts Mixtral (8 experts of the preset's MLP width,
2 chosen per token), GPT-2, OPT, BLOOM, BERT, and the encoder-decoder T5 (v1.1 / Flan-T5:
gated GELU, untied head, relative position bias; ``--lengths`` are its encoder tokens, ``--decoder-length`` its
decoder tokens, the explained logit the last decoder position's; ``--preset flan_t5_small`` / ``flan_t5_base`` give
those checkpoints' shapes).

    python scripts/bench_attribution.py                       # tiny-ish random LLaMA on CPU, 512 and 2048
    python scripts/bench_attribution.py --family all --lengths 512 --no-memory     # every family, one length
    python scripts/bench_attribution.py --preset tinyllama --device cuda --dtype bfloat16 --lengths 512 2048 4096
    python scripts/bench_attribution.py --lengths 128 512 --methods grad_x_input attnlrp integrated_gradients \
        smoothgrad attn_rollout grad_attn_rollout grad_cam atman   # the baselines (docs/baselines.md)
    python scripts/bench_attribution.py --family gpt2 --preset gpt2 --lengths 128 512 \
        --methods grad_x_input alti_logit alti                     # ALTI-Logit / ALTI (docs/baselines.md)
    python scripts/bench_attribution.py --family t5 --preset flan_t5_small --lengths 512 2048 --threads 1
    python scripts/bench_attribution.py --preset tiny --lengths 4096 8192 16384 --checkpoint none layers \
        --methods grad_x_input pa_lrp --no-time        # peak memory with and without checkpointing (long contexts)

``--methods`` takes any method that fits a language model (multi-pass baselines run ``--forward-batch`` rows per
forward: IG and SmoothGrad cost their steps / samples, AtMan one forward per token), and ``library_autograd``:
plain Gradient x Input through the unmodified Hugging Face model (its own attention and, for mixtures of experts,
its default experts kernels), the floor without the twin (decoders only)::

    python scripts/bench_attribution.py --family mixtral --lengths 512 2048 --threads 1 \
        --methods grad_x_input attnlrp pa_lrp library_autograd      # docs/engine.md "Mixture of experts"
 ``--json PATH`` also writes the
settings and every row as data, rewritten after each row (a run that dies keeps the rows it finished).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import threading
import gc
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import transformers

from ..api import explain
from ..atomic_io import write_json_atomic
from ..lrp.recompute import CHECKPOINTS
from ..lrp.rules import FUSED_STABILIZER_MODES, FUSED_STABILIZERS_ENV

PRESETS = {
    # the shapes of the tests' tiny models, scaled up a little (per-call overheads dominate)
    "tiny": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000),
    # small enough for a laptop CPU, large enough that matmuls dominate
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=4, vocab_size=32000),
    # TinyLlama 1.1B shapes (random weights)
    "tinyllama": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000),
    # GPT-2 (124M) shapes; --family gpt2 gives the model itself with random weights
    "gpt2": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12, vocab_size=50257),
    # Flan-T5-small / -base shapes (encoder and decoder layers each; --family t5)
    "flan_t5_small": dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=6,
                          head_dim=64, vocab_size=32128),
    "flan_t5_base": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                         head_dim=64, vocab_size=32128),
    # LLaMA-2 7B shapes
    "llama2_7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, vocab_size=32000),
}
METHODS = ("grad_x_input", "attnlrp", "pa_lrp")
#: the pseudo-method of plain autograd through the library model (module docstring)
LIBRARY = "library_autograd"
#: per family: (config class, model class, config overrides on top of the preset); head_dim 32 everywhere
#: (hidden 256 / 8 heads in the small preset), windows and soft-caps as in the real checkpoints
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": None}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"head_dim": None, "query_pre_attn_scalar": None,
                                                    "sliding_window": 4096, "attn_logit_softcapping": 50.0,
                                                    "final_logit_softcapping": 30.0}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": None, "query_pre_attn_scalar": None,
                                                         "sliding_window": 1024}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"sliding_window": 2047, "vocab_size": 32064}),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"num_key_value_heads": None,
                                                         "intermediate_size": "4x"}),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", {"sliding_window": None, "num_local_experts": 8,
                                                        "num_experts_per_tok": 2}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"num_key_value_heads": None, "intermediate_size": None}),
    "opt": ("OPTConfig", "OPTForCausalLM", {"num_key_value_heads": None, "intermediate_size": None, "ffn_dim": "4x"}),
    "bloom": ("BloomConfig", "BloomForCausalLM", {"num_key_value_heads": None, "intermediate_size": None}),
    "bert": ("BertConfig", "BertForSequenceClassification", {"num_key_value_heads": None, "intermediate_size": "4x"}),
    "t5": ("T5Config", "T5ForConditionalGeneration", {"num_key_value_heads": None, "feed_forward_proj": "gated-gelu",
                                                      "tie_word_embeddings": False, "decoder_start_token_id": 0}),
}
#: T5's names for the preset's sizes (its config has no position table)
T5_NAMES = {"hidden_size": "d_model", "intermediate_size": "d_ff", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "head_dim": "d_kv"}


def family_config(family: str, preset: str, max_len: int):
    """The preset's sizes in ``family``'s config class (``None`` overrides drop a key or take the head size;
    ``"4x"`` is GPT-NeoX's MLP width)."""
    cfg_cls, _, extra = FAMILIES[family]
    sizes = dict(PRESETS[preset])
    if LAYERS["n"]:
        sizes["num_hidden_layers"] = LAYERS["n"]
    head_dim = sizes["hidden_size"] // sizes["num_attention_heads"]
    for key, value in extra.items():
        if value is None and key in ("head_dim", "query_pre_attn_scalar"):
            sizes[key] = head_dim
        elif value is None:
            sizes.pop(key, None)
        elif value == "4x":
            sizes[key] = 4 * sizes["hidden_size"]
        else:
            sizes[key] = value
    if family == "t5":
        sizes.setdefault("head_dim", head_dim)
        return getattr(transformers, cfg_cls)(**{T5_NAMES.get(k, k): v for k, v in sizes.items()})
    return getattr(transformers, cfg_cls)(**sizes, max_position_embeddings=max(max_len, 4096))


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


class RssSampler(threading.Thread):
    """Samples this process's resident memory every millisecond (CPU peak-memory probe)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = current_rss_mb()
        self.running = True

    def run(self):
        while self.running:
            self.peak = max(self.peak, current_rss_mb())
            time.sleep(0.001)

    def stop(self) -> float:
        self.running = False
        self.join()
        return max(self.peak, current_rss_mb())


FORWARD_BATCH = {"rows": None}  # rows per forward of multi-pass baselines (--forward-batch)
STABILIZERS = {"choice": None}  # epsilon-rule stabilisers (--stabilizers; None = protocol=official's family default)
LAYERS = {"n": 0}  # layers overriding the preset's (--layers; 0 = the preset's)


def time_once(model, ids, method, device, checkpoint="none") -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    attribute(model, ids, method, checkpoint)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1000


def attribute(model, ids, method, checkpoint="none"):
    """One attribution of the batch ``ids`` (an encoder-decoder's: ``(encoder ids, decoder ids)``)."""
    if method == LIBRARY:  # embeddings * grad of the arg-max next-token logit, the unmodified model
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        with torch.enable_grad():
            logits = model(inputs_embeds=embeds, use_cache=False, logits_to_keep=1).logits[:, -1]
            grad, = torch.autograd.grad(logits.max(-1).values.sum(), embeds)
        return (embeds.detach() * grad).sum(-1)
    decoder = {}
    if isinstance(ids, tuple):
        ids, decoder = ids[0], {"decoder_input_ids": ids[1]}
    return explain(model, ids, method=method, batch_size=FORWARD_BATCH["rows"], stabilizers=STABILIZERS["choice"],
                   checkpoint=checkpoint, **decoder)


def peak_memory_mb(args, length, method, checkpoint="none") -> float:
    """Extra peak memory of one attribution. CUDA: allocator high-water mark. CPU: in a fresh process
    (``--_memory-probe``, :func:`probe_memory`)."""
    if args.device.startswith("cuda"):
        model, ids = build(args, length)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        attribute(model, ids, method, checkpoint)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    cmd = [sys.executable, "-m", __name__, "--_memory-probe", method, "--preset", args.preset, "--lengths", str(length),
           "--batch", str(args.batch), "--dtype", args.dtype, "--device", args.device, "--family", args.family,
           "--forward-batch", str(args.forward_batch), "--decoder-length", str(args.decoder_length),
           "--checkpoint", checkpoint, "--layers", str(args.layers)] \
        + (["--stabilizers", args.stabilizers] if args.stabilizers else []) \
        + (["--threads", str(args.threads)] if args.threads else [])
    # glibc's mmap threshold fixed at 64 KiB: every tensor gets its own mapping, returned at once when freed (the
    # default threshold grows after the first large free, and the heap then keeps freed tensors resident)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 * 1024)}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout.strip().splitlines()[-1]
    return float(out)


def max_rss_mb() -> float:
    """The kernel's peak resident memory of this process so far (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def probe_memory(args, method: str, checkpoint: str) -> float:
    """MiB one attribution adds to the resident memory of this fresh process at its peak: built model, freed what
    building left behind, then the peak during the attribution minus the resident memory just before it. The
    peak is the kernel's max RSS where the attribution raised it (exact), else the millisecond samples (building
    the model peaked higher). The parent starts this process with glibc's mmap threshold fixed
    (:func:`peak_memory_mb`), so the resident memory follows the live tensors."""
    model, ids = build(args, args.lengths[0])
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    base, before = current_rss_mb(), max_rss_mb()
    sampler = RssSampler()
    sampler.start()
    attribute(model, ids, method, checkpoint)
    sampled, after = sampler.stop(), max_rss_mb()
    return (after if after > before else sampled) - base


def build(args, length):
    cfg = family_config(args.family, args.preset, max(args.lengths))
    torch.manual_seed(0)
    device = torch.device(args.device)
    model_cls = getattr(transformers, FAMILIES[args.family][1])
    # drawn on the device in the benchmark's dtype: a 7B model drawn in float32 on the CPU first takes minutes per
    # build (1.1B: 46 s on 2 cores), and the bench builds one model per length and per memory probe
    with torch.device(device):
        model = model_cls._from_config(cfg, dtype=getattr(torch, args.dtype)).eval()
    model.requires_grad_(False)  # frozen parameters for every method: the floor is forward + input-grad backward
    ids = torch.randint(3, cfg.vocab_size, (args.batch, length), device=device)
    ids[:, 0] = 1
    if getattr(cfg, "is_encoder_decoder", False):  # the decoder start token and an answer so far
        decoder = torch.randint(3, cfg.vocab_size, (args.batch, args.decoder_length), device=device)
        decoder[:, 0] = cfg.decoder_start_token_id
        return model, (ids, decoder)
    return model, ids


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS),
                    help="methods to compare (first row of each length is the ratio's reference if grad_x_input "
                         "is not among them)")
    ap.add_argument("--forward-batch", type=int, default=32, help="rows per forward of multi-pass baselines")
    ap.add_argument("--family", nargs="+", default=["llama"], choices=[*FAMILIES, "all"],
                    help="decoder families to measure (random causal LMs with the preset's sizes)")
    ap.add_argument("--decoder-length", type=int, default=1,
                    help="decoder tokens of an encoder-decoder (t5), the start token first (default 1: the first "
                         "answer token is explained, as in AttnLRP's SQuAD v2 protocol)")
    ap.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory probes")
    ap.add_argument("--layers", type=int, default=0, help="layers instead of the preset's (0: the preset's)")
    ap.add_argument("--no-time", dest="time", action="store_false",
                    help="skip the timings (memory only: long lengths on a CPU)")
    ap.add_argument("--checkpoint", nargs="+", choices=list(CHECKPOINTS), default=["none"],
                    help="layer checkpointing of the explanations, one row set per mode (docs/engine.md, 'Long "
                         "contexts'); ratios are to grad_x_input with the same mode")
    ap.add_argument("--stabilizers", choices=["official", "none"], default=None,
                    help="epsilon-rule stabilisers of the LRP rules (default: protocol=official's, i.e. official for "
                         "llama and none for the families the official code never ran)")
    ap.add_argument("--fused", choices=FUSED_STABILIZER_MODES, default=None,
                    help=f"how the stabilisers' backward runs (${FUSED_STABILIZERS_ENV}; default: as set, else auto: "
                         "one compiled kernel on CUDA, eager elsewhere; docs/engine.md)")
    ap.add_argument("--json", type=Path, help="also write the settings and the rows to this JSON file")
    ap.add_argument("--_memory-probe", dest="memory_probe", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    FORWARD_BATCH["rows"] = args.forward_batch
    STABILIZERS["choice"] = args.stabilizers
    LAYERS["n"] = args.layers
    if args.fused:
        os.environ[FUSED_STABILIZERS_ENV] = args.fused  # the memory probes (child processes) inherit it
    methods = tuple(args.methods)
    reference = "grad_x_input" if "grad_x_input" in methods else methods[0]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    families = list(FAMILIES) if "all" in args.family else args.family
    if args.memory_probe:
        args.family = families[0]
        print(probe_memory(args, args.memory_probe, args.checkpoint[0]))
        return
    sizes = PRESETS[args.preset]
    settings = {"preset": args.preset, "layers": args.layers or sizes["num_hidden_layers"], "hidden": sizes["hidden_size"],
                "dtype": args.dtype, "device": str(device), "batch": args.batch, "threads": torch.get_num_threads(),
                "torch": torch.__version__, "transformers": transformers.__version__,
                "stabilizers": args.stabilizers or "default (official on llama, none elsewhere)",
                "fused": os.environ.get(FUSED_STABILIZERS_ENV, "auto"), "reference": reference,
                "warmup": args.warmup, "repeats": args.repeats,
                "peak_mib": ("extra peak of one attribution over the built model: "
                             + ("allocator high-water mark" if device.type == "cuda"
                                else "peak RSS growth of a fresh process") if args.memory else "not measured"),
                "checkpoint": list(args.checkpoint)}
    if device.type == "cuda":
        settings["gpu"] = torch.cuda.get_device_name(device)
    print("# " + " ".join(f"{k}={settings[k]}" for k in ("preset", "layers", "hidden", "dtype", "device", "batch",
                                                          "threads", "torch", "transformers", "stabilizers",
                                                          "fused")))
    rows = []
    print(f"| family | length | checkpoint | method | ms / attribution | ratio vs {reference} | peak mem (MiB) |")
    print("|---|---:|---|---|---:|---:|---:|")
    runs = [(m, c) for c in args.checkpoint for m in methods]
    for family in families:
        args.family = family
        for length in args.lengths:
            ms = {run: None for run in runs}
            if args.time:
                model, ids = build(args, length)
                for _ in range(args.warmup):
                    for m, c in runs:
                        time_once(model, ids, m, device, c)
                times = {run: [] for run in runs}
                for _ in range(args.repeats):  # interleaved, so drifting machine load hits every method alike
                    for m, c in runs:
                        times[(m, c)].append(time_once(model, ids, m, device, c))
                ms = {run: statistics.median(t) for run, t in times.items()}
                del model
            for m, c in runs:
                peak = peak_memory_mb(args, length, m, c) if args.memory else None
                base = ms[(reference, c)]
                ratio = None if ms[(m, c)] is None else ms[(m, c)] / base
                print(f"| {family} | {length} | {c} | {m} | {_fmt(ms[(m, c)], '.1f')} | {_fmt(ratio, '.3f')} | "
                      f"{_fmt(peak, '.0f')} |", flush=True)
                rows.append({"family": family, "length": length, "checkpoint": c, "method": m, "ms": ms[(m, c)],
                             "ratio": ratio, "peak_mib": peak})
                if args.json:
                    write_json_atomic(args.json, {**settings, "rows": rows})


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


if __name__ == "__main__":
    main()
