"""The baselines on every other twin family (GPT-2, OPT, BERT, RoBERTa, BLOOM, timm RoPE ViTs): they run, do not
depend on the batch, and drive the library's own function (IG through our wrapper = a direct Captum call on the
library model); attention-row methods refuse a ViT that does not classify from its CLS token in one line."""
import pytest
import torch
from captum.attr import IntegratedGradients

from models.families import CASES, LIBRARY_ATTENTION, images, make_rope_vit, make_text, padded_batch
from palrp_bench import explain
from palrp_bench.errors import UnsupportedModelError

BASELINES = ["integrated_gradients", "smoothgrad", "attn_rollout", "grad_attn_rollout", "grad_cam", "atman"]
SMALL = {"integrated_gradients": {"n_steps": 4}, "smoothgrad": {"n_samples": 3}}


@pytest.mark.parametrize("family,head", CASES)
def test_every_baseline_runs_and_is_batch_invariant(family, head):
    model = make_text(family, head, attn=LIBRARY_ATTENTION.get(family, ("sdpa",))[0])
    ids, mask, _ = padded_batch([6, 4], "right")
    options = {"position": 2} if head == "masked_lm" else {}
    for method in BASELINES:
        rel = explain(model, ids, mask, method=method, params=SMALL.get(method), **options)
        alone = explain(model, ids[1:, :4], mask[1:, :4], method=method, params=SMALL.get(method), **options)
        assert rel.scores.shape == ids.shape and not rel.scores[1, 4:].any(), method
        assert torch.allclose(alone.scores, rel.scores[1:, :4], atol=1e-8), method


def test_ig_on_gpt2_equals_a_direct_captum_call_on_the_library_model():
    model = make_text("gpt2", "causal")
    ids, mask, _ = padded_batch([5, 5], "right")
    rel = explain(model, ids, mask, method="integrated_gradients", params={"n_steps": 8})
    embeds = model.get_input_embeddings()(ids).detach()
    direct = IntegratedGradients(lambda e: model(inputs_embeds=e).logits[:, -1]).attribute(
        embeds, baselines=0.0, target=rel.target, n_steps=8).sum(-1)
    assert torch.allclose(rel.scores.double(), direct, atol=1e-5 * float(direct.abs().max()))


def test_attention_row_methods_refuse_an_average_pooled_vit():
    model = make_rope_vit("reg_gap")
    x = images(1)
    with pytest.raises(UnsupportedModelError, match="pools 'avg'"):
        explain(model, x, method="attn_rollout")
    assert explain(model, x, method="atman").scores.shape == (1, 32, 32)
    cls_model = make_rope_vit("rope_ape")
    for method in BASELINES:
        assert explain(cls_model, x, method=method, params=SMALL.get(method)).scores.shape == (1, 32, 32)


@pytest.mark.parametrize("method", ["integrated_gradients", "smoothgrad", "atman"])
def test_a_masked_lm_position_per_sample_follows_the_rows_of_multi_pass_methods(method):
    """Multi-pass methods repeat and regroup the samples' rows; each row keeps its own sample's position."""
    model = make_text("bert", "masked_lm")
    ids, mask, _ = padded_batch([6, 5], "right")
    params = {**SMALL.get(method, {}), **({"times_input": True} if method == "smoothgrad" else {})}
    rel = explain(model, ids, mask, method=method, params=params, position=torch.tensor([1, 3]), batch_size=3)
    assert rel.extras["explained_index"].tolist() == [1, 3]
    for b, position in enumerate((1, 3)):
        alone = explain(model, ids[b:b + 1], mask[b:b + 1], method=method, params=params, position=position)
        assert torch.allclose(alone.scores, rel.scores[b:b + 1], atol=1e-8), b
        assert torch.allclose(alone.logit, rel.logit[b:b + 1], atol=1e-10)
