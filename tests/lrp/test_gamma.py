"""The generalised gamma rule (palrp_bench.lrp.gamma) against a slow textbook reference with explicit relevance
tensors, hand-computed cases, its limits (gamma = 0 is the epsilon rule) and conservation with zero bias."""
import pytest
import torch
import torch.nn.functional as F

from palrp_bench.lrp.gamma import gamma_conv2d, gamma_linear, gamma_module
from reference.explicit_lrp import linear_epsilon



@pytest.fixture(autouse=True)
def float64_default():
    """Every tensor of these tests is float64 (restored afterwards: other test modules share the process)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


# ------------------------------------------------------------------------------------------ slow references
def gamma_reference_linear(x, W, b, R_out, gamma, eps=0.0):
    """Textbook generalised gamma rule (Montavon et al. 2019; signed inputs as in Zennit >= 0.5), explicit
    contribution tensors. x: [n, I], W: [J, I], b: [J] or None, R_out: [n, J] -> R_in [n, I]."""
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    Wp, Wn = W.clamp(min=0), W.clamp(max=0)
    z = x @ W.T + (0 if b is None else b)
    # contribution of input i to output j, amplified when it has the output's sign
    c_pos = xp[:, None, :] * (W + gamma * Wp)[None] + xn[:, None, :] * (W + gamma * Wn)[None]   # [n, J, I]
    c_neg = xp[:, None, :] * (W + gamma * Wn)[None] + xn[:, None, :] * (W + gamma * Wp)[None]
    bias_pos = 0 if b is None else b + gamma * b.clamp(min=0)
    bias_neg = 0 if b is None else b + gamma * b.clamp(max=0)
    d_pos = c_pos.sum(-1) + bias_pos
    d_neg = c_neg.sum(-1) + bias_neg
    if eps:
        d_pos = d_pos + eps * torch.where(d_pos >= 0, 1.0, -1.0)
        d_neg = d_neg + eps * torch.where(d_neg >= 0, 1.0, -1.0)
    # explicit message tensor R_{i<-j} [n, J, I]: each output's relevance split by its contribution ratios
    msg_pos = c_pos / torch.where(z > 0, d_pos, torch.ones_like(d_pos))[:, :, None] * R_out[:, :, None]
    msg_neg = c_neg / torch.where(z < 0, d_neg, torch.ones_like(d_neg))[:, :, None] * R_out[:, :, None]
    messages = torch.where((z > 0)[:, :, None], msg_pos, torch.where((z < 0)[:, :, None], msg_neg, 0.0))
    return messages.sum(1)


def gamma_reference_conv(x, W, b, R_out, gamma, stride, padding, dilation=1):
    """Conv as the linear rule applied window by window (explicit loops over output positions); relevance of
    overlapping windows adds up. x: [n, C, H, W]."""
    n, c, h, w = x.shape
    o, _, kh, kw = W.shape
    xpad = F.pad(x, (padding, padding, padding, padding))
    R = torch.zeros_like(xpad)
    oh, ow = R_out.shape[-2:]
    span_h, span_w = dilation * (kh - 1) + 1, dilation * (kw - 1) + 1
    for i in range(oh):
        for j in range(ow):
            rows = slice(i * stride, i * stride + span_h, dilation)
            cols = slice(j * stride, j * stride + span_w, dilation)
            window = xpad[:, :, rows, cols].reshape(n, -1)
            r = gamma_reference_linear(window, W.reshape(o, -1), b, R_out[:, :, i, j], gamma)
            R[:, :, rows, cols] += r.reshape(n, c, kh, kw)
    return R[:, :, padding:padding + h, padding:padding + w]


def fast_relevance(fn, x, R_out):
    """Relevance of ``x`` under an op ``fn`` in Gradient x Input form: seed grad = R_out / z so that z*g = R_out."""
    x = x.clone().requires_grad_(True)
    z = fn(x)
    seed = torch.where(z != 0, R_out / torch.where(z != 0, z, torch.ones_like(z)), torch.zeros_like(z))
    (g,) = torch.autograd.grad(z, x, seed)
    return (x * g).detach(), z.detach()


# ------------------------------------------------------------------------------------------------- tests
def test_hand_computed_positive_and_negative_outputs():
    W = torch.tensor([[1.0, -1.0]])
    # z = 1*1 + (-2)(-1) = 3 > 0; w_up = [1.5, -1], w_down = [1, -1.5]; D+ = 1*1.5 + (-2)(-1.5) = 4.5
    R, z = fast_relevance(lambda t: gamma_linear(t, W, None, 0.5), torch.tensor([[1.0, -2.0]]), torch.ones(1, 1))
    assert z.item() == 3.0
    assert torch.allclose(R, torch.tensor([[1.5 / 4.5, 3.0 / 4.5]]), atol=1e-15)
    # z = 1 - 2 = -1 < 0; D- = 1*w_down[0] + 2*w_down[1] = 1 - 3 = -2 -> R = [1/-2, -3/-2]
    R, z = fast_relevance(lambda t: gamma_linear(t, W, None, 0.5), torch.tensor([[1.0, 2.0]]), torch.ones(1, 1))
    assert z.item() == -1.0
    assert torch.allclose(R, torch.tensor([[-0.5, 1.5]]), atol=1e-15)
    # with a bias: z = 3 + 1 = 4, D+ = 4.5 + 1 + 0.5 * 1 = 6 -> the bias keeps 1.5 / 6 of the relevance
    R, _ = fast_relevance(lambda t: gamma_linear(t, W, torch.tensor([1.0]), 0.5), torch.tensor([[1.0, -2.0]]),
                          torch.ones(1, 1))
    assert torch.allclose(R, torch.tensor([[1.5 / 6, 3.0 / 6]]), atol=1e-15)


@pytest.mark.parametrize("gamma", [0.0, 0.05, 0.25, 100.0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_reference(gamma, with_bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, generator=g)
    x[0, 2] = 0.0  # an exact zero input gets no relevance
    W = torch.randn(5, 7, generator=g)
    b = torch.randn(5, generator=g) if with_bias else None
    R_out = torch.randn(4, 5, generator=g)
    R_fast, z = fast_relevance(lambda t: gamma_linear(t, W, b, gamma), x, R_out)
    R_ref = gamma_reference_linear(x, W, b, R_out, gamma)
    assert torch.allclose(R_fast, R_ref, atol=1e-12, rtol=1e-10)
    assert R_fast[0, 2] == 0
    assert torch.equal(z, F.linear(x, W, b)), "the forward must be F.linear exactly"


def test_linear_batched_leading_dims_and_zennit_stabilizer():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 6, generator=g)
    W = torch.randn(4, 6, generator=g)
    b = torch.randn(4, generator=g) * 0.1
    R_out = torch.randn(2, 3, 4, generator=g)
    R_fast, _ = fast_relevance(lambda t: gamma_linear(t, W, b, 0.05, stabilizer=1e-6), x, R_out)
    R_ref = gamma_reference_linear(x.reshape(6, 6), W, b, R_out.reshape(6, 4), 0.05, eps=1e-6).reshape(2, 3, 6)
    assert torch.allclose(R_fast, R_ref, atol=1e-12, rtol=1e-10)
    R_exact, _ = fast_relevance(lambda t: gamma_linear(t, W, b, 0.05), x, R_out)
    assert not torch.equal(R_fast, R_exact), "the stabilizer must make a (tiny) difference"


def test_gamma_zero_is_the_epsilon_rule():
    g = torch.Generator().manual_seed(2)
    x, W, b = torch.randn(3, 6, generator=g), torch.randn(4, 6, generator=g), torch.randn(4, generator=g)
    R_out = torch.randn(3, 4, generator=g)
    R_fast, _ = fast_relevance(lambda t: gamma_linear(t, W, b, 0.0), x, R_out)
    assert torch.allclose(R_fast, linear_epsilon(x, W, b, R_out), atol=1e-12)


def test_original_gamma_rule_on_positive_inputs():
    """For x >= 0 and z > 0 the generalised rule is Montavon's: R_i = sum_j x_i (w_ji + g w_ji^+) / D_j R_j."""
    g = torch.Generator().manual_seed(3)
    x = torch.rand(2, 5, generator=g)
    W = torch.randn(3, 5, generator=g).abs() * torch.tensor([1.0, -0.2, 1.0, 1.0, -0.1])  # z > 0
    R_out = torch.rand(2, 3, generator=g)
    gamma = 0.25
    Wg = W + gamma * W.clamp(min=0)
    R_expected = ((x[:, None, :] * Wg[None]) / (x @ Wg.T)[:, :, None] * R_out[:, :, None]).sum(1)
    R_fast, z = fast_relevance(lambda t: gamma_linear(t, W, None, gamma), x, R_out)
    assert bool((z > 0).all())
    assert torch.allclose(R_fast, R_expected, atol=1e-13)


