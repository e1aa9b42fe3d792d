"""The rules the RoPE decoder families add, against explicit references and the library's own functions:
soft-capping under the identity rule (Gemma 2), Gemma's ``(1 + w)`` RMSNorm, capped attention, partial RoPE."""
import pytest
import torch
import transformers.models.gemma2.modeling_gemma2 as gemma2
import transformers.models.gpt_neox.modeling_gpt_neox as gpt_neox

from palrp_bench.lrp import rules
from palrp_bench.lrp.positional import RoPE
from reference import explicit_lrp as ref
from lrp.test_rules import grad_x_input

torch.manual_seed(0)
D = torch.float64


def test_softcap_forward_and_identity_rule():
    x = torch.randn(3, 7, dtype=D) * 4
    R_out = torch.randn(3, 7, dtype=D)
    (R_x,), out = grad_x_input(lambda x: rules.softcap(x, 2.0, "identity"), [x], R_out)
    assert torch.allclose(out, 2.0 * torch.tanh(x / 2.0), atol=1e-12)
    assert torch.allclose(R_x, R_out, atol=1e-10)  # R_x = R_y: capping neither creates nor absorbs relevance
    (R_g,), _ = grad_x_input(lambda x: rules.softcap(x, 2.0, "gradient"), [x], R_out)
    expected = x * (1 - torch.tanh(x / 2.0) ** 2) * R_out / out  # plain Gradient x Input
    assert torch.allclose(R_g, expected, atol=1e-10)
    with pytest.raises(ValueError, match="soft-capping rule"):
        rules.softcap(x, 2.0, "constant")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemma_rms_norm_equals_the_library_and_passes_relevance(dtype):
    norm = gemma2.Gemma2RMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(0, 0.3)
    norm = norm.to(dtype)
    x = torch.randn(4, 8).to(dtype)
    ours = rules.rms_norm(x, norm.weight, 1e-6, "identity", offset=1.0, weight_before_cast=True)
    with torch.no_grad():
        assert torch.equal(ours.detach(), norm(x))  # same operations in the same dtypes: bitwise
    x64, w64 = torch.randn(4, 8, dtype=D), torch.randn(8, dtype=D)
    R_out = torch.randn(4, 8, dtype=D)
    (R_x,), _ = grad_x_input(lambda x: rules.rms_norm(x, w64, 1e-6, "identity", offset=1.0,
                                                     weight_before_cast=True), [x64], R_out)
    assert torch.allclose(R_x, R_out, atol=1e-10)  # a diagonal linear map once the normaliser is constant


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_soft_capped_attention_matches_the_reference(implementation):
    B, H, T, d = 1, 2, 5, 3
    q, k, v = (torch.randn(B, H, T, d, dtype=D) * 2 for _ in range(3))
    R_out = torch.randn(B, H, T, d, dtype=D)
    fn = lambda q, k, v: rules.attention(q, k, v, mask=None, causal=True, scale=0.7, weights_share=0.5,
                                         value_share=0.5, qk_share=0.5, implementation=implementation,
                                         score_softcap=1.5)
    (R_q, R_k, R_v), out = grad_x_input(fn, [q, k, v], R_out)
    valid = torch.ones(T, T, dtype=torch.bool).tril()
    S = torch.tanh((q @ k.transpose(-1, -2)) * 0.7 / 1.5) * 1.5
    expected = torch.softmax(S.masked_fill(~valid, float("-inf")), -1) @ v
    assert torch.allclose(out, expected, atol=1e-12)
    Rq, Rk, Rv, _ = ref.attention_attnlrp(q, k, v, 0.7, R_out, valid, cap=1.5)
    for ours, theirs in ((R_q, Rq), (R_k, Rk), (R_v, Rv)):
        assert (ours - theirs).abs().max() < 1e-9


def test_partial_rope_rotates_like_the_library_and_splits_relevance():
    x = torch.randn(2, 3, 5, 8, dtype=D)
    angles = torch.randn(2, 5, 2, dtype=D)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # 4 of 8 dims rotate
    out = RoPE.apply(x, cos, sin, "uniform")
    library, _ = gpt_neox.apply_rotary_pos_emb(x, x, cos, sin)
    assert torch.allclose(out, library, atol=1e-14)
    R_out = torch.randn_like(x)
    c, s, xs = (t.clone().requires_grad_(True) for t in (cos, sin, x))
    y = RoPE.apply(xs, c, s, "uniform")
    y.backward(R_out / y.detach())  # seed so that R(y) = R_out
    R_x, R_c, R_s = xs * xs.grad, c * c.grad, s * s.grad
    assert torch.allclose(R_x[..., 4:], R_out[..., 4:], atol=1e-10)  # pass-through dimensions keep theirs
    # Eq. 10 on the rotated dimensions: half to the tables, half to x (summed over heads)
    assert torch.allclose(R_c.sum(-1) + R_s.sum(-1), 0.5 * R_out[..., :4].sum(dim=(1, 3)), atol=1e-10)
    assert torch.allclose(R_x[..., :4].sum(), 0.5 * R_out[..., :4].sum(), atol=1e-10)
