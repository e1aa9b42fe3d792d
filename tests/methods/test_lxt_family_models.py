"""The tiny lxt reference models of the other families load in this venv's transformers and compute what lxt saw.

scripts/reference_lxt.py ``--suite families`` builds tiny random Qwen2, Qwen3, Gemma 3, GPT-2 and BERT models in
the SEPARATE lxt virtualenv (transformers 4.57, which lxt 2.1 needs), saves them to
tests/data/reference_lxt/models/<name>/ and stores lxt's relevance plus the unpatched model's full logits in
tests/data/reference_lxt/lxt_families.npz (docs/reference_lxt.md, "Other families"). Any future comparison with
those relevances is only meaningful if the same folders, loaded here by transformers 5.x, are the same functions.
This test establishes that: every saved model loads with its ``AutoModelFor...`` class and reproduces the lxt
venv's logits (eager attention, float32 and float64) for both attention implementations.

Tolerance: float32 rounding, also for float64 models, because transformers computes the eager softmax (Qwen,
Gemma) and Gemma's RMSNorm in float32 whatever the model dtype, so eager and sdpa differ by float32 rounding even
in float64. Measured against the reference (2 threads) with 1 thread: float64 eager bit-identical, otherwise at
most 1.4e-6 relative to the largest |logit| (the classifier, whose logits are small: 0.15). A config that lost a
family feature in translation (RoPE parameters, Gemma's sliding window or query_pre_attn_scalar, BERT's token
types) changes logits by O(0.1-1).
"""
import json

import numpy as np
import pytest
import torch
import transformers

from conftest import DATA

REF_FILE = DATA / "reference_lxt" / "lxt_families.npz"
MODELS_DIR = DATA / "reference_lxt" / "models"
AUTO = {"qwen2_causal": ("AutoModelForCausalLM", "Qwen2ForCausalLM"),
        "qwen3_causal": ("AutoModelForCausalLM", "Qwen3ForCausalLM"),
        "gemma3_causal": ("AutoModelForCausalLM", "Gemma3ForCausalLM"),
        "gpt2_causal": ("AutoModelForCausalLM", "GPT2LMHeadModel"),
        "bert_mlm": ("AutoModelForMaskedLM", "BertForMaskedLM"),
        "bert_cls": ("AutoModelForSequenceClassification", "BertForSequenceClassification")}
DTYPES = {"float32": torch.float32, "float64": torch.float64}
# relative to the largest |logit|: 256 float32 ulps (3.1e-5), >= 20x the worst measurement (1.4e-6, classifier sdpa)
TOL = 256 * torch.finfo(torch.float32).eps


@pytest.fixture(scope="module")
def ref():
    with np.load(REF_FILE) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def inputs():
    return json.loads((MODELS_DIR / "ids.json").read_text())


def test_reference_covers_every_saved_model(ref, inputs):
    assert set(json.loads(str(ref["models"]))) == set(AUTO) == set(inputs)
    versions = json.loads(str(ref["versions"]))
    assert versions["lxt"] == "2.1" and versions["transformers"].startswith("4.57.")
    for name in AUTO:
        config = json.loads((MODELS_DIR / name / "config.json").read_text())
        assert config["transformers_version"].startswith("4.57.")  # saved by the lxt venv, not by this one
        lengths = [len(s) for s in inputs[name]["input_ids"]]
        assert ref[f"{name}.offsets"].tolist() == np.cumsum([0] + lengths).tolist()


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(AUTO))
def test_saved_model_reproduces_lxt_venv_logits(ref, inputs, name, dtype, attn):
    auto, head = AUTO[name]
    model = getattr(transformers, auto).from_pretrained(MODELS_DIR / name, dtype=DTYPES[dtype],
                                                        attn_implementation=attn).eval()
    assert type(model).__name__ == head
    seqs = inputs[name]
    logits = []
    for i, ids in enumerate(seqs["input_ids"]):
        extra = {"token_type_ids": torch.tensor([seqs["token_type_ids"][i]])} if "token_type_ids" in seqs else {}
        with torch.no_grad():
            logits.append(model(input_ids=torch.tensor([ids]), **extra).logits[0].numpy())
    ours = np.stack(logits) if name == "bert_cls" else np.concatenate(logits)
    theirs = ref[f"{name}.{dtype}.eager.gxi.logits_full"]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= TOL * np.abs(theirs).max(), (name, dtype, attn)
