"""bitsandbytes 4-bit NF4 mixture-of-experts models (tests/models/test_llama_4bit.py for the dense families).

transformers 5.x quantizes every ``nn.Linear`` (attention projections, dense MLPs, shared experts, the shared
expert's gate) and leaves the fused expert tensors ``gate_up_proj`` / ``down_proj`` (3-D parameters) and the
routers in the compute dtype, so a "4-bit" MoE model keeps most of its parameters unquantized (docs/planning.md
prices them so). The twin reads both kinds unchanged. Relevance through the 4-bit layers is checked against a
float twin with the dequantized weights in place (float32 rounding), per family: the router's choice is the same
in both (same weights), so any difference would be the twin's handling of the quantized layers.
"""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.lrp.composites import ATTNLRP
from palrp_bench.models.decoder import DecoderTwin
from palrp_bench.models.loading import load_hf_model
from models.test_llama_4bit import _close, assert_explanations_close, dequantized_float_model
from models.tiny_families import MOE_FAMILIES, make_model, random_ids

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed (pip install '.[quant]')")


@pytest.fixture(scope="module", params=MOE_FAMILIES)
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"q{request.param}")
    make_model(request.param, "causal", hidden_size=64, intermediate_size=128).save_pretrained(path)
    return str(path), request.param


@pytest.fixture(scope="module")
def quantized(checkpoint):
    return load_hf_model(checkpoint[0], kind="causal", dtype="float32", quantization="nf4")


def test_linear_layers_are_4bit_and_experts_are_not(quantized, checkpoint):
    twin = DecoderTwin(quantized)
    blocks = [getattr(layer, twin.spec.mlp_block) for layer in twin.layers]
    sparse = [block for block in blocks if twin.spec.moe.is_sparse(block)]
    projection = getattr(twin.layers[-1], twin.spec.attention).o_proj
    assert isinstance(projection, bnb.nn.Linear4bit) and projection.weight.quant_state.quant_type == "nf4"
    assert sparse, "no sparse block: the test would not exercise the experts"
    experts = getattr(sparse[0], twin.spec.moe.experts)
    assert experts.gate_up_proj.dtype == torch.float32 and experts.gate_up_proj.dim() == 3


def test_twin_parity_and_explain_on_4bit(quantized):
    ids = random_ids(2, 9)
    twin = DecoderTwin(quantized)
    there = ids.to(twin.device)
    out = twin.forward(twin.embed(there), None, twin.last_index(there, None), ATTNLRP, positional_sinks=True)
    with torch.no_grad():
        ref = quantized(input_ids=there).logits[:, -1]
    assert (out.logits - ref).abs().max() < 1e-4
    rel = explain(quantized, ids, method="pa_lrp")
    assert torch.isfinite(rel.scores).all() and rel.positional.abs().sum() > 0


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp"])
def test_relevance_through_4bit_layers_equals_the_dequantized_float_twin(quantized, checkpoint, method):
    float_twin, replaced = dequantized_float_model(checkpoint[0], "causal", quantized)
    assert replaced
    ids = random_ids(2, 9)
    rel, ref = explain(quantized, ids, method=method), explain(float_twin, ids, method=method)
    assert_explanations_close(rel, ref)
    original = explain(load_hf_model(checkpoint[0], kind="causal", dtype="float32"), ids, method=method)
    assert not _close(original.semantic, ref.semantic)  # the quantization error is far above the tolerance


@pytest.mark.cuda
def test_4bit_bfloat16_on_cuda(checkpoint):
    """The way users run them: NF4 with bfloat16 compute on the GPU (the CPU twin of this path is the float32 test
    above). Finite relevance with a positional part, the explained logit as the library computes it."""
    model = load_hf_model(checkpoint[0], kind="causal", dtype="bfloat16", quantization="nf4")
    twin = DecoderTwin(model)
    assert twin.device.type == "cuda", "bitsandbytes did not quantize onto the GPU"
    ids = random_ids(2, 9)
    rel = explain(model, ids, method="pa_lrp")
    assert torch.isfinite(rel.scores).all() and rel.positional.abs().sum() > 0
    with torch.no_grad():
        ref = model(input_ids=ids.cuda()).logits[:, -1].float()
    assert (rel.logit.float() - ref.gather(1, rel.target[:, None])[:, 0]).abs().max() < 0.05 * ref.abs().max()
