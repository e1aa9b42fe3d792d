"""The pass counts planners read (each attributor's registered ``passes``) are what every method reports spending,
explanations of baselines
have the shapes every task and metric expect, and per-sample results do not depend on the batch."""
import pytest
import torch

from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids
from palrp_bench import explain
from palrp_bench.attributors import ATTRIBUTORS, method_passes
from palrp_bench.methods.registry import METHODS, get_method

TOKEN_METHODS = [m for m in METHODS.values() if "tokens" in m.modalities]
PIXEL_METHODS = [m for m in METHODS.values() if "pixels" in m.modalities and m.positional_abs]  # not the RoPE ablation
SMALL = {"integrated_gradients": {"n_steps": 4}, "smoothgrad": {"n_samples": 3}}


def test_every_method_names_a_registered_attributor():
    """A table row's attributor is registered with its pass count (the cost model prices it from there)."""
    assert {m.attributor for m in METHODS.values()} <= set(ATTRIBUTORS.names())


@pytest.mark.parametrize("method", [m.name for m in TOKEN_METHODS])
def test_token_methods_report_the_passes_of_the_registry_and_are_batch_invariant(method):
    model = make_llama("gqa", "classifier", dtype=torch.float64)
    ids = random_ids(3, 7, seed=6)
    mask = torch.ones_like(ids)
    mask[2, 5:] = 0
    params = SMALL.get(method)
    rel = explain(model, ids, mask, method=method, params=params)
    assert rel.scores.shape == (3, 7) and rel.method == method
    m = get_method(method)
    for b, n in enumerate(mask.sum(1).tolist()):
        assert (int(rel.forward_passes[b]), int(rel.backward_passes[b])) == method_passes(m, params, n)
    alone = explain(model, ids[2:], mask[2:], method=method, params=params)
    assert torch.allclose(alone.scores, rel.scores[2:], atol=1e-9)


@pytest.mark.parametrize("method", [m.name for m in PIXEL_METHODS])
def test_pixel_methods_report_the_passes_of_the_registry(method):
    model = make_vit("plain", dtype=torch.float64)
    x = images(2)
    params = SMALL.get(method)
    rel = explain(model, x, method=method, params=params)
    assert rel.scores.shape == (2, 32, 32) and bool((rel.scores >= 0).all())
    assert torch.equal(rel.scores, rel.extras["scores_signed"].clamp(min=0))
    assert method_passes(get_method(method), params, 16) == (int(rel.forward_passes[0]),
                                                           int(rel.backward_passes[0]))
