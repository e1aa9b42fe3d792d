"""Every fast rule (Gradient x Input form) against the slow explicit reference (tests/reference)."""
import pytest
import torch
import torch.nn.functional as F

from palrp_bench.lrp import rules
from reference import explicit_lrp as ref

torch.manual_seed(0)
D = torch.float64


def grad_x_input(out_fn, inputs, R_out):
    """Run the fast rule: seed the output with gradient R_out / out so that R(out) = R_out; return x * x.grad."""
    xs = [x.clone().requires_grad_(True) for x in inputs]
    out = out_fn(*xs)
    seed = torch.where(out != 0, R_out / torch.where(out != 0, out, torch.ones_like(out)), torch.zeros_like(out))
    grads = torch.autograd.grad(out, xs, grad_outputs=seed, allow_unused=True)
    return [x.detach() * (g if g is not None else torch.zeros_like(x)) for x, g in zip(xs, grads)], out


def test_scale_grad_changes_only_the_gradient():
    x = torch.randn(5, dtype=D, requires_grad=True)
    y = rules.scale_grad(x, 0.25)
    assert torch.equal(y, x)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.allclose(g, torch.full_like(x, 0.25))
    assert not rules.scale_grad(x, 0.0).requires_grad


def test_linear_epsilon_is_plain_gradient():
    x, W, b = torch.randn(3, 6, dtype=D), torch.randn(4, 6, dtype=D), torch.randn(4, dtype=D)
    R_out = torch.randn(3, 4, dtype=D)
    (R_x, R_b), _ = grad_x_input(lambda x, b: F.linear(x, W, b), [x, b], R_out)
    assert torch.allclose(R_x, ref.linear_epsilon(x, W, b, R_out), atol=1e-12)
    # what the bias absorbs closes the books: sum R_out = sum R_x + sum R_b
    assert torch.allclose(R_out.sum(), R_x.sum() + R_b.sum(), atol=1e-12)


@pytest.mark.parametrize("fn", [F.silu, F.gelu])
def test_identity_rule_passes_relevance_unchanged(fn):
    x = torch.randn(4, 7, dtype=D)
    x[0, 0] = 0.0  # the x == 0 guard
    R_out = torch.randn(4, 7, dtype=D)
    (R_x,), out = grad_x_input(lambda x: rules.activation(x, fn, "identity"), [x], R_out)
    assert torch.equal(out, fn(x))  # the library's value itself, not x * (f(x) / x)
    R_ref = R_out.clone()
    R_ref[0, 0] = 0.0  # f(0) = 0 carries no relevance
    assert torch.allclose(R_x, R_ref, atol=1e-10)


def test_identity_rule_keeps_one_autograd_node_and_its_dtype():
    """The rule is one node (its ratio saved once, no graph of ``f``); constant and no-grad inputs get ``f(x)``."""
    x = torch.randn(3, 5, dtype=torch.bfloat16, requires_grad=True)
    y = rules.activation(x, F.silu, "identity")
    assert type(y.grad_fn).__name__ == "_IdentityRuleBackward" and y.grad_fn.next_functions[0][0] is not None
    assert y.dtype == torch.bfloat16 and torch.equal(y.detach(), F.silu(x.detach()))
    assert not rules.activation(x, F.silu, "constant").requires_grad
    assert torch.equal(rules.activation(x.detach(), F.silu, "identity"), F.silu(x.detach()))


def test_uniform_product_splits_in_half_and_constants_get_nothing():
    a, b = torch.randn(5, dtype=D), torch.randn(5, dtype=D)
    R_out = torch.randn(5, dtype=D)
    (R_a, R_b), _ = grad_x_input(lambda a, b: rules.product(a, b, rule="uniform"), [a, b], R_out)
    ra, rb = ref.product_uniform(a, b, R_out)
    assert torch.allclose(R_a, ra) and torch.allclose(R_b, rb)
    # a constant operand (no grad): all relevance to the other one (AttnLRP row with cos/sin constant)
    (R_a,), _ = grad_x_input(lambda a: rules.product(a, b, rule="uniform"), [a], R_out)
    assert torch.allclose(R_a, R_out)


