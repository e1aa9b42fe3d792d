"""``explain`` takes inputs on any device and moves them to the model's (a CUDA model with CPU ids works, as in
inseq): the twins' ``prepare`` checks the ids, the attention mask, token types and images where the caller keeps them
and moves them once (palrp_bench/models/token_inputs.py, ``VitTwin.prepare_pixels``); the target follows the
logits (``lrp.attribution.resolve_target``, shared by the LRP pass and every attributor). The explanation's tensors
are on the model's device.

On the CPU the move is checked on the ``meta`` device: a model moved there cannot run, but its twin prepares
inputs, and every prepared tensor must land there. The ``cuda``-marked test runs a tiny LLaMA on cuda:0 with CPU
ids, mask and target (tests/models/test_llama_4bit.py does the same for the 4-bit path)."""
import numpy as np
import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from palrp_bench import explain
from palrp_bench.errors import BadInputError
from palrp_bench.lrp.attribution import resolve_target
from palrp_bench.models.registry import twin_for
from models.families import make_text
from models.tiny_llama import make_llama, random_ids

META = torch.device("meta")
#: float32 tolerance relative to the largest value compared (as in tests/models/test_llama_4bit.py): this model's
#: float32 explanations are <= 1e-6 from its float64 ones on the CPU (pa_lrp and integrated_gradients, both heads);
#: the GPU's float32 (matmuls in IEEE float32, PyTorch's default) is as far, in another summation order, so the two
#: differ by at most about 2e-6
FLOAT32_RTOL = 1e-5


def _ids_and_mask():
    ids = random_ids(2, 7)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding
    return ids, mask


def _devices(prepared) -> set:
    return {v.device for v in vars(prepared).values() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("family,head", [("llama", "classifier"), ("llama", "causal"), ("gpt2", "classifier"),
                                         ("bert", "classifier"), ("bloom", "causal")])
def test_text_inputs_are_checked_where_they_are_and_moved_to_the_model(family, head):
    model = (make_llama("gqa", head) if family == "llama" else
             make_text(family, head, attn="eager" if family == "bloom" else "sdpa")).to(META)
    twin = twin_for(model)
    ids, mask = _ids_and_mask()
    inputs = {"input_ids": ids, "attention_mask": mask}
    if family == "bert":
        inputs["token_type_ids"] = torch.zeros_like(ids)
    prepared = twin.prepare(inputs if family != "llama" else ids, None if family != "llama" else mask)
    assert _devices(prepared) == {META}
    assert prepared.attention_mask is not None and (family != "bert" or prepared.token_type_ids is not None)
    # the checks still run (on the caller's tensors): a bad mask or a bad token id is one line, before any move
    with pytest.raises(BadInputError, match="only 0 and 1"):
        twin.prepare(ids, mask + 1)
    with pytest.raises(BadInputError, match="out of range"):
        twin.prepare(ids + 1000, mask)


def test_images_are_checked_where_they_are_and_moved_to_the_model():
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3)
    twin = twin_for(model.to(META))
    prepared = twin.prepare(torch.randn(2, 3, 32, 32, dtype=torch.float64))
    assert prepared.pixels.device == META and prepared.pixels.dtype == torch.float32
    with pytest.raises(BadInputError, match="NaN"):
        twin.prepare(torch.full((1, 3, 32, 32), float("nan")))


def test_the_target_follows_the_logits():
    logits = torch.empty(2, 5, device=META)
    for target in (torch.tensor([1, 4]), [1, 4], np.array([1, 4]), 3):
        assert resolve_target(target, logits).device == META
    with pytest.raises(BadInputError, match="out of range"):
        resolve_target(torch.tensor([1, 5]), logits)


def test_inputs_of_other_types_give_the_same_explanation():
    """int32 ids, a bool mask and a numpy target explain as long tensors do (the same move, another dtype)."""
    model = make_llama("gqa", "classifier")
    ids, mask = _ids_and_mask()
    ref = explain(model, ids, attention_mask=mask, target=torch.tensor([0, 1]), method="pa_lrp")
    other = explain(model, ids.int(), attention_mask=mask.bool(), target=np.array([0, 1]), method="pa_lrp")
    assert torch.equal(ref.scores, other.scores) and torch.equal(ref.target, other.target)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.shape != b.shape or a.numel() == 0:  # e.g. no positional part for a baseline
        return a.shape == b.shape
    return bool((a - b).abs().max() <= FLOAT32_RTOL * max(float(b.abs().max()), 1e-12))


@pytest.mark.cuda
@pytest.mark.parametrize("method", ["pa_lrp", "integrated_gradients"])
@pytest.mark.parametrize("head", ["causal", "classifier"])
def test_a_cuda_model_takes_cpu_ids_mask_and_target(head, method):
    ids, mask = _ids_and_mask()
    target = torch.tensor([0, 1])
    cpu = explain(make_llama("gqa", head), ids, attention_mask=mask, target=target, method=method)
    model = make_llama("gqa", head).to("cuda:0")
    ours = explain(model, ids, attention_mask=mask, target=target, method=method)
    assert ours.scores.device.type == "cuda" and ours.target.device.type == "cuda"  # outputs stay on the model's
    on_device = explain(model, ids.cuda(), attention_mask=mask.cuda(), target=target.cuda(), method=method)
    assert torch.equal(ours.scores, on_device.scores)
    assert torch.equal(ours.target.cpu(), target)
    for part in ("scores", "semantic", "positional", "logit"):
        assert _close(getattr(ours, part), getattr(cpu, part)), part
