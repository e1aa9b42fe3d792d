"""The per-token semantic and positional terms ``explain`` returns beside the scores (``extras["semantic_term"]`` /
``["positional_term"]``, what the HTML report shows): each method's scores are its aggregation of exactly these
terms (docs/protocol.md section 1), and the ViT's per-patch term is what the pixel map paints."""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.methods.pixel_aggregation import paint_patches
from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids


@pytest.fixture(scope="module")
def model():
    return make_llama("gqa", "causal", dtype=torch.float64)


def _normalised(x):
    return x / x.abs().amax(-1, keepdim=True)


def test_official_terms_by_method(model):
    ids = random_ids(2, 7)
    for method in ("pa_lrp", "pe_only", "attnlrp", "pa_lrp_no_multisink", "cp_lrp", "grad_x_input"):
        rel = explain(model, ids, method=method)
        sem, pos = rel.extras["semantic_term"], rel.extras["positional_term"]
        assert sem.shape == pos.shape == rel.scores.shape
        torch.testing.assert_close(sem, rel.semantic)  # official: the signed sum over the embedding dims
        if method == "pa_lrp_no_multisink":  # the ablation sums the per-layer terms signed
            torch.testing.assert_close(pos, rel.positional.sum(dim=(1, 2)))
        else:  # multi-sink: sum_k |pcos| + |psin| (all zero for the methods without positional sinks)
            torch.testing.assert_close(pos, rel.positional.abs().sum(dim=(1, 2)))
        expected = {"pa_lrp": _normalised(sem + pos), "pa_lrp_no_multisink": _normalised(sem + pos),
                    "pe_only": _normalised(pos)}.get(method, sem)
        torch.testing.assert_close(rel.scores, expected)
        if method in ("attnlrp", "cp_lrp", "grad_x_input"):
            assert pos.abs().max() == 0
        else:
            assert pos.abs().max() > 0


def test_eq11_terms_are_the_relu_sums(model):
    ids = random_ids(1, 8)
    rel = explain(model, ids, method="pa_lrp", aggregation="eq11")
    sem, pos = rel.extras["semantic_term"], rel.extras["positional_term"]
    torch.testing.assert_close(sem, rel.extras["semantic_relu"])
    torch.testing.assert_close(pos, rel.extras["positional_relu"].sum(dim=(1, 2)))
    torch.testing.assert_close(rel.scores, (sem + pos) / (sem + pos).max())


def test_padding_gets_zero_terms(model):
    ids = random_ids(2, 6)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    rel = explain(model, ids, attention_mask=mask, method="pa_lrp")
    assert rel.extras["semantic_term"][1, 4:].abs().max() == 0 and rel.extras["positional_term"][1, 4:].abs().max() == 0


def test_vit_positional_term_is_the_painted_patch_score():
    vit = make_vit("plain")
    x = images(2)
    for method in ("pa_lrp", "pe_only", "attnlrp"):
        rel = explain(vit, x, method=method)
        term = rel.extras["positional_term"]
        torch.testing.assert_close(term, rel.positional)  # a learned PE: one sink, its per-patch sum as it is
        painted = paint_patches(term, (8, 8), (32, 32))
        expected = {"pa_lrp": rel.semantic + painted, "pe_only": painted}.get(method, rel.semantic)
        torch.testing.assert_close(rel.scores, expected.clamp(min=0))