def test_three_operand_product_splits_in_thirds():
    a, b, c = (torch.randn(4, dtype=D) for _ in range(3))
    R_out = torch.randn(4, dtype=D)
    rs, _ = grad_x_input(lambda a, b, c: rules.product(a, b, c, rule="uniform"), [a, b, c], R_out)
    for r in rs:
        assert torch.allclose(r, R_out / 3)


def test_rms_norm_identity_rule():
    x, w = torch.randn(3, 8, dtype=D), torch.randn(8, dtype=D)
    R_out = torch.randn(3, 8, dtype=D)
    (R_x,), out = grad_x_input(lambda x: rules.rms_norm(x, w, 1e-6, "identity"), [x], R_out)
    expected = w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert torch.allclose(out, expected.to(out.dtype), atol=1e-6)
    assert torch.allclose(R_x, R_out, atol=1e-10)


def test_layer_norm_identity_rule_matches_epsilon_rule_on_the_centering_map():
    n = 6
    x, w = torch.randn(2, n, dtype=D), torch.randn(n, dtype=D)
    R_out = torch.randn(2, n, dtype=D)
    (R_x,), out = grad_x_input(lambda x: rules.layer_norm(x, w, None, 1e-6, "identity"), [x], R_out)
    assert torch.allclose(out, F.layer_norm(x, (n,), w, None, 1e-6), atol=1e-10)
    std = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-6)
    expected = []
    for i in range(2):  # the map x -> (x - mean)/std * w is linear once std is a constant: epsilon rule
        M = (torch.eye(n, dtype=D) - 1.0 / n) / std[i] * w[None, :]     # z = x @ M
        expected.append(ref.linear_epsilon(x[i:i + 1], M.T, None, R_out[i:i + 1])[0])
    assert torch.allclose(R_x, torch.stack(expected), atol=1e-9)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("gqa", [1, 2])
