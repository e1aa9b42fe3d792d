#!/usr/bin/env python
"""Reference AttnLRP relevance from upstream ``lxt`` (LRP-eXplains-Transformers 2.1) on tiny random Transformers.

Purpose: show that ``palrp_bench.explain(model, ids, method="attnlrp")`` agrees with AttnLRP *as its authors
implement it* (docs/protocol.md section 1, row "AttnLRP"; docs/design.md section 2). The comparison itself runs in the
main venv (tests/methods/test_lxt_agreement.py); this script only produces the saved reference outputs
(tests/data/reference_lxt/lxt_attnlrp.npz).

Run it ONLY with the separate lxt virtualenv: lxt 2.1 needs transformers 4.5x and patches ``modeling_llama``
process-wide, so it can never be a dependency of palrp_bench (docs/reference_lxt.md)::

    python3 -m venv ../lxt-venv                          # anywhere outside the project
    ../lxt-venv/bin/pip install -r scripts/reference_lxt_requirements.txt
    ../lxt-venv/bin/python scripts/reference_lxt.py

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

``--suite families`` does the same for the other families lxt 2.1 ships patch maps for (Qwen2, Qwen3, Gemma 3,
GPT-2, BERT; ``lxt/efficient/models/*.py``), on tiny random models this script builds from configs
(``--build-models``, seeded) and saves under tests/data/reference_lxt/models/ together with their token ids
(``ids.json``); outputs go to tests/data/reference_lxt/lxt_families.npz (phases ``gxi``, ``attnlrp``, and ``cp_lrp``
where lxt has a CP-LRP map: not for BERT). The models are saved by transformers 4.57 and must load unchanged in
the main venv's transformers 5.x (docs/reference_lxt.md, section "Other families").
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import partial
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


# ----------------------------------------------------------------------------------------------------------------
# --suite families: tiny random models of the other families lxt 2.1 patches (lxt/efficient/models/*.py)
# ----------------------------------------------------------------------------------------------------------------
FAMILY_DIR = REPO / "tests" / "data" / "reference_lxt" / "models"
FAMILY_OUT = REPO / "tests" / "data" / "reference_lxt" / "lxt_families.npz"
BERT_TOKENS = {"pad": 0, "cls": 1, "sep": 2, "mask": 3}  # special ids of the tiny BERT vocabulary (ids.json too)
FIRST_PLAIN_TOKEN = 4  # random token ids are drawn from [4, vocab_size) for every family
SEQ_SEED = 1234
CAUSAL_LENGTHS = (8, 12, 10)  # all longer than Gemma 3's sliding window (4), so the local layer masks something
BERT_SEGMENTS = ((3, 4), (5, 5), (4, 2))  # (segment A, segment B) lengths: [CLS] A [SEP] B [SEP]
SIZE = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 64, "initializer_range": 0.1}
GQA_DECODER = {"num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6}  # Qwen2, Qwen3, Gemma 3


@dataclass(frozen=True)
class FamilyModel:
    """One tiny model: ``transformers.models.<family>.modeling_<family>.<head>`` built from ``config(**kwargs)``.

    ``target`` says which logit is explained: ``last`` = arg-max over the vocabulary at the last position (causal
    LM), ``mask`` = arg-max over the vocabulary at the single [MASK] position (masked LM), ``pooled`` = arg-max
    over the classes (BERT's classifier pools the [CLS] position through its tanh pooler).
    ``additive`` names learned embeddings added to ``inputs_embeds`` inside the model (kind -> module path); their
    share of the input relevance is stored separately (``relevance_pos`` / ``relevance_type``).
    """

    family: str
    head: str
    config: str
    kwargs: dict
    target: str
    seed: int
    additive: tuple = ()


FAMILY_MODELS = {
    # Qwen2: q/k/v projections carry biases (always on in Qwen2), GQA, RoPE.
    "qwen2_causal": FamilyModel("qwen2", "Qwen2ForCausalLM", "Qwen2Config",
                                {**SIZE, **GQA_DECODER, "rope_theta": 10000.0}, "last", 11),
    # Qwen3: RMSNorm on q and k per head (q_norm, k_norm) before RoPE, explicit head_dim, GQA.
    "qwen3_causal": FamilyModel("qwen3", "Qwen3ForCausalLM", "Qwen3Config",
                                {**SIZE, **GQA_DECODER, "rope_theta": 10000.0}, "last", 12),
    # Gemma 3: (1 + w) RMSNorms (also q/k norms, pre- and post-sublayer norms), embeddings scaled by sqrt(hidden),
    # query_pre_attn_scalar != head_dim, GELU-tanh gated MLP, tied embeddings, one local (sliding window 4, own
    # RoPE base) and one global layer (linear RoPE scaling as in the larger Gemma 3 checkpoints). Gemma 3 has no
    # logit soft-capping (both soft-caps None, as in Google's configs).
    "gemma3_causal": FamilyModel("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig",
                                 {**SIZE, **GQA_DECODER, "query_pre_attn_scalar": 24, "sliding_window": 4,
                                  "layer_types": ["sliding_attention", "full_attention"], "rope_theta": 1e6,
                                  "rope_local_base_freq": 10000.0,
                                  "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, "last", 13),
    # GPT-2: learned absolute positions (wpe), Conv1D projections, pre-LN LayerNorms, GELU (tanh form), tied head.
    "gpt2_causal": FamilyModel("gpt2", "GPT2LMHeadModel", "GPT2Config",
                               {"vocab_size": 128, "n_embd": 64, "n_inner": 128, "n_layer": 2, "n_head": 4,
                                "n_positions": 64, "initializer_range": 0.1, "bos_token_id": 0, "eos_token_id": 0},
                               "last", 14, (("pos", "transformer.wpe"),)),
    # BERT: word + learned position + token-type embeddings, post-LN, GELU, masked-LM head (transform + tied
    # decoder) and sequence classifier ([CLS] pooler with tanh), two segments per sequence.
    "bert_mlm": FamilyModel("bert", "BertForMaskedLM", "BertConfig",
                            {**SIZE, "type_vocab_size": 2, "pad_token_id": BERT_TOKENS["pad"]}, "mask", 15,
                            (("pos", "bert.embeddings.position_embeddings"),
                             ("type", "bert.embeddings.token_type_embeddings"))),
    "bert_cls": FamilyModel("bert", "BertForSequenceClassification", "BertConfig",
                            {**SIZE, "type_vocab_size": 2, "pad_token_id": BERT_TOKENS["pad"], "num_labels": 3},
                            "pooled", 16,
                            (("pos", "bert.embeddings.position_embeddings"),
                             ("type", "bert.embeddings.token_type_embeddings"))),
}
FAMILY_RECIPE = {
    "common": "from lxt.efficient import monkey_patch; monkey_patch(modeling_<family>[, patch_map=...]) (nothing "
              "for gxi); model = modeling_<family>.<Head>.from_pretrained(folder, torch_dtype=dtype, "
              "attn_implementation=attn).eval() (class looked up AFTER patching: lxt's BERT map replaces the "
              "module's classes); params requires_grad=False; embeds = model.get_input_embeddings()(ids).detach()"
              ".requires_grad_(); logits = model(inputs_embeds=embeds, **extra).logits; logit = <target>.max(); "
              "logit.backward(); relevance = (embeds * embeds.grad).sum(-1) (float64 sum)",
    "last": "causal LM: extra = use_cache=False; logit = logits[0, -1].max() (next-token arg-max)",
    "mask": "masked LM: extra = token_type_ids; logit = logits[0, t].max() with t the single position whose id "
            "is [MASK]=3",
    "pooled": "classifier: extra = token_type_ids; logit = logits[0].max() (pooler reads position 0, [CLS])",
    "gemma3": "get_input_embeddings() is Gemma3TextScaledWordEmbedding: embeds already include the sqrt(64)=8 "
              "scale, and the model does not rescale inputs_embeds; embeds * grad is invariant to that scale",
    "additive": "relevance covers ONLY the word embeddings (the leaf). Learned embeddings added inside the model "
                "(GPT-2 wpe; BERT position and token-type) get the same gradient as the leaf (the sum's "
                "gradient); relevance_pos / relevance_type = (E_pos[arange(T)] * embeds.grad).sum(-1) and "
                "(E_type[token_type_ids] * embeds.grad).sum(-1), float64 sum; word + pos + type = relevance of "
                "the summed embedding",
    "logits_full": "gxi phase (unpatched), eager: every output logit of every sequence, in the model dtype "
                   "(causal / masked LM [sum T, V] concatenated; classifier [n_seq, C])",
}


def family_phases(family: str) -> dict:
    """Phase -> patch call, for the maps lxt 2.1 ships for ``family`` (BERT has no CP-LRP map)."""
    import importlib

    maps = importlib.import_module(f"lxt.efficient.models.{family}")
    phases = {"gxi": "none (unmodified transformers)",
              "attnlrp": f"monkey_patch(modeling_{family})  # default map = lxt.efficient.models.{family}.attnLRP"}
    if hasattr(maps, "cp_LRP"):
        phases["cp_lrp"] = (f"monkey_patch(modeling_{family}, "
                            f"patch_map=lxt.efficient.models.{family}.cp_LRP)")
    return phases


def describe_patch_map(patch_map: dict) -> dict:
    """lxt patch map -> {patched target: what replaces it}, read from the map's objects (the exact map used)."""
    def name(obj) -> str:
        return getattr(obj, "__name__", repr(obj))

    out = {}
    for target, patch in patch_map.items():
        if isinstance(patch, partial):
            args = [name(a) for a in patch.args] + [f"{k}={v!r}" for k, v in patch.keywords.items()]
            out[name(target)] = f"{name(patch.func)}({', '.join(args)})"
        else:
            out[name(target)] = name(patch)
    return out


def family_patch_maps() -> dict:
    """{family: {phase: described patch map}} for every family and phase used."""
    import importlib

    out: dict = {}
    for family in sorted({spec.family for spec in FAMILY_MODELS.values()}):
        maps = importlib.import_module(f"lxt.efficient.models.{family}")
        out[family] = {"attnlrp": describe_patch_map(maps.attnLRP)}
        if hasattr(maps, "cp_LRP"):
            out[family]["cp_lrp"] = describe_patch_map(maps.cp_LRP)
    return out


def perturb_biases_and_norms(model, seed: int) -> None:
    """Make every bias and every norm gain non-trivial (HF initialises them to 0 and 1, or 0 for Gemma's (1+w)).

    Biases ~ N(0, 0.1^2); norm weights += N(0, 0.1^2). Without this, Qwen2's q/k/v biases, the LayerNorm shifts and
    the norm gains would not be exercised by the reference.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            is_norm = isinstance(module, torch.nn.LayerNorm) or type(module).__name__.endswith("RMSNorm")
            for pname, param in module.named_parameters(recurse=False):
                noise = 0.1 * torch.randn(param.shape, generator=gen, dtype=param.dtype)
                if pname == "bias":
                    param.copy_(noise)
                elif is_norm and pname == "weight":
                    param.add_(noise)


def family_sequences() -> dict:
    """Fixed token ids per model: {name: {"input_ids": [[...]], "token_type_ids": [[...]] (BERT)}}."""
    gen = torch.Generator().manual_seed(SEQ_SEED)

    def draw(n: int) -> list[int]:
        return torch.randint(FIRST_PLAIN_TOKEN, SIZE["vocab_size"], (n,), generator=gen).tolist()

    causal = [draw(n) for n in CAUSAL_LENGTHS]
    cls, sep, mask = BERT_TOKENS["cls"], BERT_TOKENS["sep"], BERT_TOKENS["mask"]
    pairs, types, masked = [], [], []
    for len_a, len_b in BERT_SEGMENTS:
        ids = [cls, *draw(len_a), sep, *draw(len_b), sep]
        pairs.append(ids)
        types.append([0] * (len_a + 2) + [1] * (len_b + 1))
        at = int(torch.randint(1, len(ids) - 1, (1,), generator=gen))
        while ids[at] == sep:
            at += 1
        masked.append(ids[:at] + [mask] + ids[at + 1:])
    out = {name: {"input_ids": causal} for name, spec in FAMILY_MODELS.items() if spec.target == "last"}
    out["bert_mlm"] = {"input_ids": masked, "token_type_ids": types}
    out["bert_cls"] = {"input_ids": pairs, "token_type_ids": types}
    return out


def build_family_models(models_dir: Path) -> None:
    """Build every tiny model from its config (seeded) and ``save_pretrained`` it (safetensors), plus ids.json."""
    import transformers

    for name, spec in FAMILY_MODELS.items():
        config = getattr(transformers, spec.config)(**spec.kwargs)
        torch.manual_seed(spec.seed)
        model = getattr(transformers, spec.head)(config).eval()
        perturb_biases_and_norms(model, spec.seed)
        model.save_pretrained(models_dir / name, safe_serialization=True)
        size = (models_dir / name / "model.safetensors").stat().st_size
        print(f"built {name}: {sum(p.numel() for p in model.parameters())} parameters, {size} bytes", flush=True)
    lines = [f'  "{name}": {json.dumps(seqs)}' for name, seqs in family_sequences().items()]
    (models_dir / "ids.json").write_text("{\n" + ",\n".join(lines) + "\n}\n")


def apply_family_patch(phase: str, family: str):
    """Patch ``modeling_<family>`` for ``phase`` (process-wide, irreversible) and return that module."""
    import importlib

    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    if phase == "gxi":
        return module
    from lxt.efficient import monkey_patch
    maps = importlib.import_module(f"lxt.efficient.models.{family}")
    if phase == "attnlrp":
        monkey_patch(module, verbose=True)  # the README call; default map = maps.attnLRP
    elif phase == "cp_lrp" and hasattr(maps, "cp_LRP"):
        monkey_patch(module, patch_map=maps.cp_LRP, verbose=True)
    else:
        fail(f"lxt 2.1 has no {phase!r} map for {family}", f"use one of: {', '.join(family_phases(family))}")
    return module


def explained_position(target: str, ids: list[int]) -> int:
    """Sequence position whose output is explained (FamilyModel.target); the classifier pools [CLS] at 0."""
    if target == "last":
        return len(ids) - 1
    if target == "mask":
        return ids.index(BERT_TOKENS["mask"])
    return 0


def family_relevance(model, spec: FamilyModel, ids: list[int], token_types: list[int] | None) -> dict:
    """The lxt recipe on one sequence (FAMILY_RECIPE): relevance, additive-embedding shares, pred, logit, logits."""
    input_ids = torch.tensor([ids])
    embeds = model.get_input_embeddings()(input_ids).detach().requires_grad_(True)
    extra = {"use_cache": False} if spec.target == "last" else {"token_type_ids": torch.tensor([token_types])}
    logits = model(inputs_embeds=embeds, **extra).logits[0]  # [T, V] or [C]
    row = logits if spec.target == "pooled" else logits[explained_position(spec.target, ids)]
    logit, index = torch.max(row, dim=-1)
    logit.backward()
    grad = embeds.grad.double()[0]
    out = {"relevance": (embeds.detach().double()[0] * grad).sum(-1).numpy(), "pred": int(index),
           "logit": float(logit.detach()), "logits_full": logits.detach().numpy()}
    for kind, path in spec.additive:
        index_of = torch.arange(len(ids)) if kind == "pos" else torch.tensor(token_types)
        table = model.get_submodule(path).weight.detach()
        out[f"relevance_{kind}"] = (table[index_of].double() * grad).sum(-1).numpy()
    return out


def run_family_phase(phase: str, name: str, models_dir: Path) -> dict:
    """Patch for ``phase`` and fill ``{name}.{dtype}.{attn}.{phase}.*`` for both dtypes and attentions."""
    spec = FAMILY_MODELS[name]
    module = apply_family_patch(phase, spec.family)
    head = getattr(module, spec.head)  # after patching: lxt's BERT map swaps the module's classes for its own
    seqs = json.loads((models_dir / "ids.json").read_text())[name]
    token_types = seqs.get("token_type_ids", [None] * len(seqs["input_ids"]))
    out: dict = {}
    for dname, dtype in DTYPES.items():
        for attn in ATTENTION:
            model = head.from_pretrained(models_dir / name, torch_dtype=dtype, attn_implementation=attn).eval()
            for p in model.parameters():
                p.requires_grad_(False)
            results = [family_relevance(model, spec, ids, tt) for ids, tt in zip(seqs["input_ids"], token_types)]
            key = f"{name}.{dname}.{attn}.{phase}"
            for field in ("relevance", *(f"relevance_{kind}" for kind, _ in spec.additive)):
                out[f"{key}.{field}"] = np.concatenate([r[field] for r in results])
            out[f"{key}.pred"] = np.asarray([r["pred"] for r in results], dtype=np.int64)
            out[f"{key}.logit"] = np.asarray([r["logit"] for r in results], dtype=np.float64)
            if phase == "gxi" and attn == "eager":
                stack = np.stack if spec.target == "pooled" else np.concatenate
                out[f"{key}.logits_full"] = stack([r["logits_full"] for r in results])
            print(f"{key}: preds {out[f'{key}.pred'].tolist()}, "
                  f"logits {np.round(out[f'{key}.logit'], 6).tolist()}", flush=True)
    return out


def run_families(args) -> None:
    """Parent process of ``--suite families``: one subprocess per (model, phase), merged into one npz."""
    if args.build_models:
        build_family_models(args.models_dir)
    for name in FAMILY_MODELS:
        for needed in (args.models_dir / "ids.json", args.models_dir / name / "config.json"):
            if not needed.is_file():
                fail(f"missing {needed}", "pass --models-dir pointing at tests/data/reference_lxt/models, "
                     "or add --build-models to create the tiny models")
    merged: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in FAMILY_MODELS.items():
            for phase in family_phases(spec.family):
                part = Path(tmp) / f"{name}.{phase}.npz"
                subprocess.run([sys.executable, __file__, "--suite", "families", "--phase", phase, "--model", name,
                                "--models-dir", str(args.models_dir), "--out", str(part)], check=True)
                with np.load(part) as data:
                    merged.update({k: data[k] for k in data.files})
    seqs = json.loads((args.models_dir / "ids.json").read_text())
    for name, spec in FAMILY_MODELS.items():
        ids = seqs[name]["input_ids"]
        merged[f"{name}.offsets"] = np.cumsum([0] + [len(s) for s in ids]).astype(np.int64)
        merged[f"{name}.explained_position"] = np.asarray([explained_position(spec.target, s) for s in ids],
                                                          dtype=np.int64)
    merged["versions"] = np.asarray(json.dumps(versions()))
    merged["recipe"] = np.asarray(json.dumps(FAMILY_RECIPE))
    merged["models"] = np.asarray(json.dumps({name: {"family": spec.family, "head": spec.head,
                                                     "target": spec.target, "additive": dict(spec.additive)}
                                              for name, spec in FAMILY_MODELS.items()}))
    merged["phases"] = np.asarray(json.dumps({name: family_phases(spec.family)
                                              for name, spec in FAMILY_MODELS.items()}))
    merged["patch_maps"] = np.asarray(json.dumps(family_patch_maps()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **merged)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); versions {versions()}")


def versions() -> dict:
    import importlib.metadata as md

    import transformers
    return {"lxt": md.version("lxt"), "transformers": transformers.__version__, "torch": torch.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("llama", "families"), default="llama",
                        help="llama: the fixture LLaMAs -> lxt_attnlrp.npz; families: Qwen2, Qwen3, Gemma 3, GPT-2, "
                             "BERT -> lxt_families.npz")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA,
                        help="llama suite: folder with llama_causal/, llama_cls/, ids_causal.json, ids_cls.json")
    parser.add_argument("--models-dir", type=Path, default=FAMILY_DIR,
                        help="families suite: folder with one save_pretrained folder per model and ids.json")
    parser.add_argument("--build-models", action="store_true",
                        help="families suite: (re)build the tiny models and ids.json in --models-dir first")
    parser.add_argument("--out", type=Path, help="the .npz to write (default: the suite's file in tests/data)")
    parser.add_argument("--phase", help=argparse.SUPPRESS)  # internal: one subprocess
    parser.add_argument("--model", choices=tuple(FAMILY_MODELS), help=argparse.SUPPRESS)  # internal (families)
    args = parser.parse_args(argv)
    try:
        import lxt.efficient  # noqa: F401
    except ImportError as err:
        fail(f"cannot import lxt ({err})", "run this script with the separate lxt venv: "
             "../lxt-venv/bin/python scripts/reference_lxt.py (docs/reference_lxt.md)")
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if args.suite == "families":
        args.out = args.out or FAMILY_OUT
        if args.phase is not None:  # child process: one (model, phase)
            np.savez(args.out, **run_family_phase(args.phase, args.model, args.models_dir))
        else:
            run_families(args)
        return
    args.out = args.out or DEFAULT_OUT
    if args.phase is not None and args.phase not in PHASES:
        fail(f"unknown phase {args.phase!r}", f"use one of: {', '.join(PHASES)}")
    for name, ids_file in MODELS.items():
        for needed in (args.data_dir / ids_file, args.data_dir / name / "config.json"):
            if not needed.is_file():
                fail(f"missing {needed}", "pass --data-dir pointing at tests/data/official/nlp")
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
