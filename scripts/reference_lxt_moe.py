#!/usr/bin/env python
"""Reference AttnLRP relevance from upstream ``lxt``'s Qwen3-MoE map on a tiny random Qwen3-MoE.

Purpose: show that ``palrp_bench.explain(model, ids, method="attnlrp")`` treats a mixture-of-experts block (router,
experts, the gate * expert product) as AttnLRP's authors do (docs/engine.md, "Mixture of experts"). The comparison
runs in the main venv without lxt (tests/methods/test_lxt_moe_agreement.py); this script produces the saved model
(tests/data/reference_lxt/models/qwen3_moe_causal/) and lxt's outputs (tests/data/reference_lxt/lxt_qwen3_moe.npz).

lxt 2.1 on PyPI has no Qwen3-MoE map: it was added upstream afterwards (``lxt/efficient/models/qwen3_moe.py``) for
transformers 5's fused experts, so this reference runs lxt from the repository (commit
f04344177551bfcc3665e88afe96501f43fe560b, "update to transformers==5.9.0") with transformers 5.9.0, in its own venv
(lxt patches transformers process-wide; docs/reference_lxt.md, "Qwen3-MoE")::

    python3 -m venv ../lxt-moe-venv
    ../lxt-moe-venv/bin/pip install -r scripts/reference_lxt_moe_requirements.txt
    ../lxt-moe-venv/bin/python scripts/reference_lxt_moe.py --build-model   # the model, then the reference

Phases, each in a fresh subprocess (lxt's patches cannot be undone), for float32 / float64 and Hugging Face
attention eager / sdpa, on three unpadded sequences (batch size 1), the experts through transformers' eager loop
(its grouped kernels refuse float64; lxt's map replaces the experts' forward anyway):

* ``attnlrp``: ``monkey_patch(modeling_qwen3_moe)`` (lxt's default map ``qwen3_moe.attnLRP``), forward from
  ``inputs_embeds``, ``logits[0, -1].max().backward()``, relevance ``(inputs_embeds * grad).sum(-1)``;
* ``gxi``: no patch (plain Gradient x Input of the unmodified model).

lxt's Qwen3-MoE file defines no CP-LRP map (it is commented out), hence no ``cp_lrp`` phase.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from reference_lxt import describe_patch_map, fail, perturb_biases_and_norms, versions

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = REPO / "tests" / "data" / "reference_lxt" / "models" / "qwen3_moe_causal"
OUT = REPO / "tests" / "data" / "reference_lxt" / "lxt_qwen3_moe.npz"
NAME = "qwen3_moe_causal"
LXT_COMMIT = "f04344177551bfcc3665e88afe96501f43fe560b"
#: 2 layers, hidden 64, GQA 4/2 with head_dim 16 and per-head q/k norms; 6 experts of width 24, 2 chosen per token,
#: renormalised (Qwen3-30B-A3B's norm_topk_prob)
CONFIG = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64,
          "initializer_range": 0.1, "rms_norm_eps": 1e-6, "num_experts": 6, "num_experts_per_tok": 2,
          "moe_intermediate_size": 24, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
SEED, SEQ_SEED, LENGTHS = 21, 4321, (8, 12, 10)
DTYPES = {"float32": torch.float32, "float64": torch.float64}
ATTENTION = ("eager", "sdpa")
PHASES = {"gxi": "none (unmodified transformers)",
          "attnlrp": "from lxt.efficient import monkey_patch; monkey_patch(modeling_qwen3_moe)  # qwen3_moe.attnLRP"}
RECIPE = ("model = modeling_qwen3_moe.Qwen3MoeForCausalLM.from_pretrained(folder, dtype=dtype, "
          "attn_implementation=attn, experts_implementation='eager').eval(); params requires_grad=False; "
          "embeds = model.get_input_embeddings()(ids).detach().requires_grad_(); "
          "logit = model(inputs_embeds=embeds, use_cache=False).logits[0, -1].max(); logit.backward(); "
          "relevance = (embeds * embeds.grad).sum(-1) (float64 sum)")


def sequences() -> list[list[int]]:
    gen = torch.Generator().manual_seed(SEQ_SEED)
    return [torch.randint(4, CONFIG["vocab_size"], (n,), generator=gen).tolist() for n in LENGTHS]


def build_model() -> None:
    """The tiny model from its config (seeded, norm gains perturbed), saved with ``save_pretrained``."""
    import transformers

    torch.manual_seed(SEED)
    model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**CONFIG)).eval()
    perturb_biases_and_norms(model, SEED)
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(MODEL_DIR)
    print(f"saved {MODEL_DIR}")


def run_phase(phase: str) -> dict:
    """One phase, every dtype and attention implementation (child process: the patch is process-wide)."""
    from transformers.models.qwen3_moe import modeling_qwen3_moe

    if phase == "attnlrp":
        from lxt.efficient import monkey_patch
        monkey_patch(modeling_qwen3_moe, verbose=True)
    elif phase != "gxi":
        fail(f"unknown phase {phase!r}", f"use one of: {', '.join(PHASES)}")
    out = {}
    for dtype in DTYPES:
        for attn in ATTENTION:
            model = modeling_qwen3_moe.Qwen3MoeForCausalLM.from_pretrained(
                MODEL_DIR, dtype=DTYPES[dtype], attn_implementation=attn, experts_implementation="eager").eval()
            for p in model.parameters():
                p.requires_grad_(False)
            rel, preds, logits = [], [], []
            for ids in sequences():
                embeds = model.get_input_embeddings()(torch.tensor([ids])).detach().requires_grad_()
                logit, pred = model(inputs_embeds=embeds, use_cache=False).logits[0, -1].max(-1)
                logit.backward()
                rel.append((embeds.detach().double() * embeds.grad.double()).sum(-1)[0].numpy())
                preds.append(int(pred))
                logits.append(float(logit.detach()))
            key = f"{NAME}.{dtype}.{attn}.{phase}"
            out[f"{key}.relevance"] = np.concatenate(rel)
            out[f"{key}.pred"] = np.asarray(preds, dtype=np.int64)
            out[f"{key}.logit"] = np.asarray(logits, dtype=np.float64)
            print(f"{key}: preds {preds}, logits {np.round(logits, 6).tolist()}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-model", action="store_true", help="(re)build the tiny model first")
    parser.add_argument("--out", type=Path, default=OUT, help="the .npz to write")
    parser.add_argument("--phase", help=argparse.SUPPRESS)  # internal: one subprocess
    args = parser.parse_args(argv)
    try:
        from lxt.efficient.models import qwen3_moe
    except ImportError as err:
        fail(f"cannot import lxt's Qwen3-MoE map ({err})", "run this script with the separate venv of "
             "scripts/reference_lxt_moe_requirements.txt (docs/reference_lxt.md, 'Qwen3-MoE')")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if args.phase is not None:
        np.savez(args.out, **run_phase(args.phase))
        return
    if args.build_model:
        build_model()
    if not (MODEL_DIR / "config.json").is_file():
        fail(f"missing {MODEL_DIR}", "pass --build-model once")
    merged: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for phase in PHASES:
            part = Path(tmp) / f"{phase}.npz"
            subprocess.run([sys.executable, __file__, "--phase", phase, "--out", str(part)], check=True)
            with np.load(part) as data:
                merged.update({k: data[k] for k in data.files})
    seqs = sequences()
    merged[f"{NAME}.ids"] = np.concatenate([np.asarray(s, dtype=np.int64) for s in seqs])
    merged[f"{NAME}.offsets"] = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int64)
    merged["versions"] = np.asarray(json.dumps({**versions(), "lxt_commit": LXT_COMMIT}))
    merged["recipe"] = np.asarray(RECIPE)
    merged["phases"] = np.asarray(json.dumps(PHASES))
    merged["patch_map"] = np.asarray(json.dumps(describe_patch_map(qwen3_moe.attnLRP)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **merged)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); versions {versions()}")


if __name__ == "__main__":
    main()