def test_attention_matches_attnlrp_reference(implementation, gqa):
    torch.manual_seed(0)  # unseeded draws were ill-conditioned for the tolerance about once in 300
    B, H, T, d = 2, 4, 5, 3
    q = torch.randn(B, H, T, d, dtype=D)
    k = torch.randn(B, H // gqa, T, d, dtype=D)
    v = torch.randn(B, H // gqa, T, d, dtype=D)
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[1, :, :, 0] = False  # sample 1: first key padded (left padding)
    mask[1, :, 0, 0] = True   # ... its own row keeps the diagonal
    R_out = torch.randn(B, H, T, d, dtype=D)
    scale = d ** -0.5
    fn = lambda q, k, v: rules.attention(q, k, v, mask=mask, causal=True, scale=scale, weights_share=0.5,
                                         value_share=0.5, qk_share=0.5, implementation=implementation)
    (R_q, R_k, R_v), _ = grad_x_input(fn, [q, k, v], R_out)
    valid = mask & torch.ones(T, T, dtype=torch.bool).tril()
    kr, vr = k.repeat_interleave(gqa, 1), v.repeat_interleave(gqa, 1)
    Rq, Rk, Rv, _ = ref.attention_attnlrp(q, kr, vr, scale, R_out, valid)
    # GQA: the relevance of a shared k/v head is the sum over the query heads that use it
    Rk = Rk.view(B, H // gqa, gqa, T, d).sum(2)
    Rv = Rv.view(B, H // gqa, gqa, T, d).sum(2)
    assert (R_q - Rq).abs().max() < 1e-9
    assert (R_k - Rk).abs().max() < 1e-9
    assert (R_v - Rv).abs().max() < 1e-9


def test_attention_recorder_measures_softmax_absorption():
    B, H, T, d = 1, 2, 4, 3
    q, k, v = (torch.randn(B, H, T, d, dtype=D) for _ in range(3))
    R_out = torch.randn(B, H, T, d, dtype=D)
    rec = rules.AttentionRecorder()
    fn = lambda q, k, v: rules.attention(q, k, v, mask=None, causal=True, scale=0.5, weights_share=0.5,
                                         value_share=0.5, qk_share=0.5, implementation="eager", recorder=rec)
    (R_q, R_k, R_v), _ = grad_x_input(fn, [q, k, v], R_out)
    *_, absorbed_ref = ref.attention_attnlrp(q, k, v, 0.5, R_out, torch.ones(T, T, dtype=torch.bool).tril())
    assert torch.allclose(rec.absorbed(), absorbed_ref.reshape(1), atol=1e-10)
    # books close: R_out = R_q + R_k + R_v + absorbed
    total = R_q.sum() + R_k.sum() + R_v.sum() + rec.absorbed().sum()
    assert torch.allclose(total, R_out.sum(), atol=1e-10)


def _traced_block(x0, proj, w, b):
    """A pre-norm block with a GQA attention, then a post-norm style sum; returns every intermediate."""
    h = rules.layer_norm(x0, w, b, 1e-5, "identity")                # input is no residual sum: not recorded
    q = h.view(1, 3, 2, 2).transpose(1, 2)
    kv = h[..., :2].view(1, 3, 1, 2).transpose(1, 2)                  # one key/value head for two query heads
    o = rules.attention(q, kv, kv, mask=None, causal=True, scale=0.5, weights_share=1.0, value_share=1.0,
                        qk_share=1.0, implementation="eager")
    a = rules.output_projection(o.transpose(1, 2).reshape(1, 3, 4), proj)
    y = rules.residual(x0, a)
    m = rules.rms_norm(y, w, 1e-6, "identity") * 2.0                  # a norm of a residual sum: recorded
    out = rules.residual(y, m)
    n = rules.layer_norm(out, w, b, 1e-5, "identity")
    last = rules.residual(n, out)                                      # a stream that is a norm's output
    return kv, y, m, out, n, last


def test_a_tracing_recorder_links_sums_projections_and_norms_and_cuts_the_graph():
    x0 = torch.randn(1, 3, 4, dtype=D, requires_grad=True)
    proj = torch.nn.Linear(4, 4).double()
    w, b = 1 + 0.1 * torch.randn(4, dtype=D), 0.1 * torch.randn(4, dtype=D)
    plain = _traced_block(x0, proj, w, b)
    rec = rules.AttentionRecorder(trace=True)
    with rules.attention_hooks(recorder=rec):
        traced = _traced_block(x0, proj, w, b)
    for p_, t_ in zip(plain, traced):                                  # forward values unchanged
        assert torch.equal(p_, t_)
    (head,) = rec.heads
    assert torch.equal(head.values, traced[0].repeat_interleave(2, 1)) and head.projection is proj
    assert rec.records[0][0] is None and rec.records[0][1].shape == (1, 2, 3, 3)
    assert [(r.stream_from, r.branch_from) for r in rec.residuals] == [(None, 0), (("residual", 0), None),
                                                                       (("norm", 1), None)]
    assert [(n.kind, n.input_from) for n in rec.norms] == [("rms", 0), ("layer", 1)]
    for norm in rec.norms:                                             # linear part + bias = the norm's output
        linear = norm.linear(norm.input, norm.inverse_scale(D))
        assert torch.allclose(linear + (0 if norm.bias is None else norm.bias), norm.output, atol=1e-12)
    # the graph is cut at every residual sum: a gradient taken after one reaches that sum's leaf, never x0
    leaf = rec.residuals[1].output
    assert leaf is traced[3] and leaf.is_leaf and leaf.requires_grad
    n = traced[4]
    (g,) = torch.autograd.grad(n.sum() + (n * n).sum(), leaf, retain_graph=True)
    (g_plain,) = torch.autograd.grad(plain[4].sum() + (plain[4] * plain[4]).sum(), plain[3], retain_graph=True)
    assert torch.allclose(g, g_plain, atol=1e-12)
    assert torch.autograd.grad(n.sum(), x0, allow_unused=True)[0] is None
    assert torch.autograd.grad(plain[4].sum(), x0)[0].abs().sum() > 0
    # outside a tracing recorder the functions are the plain sum and projection
    assert rules.residual(x0, x0).grad_fn is not None and not rules.AttentionRecorder().trace


def test_cp_lrp_attention_sends_everything_to_values():
    q, k, v = (torch.randn(1, 2, 4, 3, dtype=D) for _ in range(3))
    R_out = torch.randn(1, 2, 4, 3, dtype=D)
    fn = lambda q, k, v: rules.attention(q, k, v, mask=None, causal=True, scale=0.5, weights_share=0.0,
                                         value_share=1.0, qk_share=0.5)
    (R_q, R_k, R_v), _ = grad_x_input(fn, [q, k, v], R_out)
    assert R_q.abs().max() == 0 and R_k.abs().max() == 0
    assert torch.allclose(R_v.sum(), R_out.sum(), atol=1e-10)


# ---------------------------------------------------------------- epsilon-rule stabilisers (lrp/stabilizers.py)
# eps is chosen large (comparable to the pre-activations) so that a wrong factor or a wrong place is far outside
# float64 rounding; the official values (1e-8 .. 1e-6) are checked against the official code's outputs in
# tests/methods/test_official_agreement.py and tests/models/test_deit_official.py.
@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_stabilized_linear_is_the_stabilised_epsilon_rule(eps):
    x, W, b = torch.randn(3, 6, dtype=D), torch.randn(4, 6, dtype=D), torch.randn(4, dtype=D)
    R_out = torch.randn(3, 4, dtype=D)
    (R_x,), out = grad_x_input(lambda x: rules.stabilize(F.linear(x, W, b), eps), [x], R_out)
    assert torch.equal(out, F.linear(x, W, b)), "forward unchanged"
    assert torch.allclose(R_x, ref.linear_epsilon(x, W, b, R_out, eps), atol=1e-12)
    if eps:  # the stabiliser makes a difference, so the comparison above can fail
        assert (R_x - ref.linear_epsilon(x, W, b, R_out)).abs().max() > 1e-3


def test_stabilized_sum_is_the_stabilised_epsilon_rule_and_not_sign_aware():
    a, b = torch.randn(2, 7, dtype=D), torch.randn(2, 7, dtype=D)
    a[0, 0], b[0, 0] = 0.3, -0.5          # z = -0.2: the official "+ eps" (not "+ eps * sign(z)") amplifies
    a[1, 1], b[1, 1] = 0.25, -0.5         # z = -0.25 = -eps: the official code divides by zero; nothing flows
    R_out = torch.randn(2, 7, dtype=D)
    eps = 0.25
    (R_a, R_b), out = grad_x_input(lambda a, b: rules.stabilize(a + b, eps), [a, b], R_out)
    assert torch.equal(out, a + b)
    ra, rb = ref.sum_epsilon(a, b, R_out, eps)
    keep = torch.ones_like(a, dtype=torch.bool)
    keep[1, 1] = False
    assert torch.allclose(R_a[keep], ra[keep], atol=1e-12) and torch.allclose(R_b[keep], rb[keep], atol=1e-12)
    assert R_a[1, 1] == 0 and R_b[1, 1] == 0
    assert abs(float(R_a[0, 0] / R_out[0, 0]) - 0.3 / 0.05) < 1e-12  # a / (z + eps), z + eps = 0.05


def test_stabilize_is_a_no_op_without_eps_or_gradient():
    x = torch.randn(4, dtype=D, requires_grad=True)
    assert rules.stabilize(x, 0.0) is x
    c = torch.randn(4, dtype=D)
    assert rules.stabilize(c, 1e-6) is c


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("gqa", [1, 2])
@pytest.mark.parametrize("eps", [(0.05, 0.0, 0.0), (0.0, 0.1, 0.0), (0.0, 0.0, 0.2), (0.05, 0.1, 0.2)],
                         ids=["qk", "mask", "av", "all"])
def test_attention_stabilisers_match_reference(implementation, gqa, eps):
    """Each attention stabiliser at its place (the official code's uniform-epsilon matmuls and mask add). The
    two on the scores need them materialised: the fused path refuses them instead of leaving them out."""
    qk_eps, mask_eps, av_eps = eps
    B, H, T, d = 2, 4, 5, 3
    q = torch.randn(B, H, T, d, dtype=D)
    k = torch.randn(B, H // gqa, T, d, dtype=D)
    v = torch.randn(B, H // gqa, T, d, dtype=D)
    mask = torch.ones(B, 1, T, T, dtype=torch.bool)
    mask[1, :, :, 0] = False
    mask[1, :, 0, 0] = True
    R_out = torch.randn(B, H, T, d, dtype=D)
    scale = d ** -0.5
    fn = lambda q, k, v: rules.attention(q, k, v, mask=mask, causal=True, scale=scale, weights_share=0.5,
                                         value_share=0.5, qk_share=0.5, implementation=implementation,
                                         qk_eps=qk_eps, mask_eps=mask_eps, av_eps=av_eps)
    if implementation == "sdpa" and (qk_eps or mask_eps):
        with pytest.raises(ValueError, match="need implementation='eager'"):
            grad_x_input(fn, [q, k, v], R_out)
        return
    (R_q, R_k, R_v), out = grad_x_input(fn, [q, k, v], R_out)
    exact = rules.attention(q, k, v, mask=mask, causal=True, scale=scale, weights_share=0.5, value_share=0.5,
                            qk_share=0.5, implementation=implementation)
    assert torch.equal(out, exact), "forward unchanged"
    valid = mask & torch.ones(T, T, dtype=torch.bool).tril()
    kr, vr = k.repeat_interleave(gqa, 1), v.repeat_interleave(gqa, 1)
    Rq, Rk, Rv, _ = ref.attention_attnlrp(q, kr, vr, scale, R_out, valid, qk_eps=qk_eps, mask_eps=mask_eps,
                                          av_eps=av_eps)
    Rk = Rk.view(B, H // gqa, gqa, T, d).sum(2)
    Rv = Rv.view(B, H // gqa, gqa, T, d).sum(2)
    assert (R_q - Rq).abs().max() < 1e-9
    assert (R_k - Rk).abs().max() < 1e-9
    assert (R_v - Rv).abs().max() < 1e-9
    Rq0, *_ = ref.attention_attnlrp(q, kr, vr, scale, R_out, valid)
    assert (R_q - Rq0).abs().max() > 1e-4, "the stabiliser must change the relevance (non-trivial test)"


def test_mask_stabiliser_needs_a_mask_and_value_path_stabiliser_with_constant_weights():
    """No mask and no causal constraint (the official non-causal runs): no mask add, so ``mask_eps`` does nothing.
    Value path only with half of the relevance (official ViT): ``av_eps`` stabilises what reaches V."""
    q, k, v = (torch.randn(1, 2, 4, 3, dtype=D) for _ in range(3))
    R_out = torch.randn(1, 2, 4, 3, dtype=D)

    def run(**kw):
        fn = lambda q, k, v: rules.attention(q, k, v, mask=None, causal=False, scale=0.5, qk_share=0.5, **kw)
        return grad_x_input(fn, [q, k, v], R_out)[0]

    plain = run(weights_share=0.5, value_share=0.5)
    masked_eps = run(weights_share=0.5, value_share=0.5, mask_eps=0.3)
    assert all(torch.equal(a, b) for a, b in zip(plain, masked_eps))
    R_q, R_k, R_v = run(weights_share=0.0, value_share=0.5, av_eps=0.2)
    assert R_q.abs().max() == 0 and R_k.abs().max() == 0
    A = torch.softmax((q @ k.transpose(-1, -2)) * 0.5, -1)
    _, Rv_ref = ref.matmul_uniform_epsilon(A, v, R_out, 0.2)  # half of the stabilised relevance to V
    assert torch.allclose(R_v, Rv_ref, atol=1e-12)


@pytest.mark.parametrize("shares", [(0.5, 0.5, 0.5), (1.0, 1.0, 1.0), (0.0, 1.0, 0.5)])
@pytest.mark.parametrize("batch", [1, 3])
def test_attention_bias_sinks_agree_on_every_path(monkeypatch, batch, shares):
    """An additive bias with ones whose gradients are its relevance per query / key (T5, docs/engine.md "T5"): the
    eager path (materialised scores), the chunked CPU path (fused forward, backward a few queries at a time) and SDPA
    with a mask that needs a gradient (what CUDA runs) give the same output and the same gradients of q, k, v and
    of the ones, in float64; the ones' gradients are sum_j B g and sum_i B g of the eager scores' gradient."""
    torch.manual_seed(0)
    ws, vs, qs = shares
    b, h, tq, tk, d = batch, 3, 7, 9, 4
    q, k, v = torch.randn(b, h, tq, d), torch.randn(b, h, tk, d), torch.randn(b, h, tk, d)
    q, k, v = (x.double() for x in (q, k, v))
    bias = torch.randn(1, h, tq, tk, dtype=torch.float64)
    bias[..., -2:] = torch.finfo(torch.float64).min                  # two masked keys, folded into the bias
    valid = torch.ones(b, 1, tq, tk, dtype=torch.bool)
    valid[..., -2:] = False
    seed = torch.randn(b, h, tq, d, dtype=torch.float64)
    monkeypatch.setattr(rules, "BIAS_CHUNK_ELEMENTS", 2 * b * h * tk)   # several chunks

    def run(implementation, chunked=True):
        monkeypatch.setattr(rules, "_chunked_bias_attention", lambda q_, n: chunked and q_.device.type == "cpu")
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v)]
        ones = [torch.ones(b, h, n, dtype=torch.float64, requires_grad=True) for n in (tq, tk)]
        rec = rules.AttentionRecorder() if implementation == "eager" else None
        out = rules.attention(*leaves, mask=valid, causal=False, scale=0.7, weights_share=ws, value_share=vs,
                              qk_share=qs, implementation=implementation, recorder=rec, bias=bias,
                              bias_sinks=tuple(ones))
        grads = torch.autograd.grad(out, leaves + ones, seed, allow_unused=True)
        return out.detach(), [torch.zeros_like(x) if g is None else g for x, g in zip(leaves + ones, grads)], rec

    eager, eager_grads, rec = run("eager")
    for chunked in (True, False):
        out, grads, _ = run("sdpa", chunked)
        assert torch.allclose(out, eager, atol=1e-12, rtol=0)
        for ours, theirs in zip(grads, eager_grads):
            assert torch.allclose(ours, theirs, atol=1e-12, rtol=0), chunked
    scores = rec.records[0][0]
    g = scores.grad if scores.grad is not None else torch.zeros_like(scores)      # none under ws = 0
    g = torch.where(valid, g, torch.zeros_like(g))
    relevance = torch.where(valid, bias, torch.zeros_like(g)) * g
    assert torch.allclose(eager_grads[3], relevance.sum(-1), atol=1e-12, rtol=0)
    assert torch.allclose(eager_grads[4], relevance.sum(-2), atol=1e-12, rtol=0)
    assert (eager_grads[4].abs().max() > 1e-3) == (ws > 0)
