"""``explain(..., checkpoint="layers")`` (docs/engine.md, "Long contexts"): every method gives the relevance it gives
without checkpointing, on every decoder family of the tiny-family registry and on the other text twins (GPT-2,
OPT, BERT, RoBERTa, BLOOM, T5); vision transformers refuse it; no tensor of size ``T x T`` (and none of size
``T x vocab``) is created by the positional kinds of the decoders, with or without it.

float64 tiny models, left-padded batches, the token chunks of the position-wise tails shrunk to 3 tokens so that
every tail runs in several chunks. Bound: 1e-10 of the largest value (the two computations differ only in the
order of float64 roundings: measured <= 3e-12)."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from palrp_bench import explain
from palrp_bench.errors import BadInputError
from palrp_bench.lrp import recompute
from models.families import CASES, make_rope_vit, make_text, padded_batch
from models.families import random_ids as text_ids
from models.tiny_families import FAMILIES, make_model, random_ids, variants
from models.tiny_t5 import VARIANTS as T5_VARIANTS
from models.tiny_t5 import make_t5
from models.tiny_t5 import random_ids as t5_ids

#: the methods of one LRP pass and the gradient baselines (Grad-CAM and gradient rollout record attention: their
#: layers run as they are, the option is accepted)
LRP = ("attnlrp", "pa_lrp", "pe_only", "pa_lrp_no_multisink", "cp_lrp", "grad_x_input")
GRADIENT = ("integrated_gradients", "smoothgrad", "gradient_l1", "gradient_l2", "grad_cam", "grad_attn_rollout")
#: few steps and samples; SmoothGrad times the input, since its plain per-token sum of the gradient is 0 up to
#: rounding in front of a LayerNorm (GPT-NeoX), where no relative comparison means anything
PARAMS = {"integrated_gradients": {"n_steps": 4}, "smoothgrad": {"n_samples": 3, "times_input": True}}
BOUND = 1e-10


@pytest.fixture(autouse=True)
def three_token_chunks(monkeypatch):
    """Tails of the tiny models (batch 2) in chunks of 3 tokens."""
    monkeypatch.setattr(recompute, "CHUNK_ROWS", 2 * 3)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    if b.numel() == 0:
        return 0.0
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-300))


def assert_same_explanation(model, ids, mask, method, **kwargs):
    params = PARAMS.get(method)
    plain = explain(model, ids, mask, method=method, params=params, **kwargs)
    ckpt = explain(model, ids, mask, method=method, params=params, checkpoint="layers", **kwargs)
    parts = {"scores": (ckpt.scores, plain.scores), "semantic": (ckpt.semantic, plain.semantic),
             "positional": (ckpt.positional, plain.positional), "logit": (ckpt.logit, plain.logit)}
    for key in ("decoder_scores", "alibi_query", "alibi_key"):
        if key in plain.extras:
            parts[key] = (ckpt.extras[key], plain.extras[key])
    for name, (a, b) in parts.items():
        assert _relative(a, b) <= BOUND, f"{method} {name}: {_relative(a, b):.1e}"
    assert torch.equal(ckpt.target, plain.target)
    return plain


def _left_padded(seed: int = 0):
    ids = random_ids(2, 11, seed=seed)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    return ids, mask


@pytest.mark.parametrize("family, variant", [(f, v) for f in FAMILIES for v in variants(f)])
def test_decoder_families_explain_the_same_with_checkpointed_layers(family, variant):
    model = make_model(family, variant=variant, dtype=torch.float64)
    ids, mask = _left_padded()
    for method in LRP + GRADIENT:
        plain = assert_same_explanation(model, ids, mask, method)
        if method == "pa_lrp":
            assert plain.positional.abs().max() > 0  # the RoPE sinks are read


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_classifiers_and_the_official_stabilisers_explain_the_same(family):
    model = make_model(family, kind="classifier", dtype=torch.float64)
    ids, mask = _left_padded(seed=3)
    for method in ("attnlrp", "pa_lrp", "grad_x_input"):
        assert_same_explanation(model, ids, mask, method, stabilizers="official")


@pytest.mark.parametrize("family, head", CASES)
def test_text_twins_explain_the_same_with_checkpointed_layers(family, head):
    model = make_text(family, head, attn="eager" if family == "bloom" else "sdpa")
    ids, mask, _ = padded_batch([9, 12], "left")
    options = [{"alibi_rule": "paper"}, {"alibi_rule": "relative_half"}] if family == "bloom" else [{}]
    position = {"position": 3} if head == "masked_lm" else {}
    for extra in options:
        for method in ("attnlrp", "pa_lrp", "cp_lrp", "grad_x_input", "integrated_gradients"):
            plain = assert_same_explanation(model, ids, mask, method, **position, **extra)
            if method == "pa_lrp":
                assert plain.positional.abs().max() > 0


@pytest.mark.parametrize("variant", T5_VARIANTS)
def test_t5_explains_the_same_with_checkpointed_blocks(variant):
    model = make_t5(variant)
    ids, decoder = t5_ids(model, 2, 10), t5_ids(model, 2, 3, seed=1)
    decoder[:, 0] = 2
    for method in ("attnlrp", "pa_lrp", "cp_lrp", "grad_x_input", "integrated_gradients"):
        assert_same_explanation(model, ids, None, method, decoder_input_ids=decoder)


def test_vision_transformers_refuse_checkpointing_in_one_line():
    model = make_rope_vit("rope")
    with pytest.raises(BadInputError, match="checkpoint='layers': Eva has no layer-wise recomputation -- use "
                                            "checkpoint='none'"):
        explain(model, torch.zeros(1, 3, 32, 32, dtype=torch.float64), method="pa_lrp", checkpoint="layers")
    with pytest.raises(BadInputError, match="checkpoint='all' is not a checkpointing mode"):
        explain(make_model("llama"), random_ids(1, 5), checkpoint="all")


# ------------------------------------------------------------------------------------------- no T x T tensor
T = 67        # a length that is no other dimension of the tiny models
VOCAB = 211   # a vocabulary that is no other dimension either


class Shapes(TorchDispatchMode):
    """Records every operator output (forward and backward: the backward runs on this thread on the CPU) with two
    dimensions of size ``T``, or one of size ``T`` and one of size ``VOCAB``."""

    def __init__(self):
        super().__init__()
        self.found: set[tuple[str, tuple[int, ...]]] = set()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and (list(t.shape).count(T) >= 2 or {T, VOCAB} <= set(t.shape)):
                self.found.add((str(func), tuple(t.shape)))
        return out


LONG = {
    "llama (RoPE, GQA)": lambda: (make_model("llama", dtype=torch.float64, max_position_embeddings=128,
                                             vocab_size=VOCAB), random_ids(1, T)),
    "gpt_neox (partial RoPE, parallel)": lambda: (make_model("gpt_neox", dtype=torch.float64,
                                                             max_position_embeddings=128, vocab_size=VOCAB),
                                                  random_ids(1, T)),
    "mistral (no window)": lambda: (make_model("mistral", variant="full", dtype=torch.float64,
                                               max_position_embeddings=128, vocab_size=VOCAB), random_ids(1, T)),
    "gpt2 (learned absolute)": lambda: (make_text("gpt2", "causal", n_positions=128, vocab_size=VOCAB),
                                        text_ids(1, T)),
    "bloom (ALiBi)": lambda: (make_text("bloom", "causal", attn="eager", vocab_size=VOCAB), text_ids(1, T)),
    "bert (learned absolute, encoder)": lambda: (make_text("bert", "masked_lm", max_position_embeddings=128,
                                                           vocab_size=VOCAB), text_ids(1, T)),
}


@pytest.mark.parametrize("name", list(LONG))
def test_no_tensor_is_tokens_by_tokens_or_tokens_by_vocabulary(name):
    """One unpadded sequence, as long contexts are explained: the positional kinds (RoPE sinks, learned rows,
    ALiBi's extra query/key dimensions) and fused attention keep everything linear in ``T``, and the head reads
    the explained position only (no ``[T, vocab]`` logits)."""
    model, ids = LONG[name]()
    position = {"position": T - 1} if "bert" in name else {}
    for method in ("pa_lrp", "grad_x_input"):
        for checkpoint in ("none", "layers"):
            shapes = Shapes()
            with shapes:
                explain(model, ids, method=method, checkpoint=checkpoint, **position)
            assert shapes.ops > 100  # the mode saw the forward and the backward
            assert not shapes.found, f"{method}, checkpoint={checkpoint}: {sorted(shapes.found)[:5]}"


@pytest.mark.cuda
def test_checkpointed_layers_on_a_gpu_lower_the_peak_and_keep_the_relevance():
    """The CUDA path of the tests above (fused SDPA kernels, the autograd device thread): same relevance in float32,
    lower allocator peak with checkpointing."""
    model = make_model("llama", dtype=torch.float32, max_position_embeddings=4096, num_hidden_layers=6).cuda()
    ids = random_ids(1, 2048).cuda()
    peaks, results = {}, {}
    for checkpoint in ("none", "layers"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        results[checkpoint] = explain(model, ids, method="pa_lrp", checkpoint=checkpoint)
        torch.cuda.synchronize()
        peaks[checkpoint] = torch.cuda.max_memory_allocated() - base
    a, b = results["layers"], results["none"]
    assert _relative(a.scores, b.scores) < 1e-4 and _relative(a.positional, b.positional) < 1e-4
    assert peaks["layers"] < 0.7 * peaks["none"], peaks