@pytest.mark.parametrize("gamma", [0.05, 100.0])
def test_conservation_without_bias(gamma):
    g = torch.Generator().manual_seed(4)
    x, W = torch.randn(5, 9, generator=g), torch.randn(6, 9, generator=g)
    R_out = torch.randn(5, 6, generator=g)
    R_fast, _ = fast_relevance(lambda t: gamma_linear(t, W, None, gamma), x, R_out)
    assert torch.allclose(R_fast.sum(1), R_out.sum(1), atol=1e-12)
    R_bias, _ = fast_relevance(lambda t: gamma_linear(t, W, torch.full((6,), 0.5), gamma), x, R_out)
    assert not torch.allclose(R_bias.sum(1), R_out.sum(1), atol=1e-6), "a bias absorbs relevance"


@pytest.mark.parametrize("gamma", [0.0, 0.05, 100.0])
@pytest.mark.parametrize("stride,padding,kernel,dilation", [(4, 0, 4, 1), (1, 1, 3, 1), (2, 1, 3, 1), (1, 2, 3, 2)])
def test_conv_matches_window_reference(gamma, stride, padding, kernel, dilation):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 8, 8, generator=g) if stride > 1 else torch.randn(1, 2, 6, 6, generator=g)
    W = torch.randn(4, x.shape[1], kernel, kernel, generator=g)
    b = torch.randn(4, generator=g) * 0.3

    def fn(t):
        return gamma_conv2d(t, W, b, gamma, stride=stride, padding=padding, dilation=dilation)

    z_shape = F.conv2d(x, W, b, stride, padding, dilation).shape
    R_out = torch.randn(z_shape, generator=g)
    R_fast, z = fast_relevance(fn, x, R_out)
    assert torch.equal(z, F.conv2d(x, W, b, stride, padding, dilation)), "the forward must be F.conv2d exactly"
    R_ref = gamma_reference_conv(x, W, b, R_out, gamma, stride, padding, dilation)
    assert torch.allclose(R_fast, R_ref, atol=1e-11, rtol=1e-9)


