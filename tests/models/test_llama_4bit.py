"""bitsandbytes 4-bit NF4 (double quantization) models work unchanged (Table 1 quantized row).

transformers 5.x + bitsandbytes >= 0.45 load and backpropagate 4-bit LLaMA layers on the CPU. Skipped only where
bitsandbytes is not installed; with bitsandbytes installed a model that fails to load in 4 bits is a failure.

Relevance through ``Linear4bit`` is checked against a float twin: the same checkpoint loaded in float32 with every
quantized linear replaced by its dequantized weight (``bitsandbytes.functional.dequantize_4bit``). A 4-bit layer
computes with exactly that weight, so the relevance of both must agree to float32 rounding, and both must satisfy the
accounting identity (tests/lrp/test_accounting.py) to the same float32 tolerance.

Where CUDA is available bitsandbytes quantizes onto cuda:0 (``load_hf_model`` picks ``device_map="auto"``) while the
float twin stays on the CPU: ``explain`` gets CPU ids and moves them (tests/models/test_input_devices.py), the
explanations stay on the model's device, and comparisons are made on the CPU."""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.lrp.composites import ATTNLRP
from palrp_bench.models.decoder import DecoderTwin
from palrp_bench.models.loading import load_hf_model
from lrp.test_accounting import ledger
from models.tiny_llama import make_llama, random_ids

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes not installed (pip install '.[quant]')")

#: float32 tolerance, relative to the largest value compared: a few hundred roundings of 6e-8 each
FLOAT32_RTOL = 1e-5


@pytest.fixture(scope="module", params=["causal", "classifier"])
def checkpoint(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"q{request.param}")
    make_llama("gqa", request.param, hidden_size=64, intermediate_size=128).save_pretrained(path)
    return str(path), request.param


@pytest.fixture(scope="module")
def quantized(checkpoint):
    path, kind = checkpoint
    return load_hf_model(path, kind=kind, dtype="float32", quantization="nf4")  # a failure here fails the test


def dequantized_float_model(path: str, kind: str, quantized) -> tuple[torch.nn.Module, list[str]]:
    """The checkpoint at ``path`` in float32 with the dequantized weights of ``quantized``'s 4-bit layers in place of
    its linear weights, and the names of the replaced layers."""
    model = load_hf_model(path, kind=kind, dtype="float32")
    modules = dict(model.named_modules())
    replaced = []
    with torch.no_grad():
        for name, layer in quantized.named_modules():
            if isinstance(layer, bnb.nn.Linear4bit):
                target = modules[name]
                weight = bnb.functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state)
                target.weight.copy_(weight.reshape(target.weight.shape).to(torch.float32))
                replaced.append(name)
    return model, replaced


@pytest.fixture(scope="module")
def float_twin(checkpoint, quantized):
    """The checkpoint in float32 with the dequantized 4-bit weights in place of its linear weights."""
    model, replaced = dequantized_float_model(*checkpoint, quantized)
    assert len(replaced) == 7 * 2  # q, k, v, o, gate, up, down in each of the 2 layers
    return model


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu()
    return bool((a - b).abs().max() <= FLOAT32_RTOL * max(float(b.abs().max()), 1e-12))


def assert_explanations_close(rel, ref) -> None:
    """Every part of two explanations finite and equal to float32 rounding (:func:`_close`)."""
    for part in ("scores", "semantic", "positional", "logit"):
        ours, theirs = getattr(rel, part), getattr(ref, part)
        assert bool(torch.isfinite(ours).all()), part
        assert _close(ours, theirs), (part, float((ours - theirs).abs().max()))


def _device(model) -> torch.device:
    return DecoderTwin(model).device


def test_layers_are_4bit(quantized):
    assert isinstance(quantized.model.layers[0].self_attn.q_proj, bnb.nn.Linear4bit)
    qs = quantized.model.layers[0].self_attn.q_proj.weight.quant_state
    assert qs is not None and qs.quant_type == "nf4" and qs.nested  # double quantization


