"""The AttnLRP paper's ViT composites (appendix B.4): where the gamma rule goes, with which values, and the
relevance accounting of the twin under them (zero-bias tiny ViT, float64)."""
import pytest
import torch

from models.test_vit_twin import images, ledger, make_vit
from palrp_bench import explain
from palrp_bench.lrp.composites import get_composite


def test_gamma_placement_and_values_of_appendix_b4():
    for name, base in (("attnlrp_gamma_b4", "attnlrp"), ("cp_lrp_gamma_b4", "cp_lrp")):
        c, b = get_composite(name), get_composite(base)
        assert c.gamma_for("patch_embed") == 0.25  # Conv (Figure 13)
        assert c.gamma_for("mlp") == 0.05 and c.gamma_for("head") == 0.05  # Linear (Figure 14)
        assert c.gamma_for("qkv") is None and c.gamma_for("attn_out") is None  # epsilon (Figures 15, 16)
        for field in ("activation", "norm", "product", "attn_weights_share", "attn_value_share", "attn_qk_share"):
            assert getattr(c, field) == getattr(b, field), (name, field)
    palrp_values = get_composite("attnlrp_gamma")
    assert palrp_values.gamma_for("patch_embed") == 100.0  # PA-LRP's official value, kept apart
    assert {k: v for k, v in palrp_values.linear_gamma.items() if k != "patch_embed"} == \
        {k: v for k, v in get_composite("attnlrp_gamma_b4").linear_gamma.items() if k != "patch_embed"}


def test_cp_lrp_b4_conserves_without_biases():
    model = make_vit("plain", zero_bias=True)
    total, _, _ = ledger(model, images(3), "cp_lrp_gamma_b4")
    assert torch.allclose(total, torch.ones_like(total), atol=1e-10, rtol=0)


def test_attnlrp_b4_identity_with_softmax_absorption():
    model = make_vit("plain", zero_bias=True)
    total, softmax, _ = ledger(model, images(3), "attnlrp_gamma_b4", attention="eager")
    assert softmax.abs().min() > 1e-4
    assert torch.allclose(total + softmax, torch.ones_like(total), atol=1e-8, rtol=0)


@pytest.mark.parametrize("method", ["attnlrp_gamma_b4", "cp_lrp_gamma_b4"])
def test_methods_use_their_composite_and_differ_from_the_palrp_gamma_values(method):
    model = make_vit("plain")
    x = images(2)
    e = explain(model, x, method=method)
    assert e.rules == method
    other = explain(model, x, method="attnlrp", rules="attnlrp_gamma" if method.startswith("attnlrp") else "cp_lrp")
    assert not torch.allclose(e.extras["scores_signed"], other.extras["scores_signed"])
