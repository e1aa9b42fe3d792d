"""bitsandbytes 4-bit NF4 (double quantization) models work unchanged (Table 1 quantized row).

transformers 5.x + bitsandbytes >= 0.45 load and backpropagate 4-bit LLaMA layers on the CPU; skipped with a
reason where bitsandbytes is not installed."""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.lrp.composites import ATTNLRP
from palrp_bench.models.decoder import DecoderTwin
from palrp_bench.models.loading import load_hf_model
from models.tiny_llama import make_llama, random_ids

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed (pip install '.[quant]')")


@pytest.fixture(scope="module", params=["causal", "classifier"])
def quantized(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"q{request.param}")
    make_llama("gqa", request.param, hidden_size=64, intermediate_size=128).save_pretrained(path)
    try:
        model = load_hf_model(str(path), kind=request.param, dtype="float32", quantization="nf4")
    except Exception as err:  # pragma: no cover - environment-specific
        pytest.skip(f"4-bit loading unavailable here: {str(err).splitlines()[0]}")
    return model


def test_layers_are_4bit(quantized):
    assert isinstance(quantized.model.layers[0].self_attn.q_proj, bnb.nn.Linear4bit)
    qs = quantized.model.layers[0].self_attn.q_proj.weight.quant_state
    assert qs is not None and qs.quant_type == "nf4" and qs.nested  # double quantization


def test_twin_parity_and_explain_on_4bit(quantized):
    ids = random_ids(2, 9)
    twin = DecoderTwin(quantized)
    out = twin.forward(twin.embed(ids), None, twin.last_index(ids, None), ATTNLRP, positional_sinks=True)
    with torch.no_grad():
        ref = quantized(input_ids=ids).logits
    ref = ref[:, -1] if not twin.is_classifier else ref
    assert (out.logits - ref).abs().max() < 1e-4
    for method in ("attnlrp", "pa_lrp"):
        rel = explain(quantized, ids, method=method)
        assert torch.isfinite(rel.scores).all() and rel.scores.abs().sum() > 0
    rel = explain(quantized, ids, method="pa_lrp")
    assert rel.positional.abs().sum() > 0
    # inference forwards in between (as the perturbation protocol does) change nothing
    with torch.no_grad():
        quantized(input_ids=ids)
    again = explain(quantized, ids, method="pa_lrp")
    assert torch.equal(again.scores, rel.scores)


def test_repacked_model_is_refused_with_a_clear_error(tmp_path):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    make_llama("gqa", "causal", hidden_size=64, intermediate_size=128).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, device_map="cpu", quantization_config=BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)).eval()
    layer = model.model.layers[0].self_attn.q_proj
    if not getattr(layer, "support_avx512bf16_for_cpu", False):
        pytest.skip("this CPU has no AVX512-BF16: bitsandbytes never repacks here")
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 5, 6]]))
    from palrp_bench.errors import BadInputError
    with pytest.raises(BadInputError, match="repacked"):
        explain(model, torch.tensor([[1, 5, 6]]))