def test_twin_parity_and_explain_on_4bit(quantized):
    ids = random_ids(2, 9)  # on the CPU: explain moves them; the twin's own forward takes them on its device
    twin = DecoderTwin(quantized)
    ids_there = ids.to(twin.device)
    out = twin.forward(twin.embed(ids_there), None, twin.last_index(ids_there, None), ATTNLRP, positional_sinks=True)
    with torch.no_grad():
        ref = quantized(input_ids=ids_there).logits
    ref = ref[:, -1] if not twin.is_classifier else ref
    assert (out.logits - ref).abs().max() < 1e-4
    for method in ("attnlrp", "pa_lrp"):
        rel = explain(quantized, ids, method=method)
        assert torch.isfinite(rel.scores).all() and rel.scores.abs().sum() > 0
    rel = explain(quantized, ids, method="pa_lrp")
    assert rel.positional.abs().sum() > 0
    # inference forwards in between (as the perturbation protocol does) change nothing
    with torch.no_grad():
        quantized(input_ids=ids_there)
    again = explain(quantized, ids, method="pa_lrp")
    assert torch.equal(again.scores, rel.scores)


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp"])
def test_relevance_through_linear4bit_equals_the_dequantized_float_twin(quantized, float_twin, checkpoint, method):
    ids = random_ids(2, 9)
    rel, ref = explain(quantized, ids, method=method), explain(float_twin, ids, method=method)
    assert_explanations_close(rel, ref)
    assert rel.semantic.abs().sum() > 0 and (method == "attnlrp" or rel.positional.abs().sum() > 0)
    # non-trivial: the quantization error is far above the tolerance (the original float weights explain otherwise)
    path, kind = checkpoint
    original = explain(load_hf_model(path, kind=kind, dtype="float32"), ids, method=method)
    assert not _close(original.semantic, ref.semantic)


@pytest.mark.cuda
def test_4bit_on_cuda_takes_cpu_ids(quantized, float_twin):
    """bitsandbytes quantized onto cuda:0; CPU ids, mask and target explain as ids on the GPU do, and as the
    dequantized float twin on the CPU does (to float32 rounding)."""
    assert _device(quantized).type == "cuda", "bitsandbytes did not quantize onto the GPU"
    ids = random_ids(2, 9)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    target = torch.tensor([0, 1])
    ours = explain(quantized, ids, attention_mask=mask, target=target, method="pa_lrp")
    there = explain(quantized, ids.cuda(), attention_mask=mask.cuda(), target=target.cuda(), method="pa_lrp")
    assert ours.scores.device.type == "cuda" and torch.equal(ours.scores, there.scores)
    ref = explain(float_twin, ids, attention_mask=mask, target=target, method="pa_lrp")
    for part in ("scores", "semantic", "positional", "logit"):
        assert _close(getattr(ours, part), getattr(ref, part)), part


@pytest.mark.parametrize("sinks", [False, True])
def test_4bit_relevance_conserves_as_the_float_path_does(quantized, float_twin, sinks):
    """logit = semantic + positional + absorbed (no biases here), to float32 rounding, for the 4-bit model and its
    float twin alike; the absorbed part is non-trivial."""
    ids = random_ids(2, 9)
    residuals = []
    for model in (quantized, float_twin):
        logit, sem, pos, absorbed, _ = ledger(model, ids.to(_device(model)), None, "attnlrp", sinks)
        assert bool(torch.isfinite(sem).all() & torch.isfinite(pos).all() & torch.isfinite(absorbed).all())
        assert absorbed.abs().min() > 1e-3 and (not sinks or pos.abs().min() > 1e-6)
        residual = logit - (sem + pos + absorbed)
        assert residual.abs().max() <= FLOAT32_RTOL * logit.abs().max(), float(residual.abs().max())
        residuals.append(residual.cpu())
    assert (residuals[0] - residuals[1]).abs().max() <= FLOAT32_RTOL * logit.abs().max().cpu()


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
