#!/usr/bin/env python
"""Reference AttnLRP relevance from upstream ``lxt`` (LRP-eXplains-Transformers 2.1) on the tiny fixture LLaMAs.

Purpose: show that ``palrp_bench.explain(model, ids, method="attnlrp")`` agrees with AttnLRP *as its authors
implement it* (PROTOCOL.md section 1, row "AttnLRP"; DESIGN.md first table). The comparison itself runs in the
main venv (tests/methods/test_lxt_agreement.py); this script only produces the saved reference outputs
(tests/data/reference_lxt/lxt_attnlrp.npz).

Run it ONLY with the separate lxt virtualenv: lxt 2.1 needs transformers 4.5x and patches ``modeling_llama``
process-wide, so it can never be a dependency of palrp_bench (docs/reference_lxt.md)::

    python3 -m venv /work/lxt-venv
    /work/lxt-venv/bin/pip install -r scripts/reference_lxt_requirements.txt
    /work/lxt-venv/bin/python scripts/reference_lxt.py

Every phase below runs in its own fresh subprocess (lxt's patches cannot be undone), for both fixture models
(``llama_causal``, ``llama_cls``), dtypes float32/float64 and Hugging Face attention implementations eager/sdpa,
on every fixture sequence (batch size 1, unpadded):

* ``attnlrp``: the lxt README / quickstart recipe for LLaMA, verbatim in substance:
  ``lxt.efficient.monkey_patch(modeling_llama)``, forward from ``inputs_embeds`` (a leaf), ``max_logit.backward()``
  (seed gradient 1: the logit itself is the starting relevance), relevance ``(inputs_embeds * grad).sum(-1)``.
  The explained logit is the arg-max at the last position (causal LM: next token; classifier: Hugging Face pools
  the last position when given ``inputs_embeds``, which for unpadded sequences is the last real token).
* ``cp_lrp``: the same with lxt's own CP-LRP map (``lxt.efficient.models.llama.cp_LRP``).
* ``gxi``: no patch at all (plain Gradient x Input of the unmodified Hugging Face model): shows the patch matters.
* ``attnlrp_f64norm`` (float64 only, diagnostic): lxt's AttnLRP map with ONE change, RMSNorm statistics kept in
  float64 instead of lxt's float32 cast, to isolate that cast as a source of the float64 residual difference.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # fixture folders are local; never touch the network
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "tests" / "data" / "official" / "nlp"
DEFAULT_OUT = REPO / "tests" / "data" / "reference_lxt" / "lxt_attnlrp.npz"
MODELS = {"llama_causal": "ids_causal.json", "llama_cls": "ids_cls.json"}
DTYPES = {"float32": torch.float32, "float64": torch.float64}
ATTENTION = ("eager", "sdpa")

RECIPE = ("model = modeling_llama.Llama{ForCausalLM|ForSequenceClassification}.from_pretrained(folder, "
          "torch_dtype=dtype, attn_implementation=attn).eval(); params requires_grad=False; "
          "embeds = model.get_input_embeddings()(ids).detach().requires_grad_(); "
          "logit = model(inputs_embeds=embeds, use_cache=False).logits[0, -1 (causal) | 0 (cls)].max(); "
          "logit.backward(); relevance = (embeds * embeds.grad).sum(-1)")
PHASES = {  # phase -> (patch applied before loading, dtypes)
    "gxi": ("none (unmodified transformers)", tuple(DTYPES)),
    "attnlrp": ("from lxt.efficient import monkey_patch; monkey_patch(modeling_llama)", tuple(DTYPES)),
    "cp_lrp": ("from lxt.efficient.models.llama import cp_LRP; monkey_patch(modeling_llama, patch_map=cp_LRP)",
               tuple(DTYPES)),
    "attnlrp_f64norm": ("monkey_patch(modeling_llama, patch_map={**attnLRP, LlamaRMSNorm: partial(patch_method, "
                        "rms_norm_forward_keep_float64)})  # diagnostic, float64 only", ("float64",)),
}


def fail(problem: str, fix: str) -> None:
    """One-line error (problem -- fix) and a non-zero exit, in the spirit of palrp_bench.errors."""
    print(f"error: {problem} -- {fix}", file=sys.stderr)
    raise SystemExit(2)


def rms_norm_forward_keep_float64(self, hidden_states):
    """lxt's RMSNorm rule (normaliser constant) with statistics in max(input dtype, float32) instead of float32.

    Only for the ``attnlrp_f64norm`` diagnostic: lxt 2.1, like Hugging Face, computes RMSNorm in float32 even for
    a float64 model, which bounds how closely a float64 run can agree with palrp-bench (which keeps float64).
    """
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.promote_types(input_dtype, torch.float32))
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon).detach()
    return self.weight * hidden_states.to(input_dtype)


def apply_patch(phase: str) -> None:
    """Patch ``modeling_llama`` for ``phase`` (process-wide and irreversible: one phase per process)."""
    from functools import partial

    from transformers.models.llama import modeling_llama
    if phase == "gxi":
        return
    from lxt.efficient import monkey_patch
    from lxt.efficient.models import llama as lxt_llama
    if phase == "attnlrp":
        monkey_patch(modeling_llama, verbose=True)  # default map = lxt_llama.attnLRP
    elif phase == "cp_lrp":
        monkey_patch(modeling_llama, patch_map=lxt_llama.cp_LRP, verbose=True)
    elif phase == "attnlrp_f64norm":
        from lxt.efficient.patches import patch_method
        patch_map = dict(lxt_llama.attnLRP)
        patch_map[modeling_llama.LlamaRMSNorm] = partial(patch_method, rms_norm_forward_keep_float64)
        monkey_patch(modeling_llama, patch_map=patch_map, verbose=True)
    else:
        fail(f"unknown phase {phase!r}", f"use one of: {', '.join(PHASES)}")


def load_model(folder: Path, dtype: torch.dtype, attn: str):
    """Load a fixture model (save_pretrained folder) with the given dtype and HF attention implementation."""
    from transformers.models.llama import modeling_llama
    cls = (modeling_llama.LlamaForSequenceClassification if folder.name == "llama_cls"
           else modeling_llama.LlamaForCausalLM)
    try:
        model = cls.from_pretrained(folder, torch_dtype=dtype, attn_implementation=attn)
    except OSError as err:
        fail(f"cannot load fixture model {folder}: {str(err).splitlines()[0]}",
             "pass --data-dir pointing at tests/data/official/nlp of a palrp-bench checkout")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def relevance_of(model, ids: list[int]) -> tuple[np.ndarray, int, float]:
    """The lxt README recipe on one sequence: returns (relevance [T] float64, explained index, logit)."""
    input_ids = torch.tensor([ids])
    embeds = model.get_input_embeddings()(input_ids).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds, use_cache=False).logits
    row = logits[0] if logits.dim() == 2 else logits[0, -1]  # classifier [1, C]; causal LM [1, T, V]
    logit, index = torch.max(row, dim=-1)
    logit.backward()
    rel = (embeds.detach().double() * embeds.grad.double()).sum(-1)[0]  # float64 sum: a sharper reference
    return rel.numpy(), int(index), float(logit.detach())


def run_phase(phase: str, data_dir: Path) -> dict:
    """Patch for ``phase`` and fill ``{model}.{dtype}.{attn}.{phase}.{relevance|pred|logit}`` for all configs."""
    apply_patch(phase)
    out: dict = {}
    for name, ids_file in MODELS.items():
        seqs = json.loads((data_dir / ids_file).read_text())
        for dname in PHASES[phase][1]:
            for attn in ATTENTION:
                model = load_model(data_dir / name, DTYPES[dname], attn)
                results = [relevance_of(model, seq) for seq in seqs]
                key = f"{name}.{dname}.{attn}.{phase}"
                out[f"{key}.relevance"] = np.concatenate([r for r, _, _ in results])
                out[f"{key}.pred"] = np.asarray([p for _, p, _ in results], dtype=np.int64)
                out[f"{key}.logit"] = np.asarray([lg for _, _, lg in results], dtype=np.float64)
                print(f"{key}: preds {out[f'{key}.pred'].tolist()}, "
                      f"logits {np.round(out[f'{key}.logit'], 6).tolist()}", flush=True)
    return out


def versions() -> dict:
    import importlib.metadata as md

    import transformers
    return {"lxt": md.version("lxt"), "transformers": transformers.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                        help="folder with llama_causal/, llama_cls/, ids_causal.json, ids_cls.json")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the .npz to write")
    parser.add_argument("--phase", choices=tuple(PHASES), help=argparse.SUPPRESS)  # internal: one subprocess
    args = parser.parse_args(argv)
    try:
        import lxt.efficient  # noqa: F401
    except ImportError as err:
        fail(f"cannot import lxt ({err})", "run this script with the separate lxt venv: "
             "/work/lxt-venv/bin/python scripts/reference_lxt.py (docs/reference_lxt.md)")
    for name, ids_file in MODELS.items():
        for needed in (args.data_dir / ids_file, args.data_dir / name / "config.json"):
            if not needed.is_file():
                fail(f"missing {needed}", "pass --data-dir pointing at tests/data/official/nlp")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if args.phase is not None:  # child process: one phase, written where the parent asked
        np.savez(args.out, **run_phase(args.phase, args.data_dir))
        return
    merged: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for phase in PHASES:
            part = Path(tmp) / f"{phase}.npz"
            subprocess.run([sys.executable, __file__, "--phase", phase, "--data-dir", str(args.data_dir),
                            "--out", str(part)], check=True)
            with np.load(part) as data:
                merged.update({k: data[k] for k in data.files})
    for name, ids_file in MODELS.items():
        seqs = json.loads((args.data_dir / ids_file).read_text())
        merged[f"{name}.offsets"] = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int64)
    merged["versions"] = np.asarray(json.dumps(versions()))
    merged["recipe"] = np.asarray(RECIPE)
    merged["phases"] = np.asarray(json.dumps({p: patch for p, (patch, _) in PHASES.items()}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **merged)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); versions {versions()}")


if __name__ == "__main__":
    main()
