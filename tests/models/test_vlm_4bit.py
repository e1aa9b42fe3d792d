"""bitsandbytes 4-bit NF4 vision-language models (tests/models/test_llama_4bit.py for the text decoders).

transformers quantizes every ``nn.Linear`` of the model, the vision tower's and the projector's included, and keeps
the patch embedding's convolution and the norms in the compute dtype (``lm_head`` stays unquantized). The twin calls
the 4-bit layers as they are. Relevance through them is checked against a float twin holding the dequantized weights
(float32 rounding), per family.
"""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.lrp.composites import ATTNLRP
from palrp_bench.models.loading import load_hf_model
from palrp_bench.models.vlm import VisionLanguageTwin
from models.test_llama_4bit import _close, assert_explanations_close, dequantized_float_model
from models.tiny_vlms import FAMILIES, inputs_of, library_logits, make_vlm

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed (pip install '.[quant]')")


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"q{request.param}")
    make_vlm(request.param, hidden_size=64, intermediate_size=128, num_attention_heads=4,  # head_dim 16 as the default
             num_key_value_heads=2).save_pretrained(path)
    return str(path), request.param


@pytest.fixture(scope="module")
def quantized(checkpoint):
    return load_hf_model(checkpoint[0], kind="vlm", dtype="float32", quantization="nf4")


def test_language_and_vision_linears_are_4bit(quantized):
    twin = VisionLanguageTwin(quantized)
    projection = getattr(twin.layers[-1], twin.spec.attention).o_proj
    assert isinstance(projection, bnb.nn.Linear4bit) and projection.weight.quant_state.quant_type == "nf4"
    tower = [m for m in quantized.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(tower) > 7 * 2, "only the language model's linears are 4-bit"


def test_twin_parity_and_explain_on_4bit(quantized, checkpoint):
    inputs = inputs_of(checkpoint[1], 2)
    twin = VisionLanguageTwin(quantized)
    out = twin.run(twin.prepare(inputs), ATTNLRP, positional_sinks=True)
    ref = library_logits(quantized, inputs)[torch.arange(2), inputs["attention_mask"].sum(1) - 1]
    assert (out.logits - ref).abs().max() < 1e-4
    rel = explain(quantized, inputs, method="pa_lrp")
    assert torch.isfinite(rel.scores).all() and rel.positional.abs().sum() > 0


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp"])
def test_relevance_through_4bit_layers_equals_the_dequantized_float_twin(quantized, checkpoint, method):
    float_twin, replaced = dequantized_float_model(checkpoint[0], "vlm", quantized)
    assert replaced
    inputs = inputs_of(checkpoint[1], 2)
    rel, ref = explain(quantized, inputs, method=method), explain(float_twin, inputs, method=method)
    assert_explanations_close(rel, ref)
    assert _close(rel.extras["image_scores"], ref.extras["image_scores"])
    original = explain(load_hf_model(checkpoint[0], kind="vlm", dtype="float32"), inputs, method=method)
    assert not _close(original.semantic, ref.semantic)  # the quantization error is far above the tolerance


@pytest.mark.cuda
def test_4bit_bfloat16_on_cuda(checkpoint):
    """NF4 with bfloat16 compute on the GPU (the CPU twin of this path is the float32 test above): finite relevance
    with a positional part, the explained logit as the library computes it."""
    model = load_hf_model(checkpoint[0], kind="vlm", dtype="bfloat16", quantization="nf4")
    assert VisionLanguageTwin(model).device.type == "cuda", "bitsandbytes did not quantize onto the GPU"
    inputs = inputs_of(checkpoint[1], 2)
    rel = explain(model, inputs, method="pa_lrp")
    assert torch.isfinite(rel.scores).all() and rel.positional.abs().sum() > 0
    with torch.no_grad():
        ref = model(**{k: v.cuda() for k, v in inputs.items()}).logits.float()
    ref = ref[torch.arange(2), inputs["attention_mask"].sum(1).cuda() - 1]
    assert (rel.logit.float() - ref.gather(1, rel.target[:, None])[:, 0]).abs().max() < 0.05 * ref.abs().max()