def test_no_gradient_reaches_parameters_and_module_dispatch():
    lin = torch.nn.Linear(5, 3)
    conv = torch.nn.Conv2d(3, 4, 2, stride=2)
    x = torch.randn(2, 5, requires_grad=True)
    gamma_module(lin, x, 0.05).sum().backward()
    assert lin.weight.grad is None and lin.bias.grad is None
    assert x.grad is not None
    img = torch.randn(1, 3, 4, 4, requires_grad=True)
    out = gamma_module(conv, img, 100.0)
    assert torch.equal(out, conv(img))
    out.sum().backward()
    assert conv.weight.grad is None
    assert torch.equal(gamma_module(lin, x, None), lin(x)), "gamma=None is the module itself (epsilon rule)"
    with pytest.raises(ValueError, match="groups=1"):
        gamma_module(torch.nn.Conv2d(4, 4, 1, groups=2), torch.randn(1, 4, 2, 2, requires_grad=True), 1.0)
    with pytest.raises(ValueError, match="gamma must be >= 0"):
        gamma_linear(x, lin.weight, lin.bias, -1.0)
    with pytest.raises(ValueError, match="plain nn.Linear or nn.Conv2d"):
        gamma_module(torch.nn.Identity(), x, 0.5)


def test_module_dispatch_passes_the_stabilizer():
    """``gamma_module(..., stabilizer=eps)`` is Zennit's sign-aware stabiliser of the linear / conv rule."""
    g = torch.Generator().manual_seed(6)
    lin = torch.nn.Linear(6, 4).double()
    x = torch.randn(3, 6, generator=g, dtype=torch.float64)
    R_out = torch.randn(3, 4, generator=g, dtype=torch.float64)
    R_mod, _ = fast_relevance(lambda t: gamma_module(lin, t, 0.05, stabilizer=0.5), x, R_out)
    R_ref = gamma_reference_linear(x, lin.weight.detach(), lin.bias.detach(), R_out, 0.05, eps=0.5)
    assert torch.allclose(R_mod, R_ref, atol=1e-12)
    R_exact, _ = fast_relevance(lambda t: gamma_module(lin, t, 0.05), x, R_out)
    assert (R_mod - R_exact).abs().max() > 1e-3
    conv = torch.nn.Conv2d(2, 3, 2, stride=2).double()
    img = torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64)
    R_out = torch.randn(1, 3, 2, 2, generator=g, dtype=torch.float64)
    R_conv, _ = fast_relevance(lambda t: gamma_module(conv, t, 100.0, stabilizer=0.5), img, R_out)
    R_conv_ref, _ = fast_relevance(lambda t: gamma_conv2d(t, conv.weight, conv.bias, 100.0, stride=2, stabilizer=0.5),
                                   img, R_out)
    assert torch.equal(R_conv, R_conv_ref)
