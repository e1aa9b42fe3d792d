"""Slow, textbook LRP references: explicit relevance tensors, no autograd tricks.

Each function takes the forward inputs and the relevance of the output and returns the relevance of the inputs
exactly as written in the AttnLRP paper (Achtibat et al., ICML 2024): epsilon rule (eps -> 0) for linear maps
(Eq. 5), identity rule for elementwise nonlinearities (Eq. 10), uniform rule for products (Prop. 3.2), the
uniform-epsilon rule for matrix multiplication (Prop. 3.3) and the softmax rule (Prop. 3.1). The fast
Gradient x Input implementations in palrp_bench.lrp.rules must agree with these ("replicates" pattern).
``eps`` is the stabiliser of the epsilon rules' denominators, ``z + eps`` (Eq. 8 with eps > 0; the official
PA-LRP code's convention, see palrp_bench/lrp/stabilizers.py). All computations in float64.
"""
import torch


def linear_epsilon(x, W, b, R_out, eps=0.0):
    """z_j = sum_i x_i W_ji + b_j;  R_i = sum_j x_i W_ji / (z_j + eps) R_j  (x: [n, I], W: [J, I])."""
    z = x @ W.T + (b if b is not None else 0)
    contrib = x[:, None, :] * W[None, :, :]              # [n, J, I]
    return (contrib / (z + eps)[:, :, None] * R_out[:, :, None]).sum(1)


def sum_epsilon(a, b, R_out, eps=0.0):
    """z = a + b (elementwise);  R_a = a / (z + eps) R_z,  R_b = b / (z + eps) R_z."""
    z = a + b
    return a / (z + eps) * R_out, b / (z + eps) * R_out


def product_uniform(a, b, R_out):
    """z = a * b;  R_a = R_b = R_z / 2."""
    return R_out / 2, R_out / 2


def matmul_uniform_epsilon(A, B, R_out, eps=0.0):
    """O = A @ B over the last two dims. Each term A_ij B_jk gets its epsilon share of R_ik, then half to each
    factor: R_A_ij = sum_k A_ij B_jk / (2 (O_ik + eps)) R_ik ;  R_B_jk = sum_i A_ij B_jk / (2 (O_ik + eps)) R_ik."""
    O = A @ B
    terms = A[..., :, :, None] * B[..., None, :, :]        # [..., i, j, k]
    share = terms / (O + eps)[..., :, None, :] * R_out[..., :, None, :] / 2
    return share.sum(-1), share.sum(-3)


def softmax_rule(x, R_out, dim=-1):
    """AttnLRP Prop. 3.1: R_x = x * (R_out - s * sum(R_out))."""
    s = torch.softmax(x, dim=dim)
    return x * (R_out - s * R_out.sum(dim, keepdim=True))


def attention_attnlrp(q, k, v, scale, R_out, valid=None, qk_eps=0.0, mask_eps=0.0, av_eps=0.0, cap=None):
    """Relevance of q, k, v for O = softmax(cap(q k^T * scale) + M) v (per head, [H, T, d]); masked scores excluded.

    Stabilisers as in the official code: ``av_eps`` in the uniform-epsilon rule of A @ V, ``mask_eps`` in the
    epsilon rule of the additive mask ``S + M`` (M = 0 where attended, -inf elsewhere; only when a mask exists),
    ``qk_eps`` in the uniform-epsilon rule of the unscaled q @ k^T.

    ``cap``: scores are soft-capped ``cap * tanh(S / cap)`` before the softmax (Gemma 2), an elementwise
    nonlinearity under the identity rule: the relevance of the raw scores is that of the capped ones."""
    S = (q @ k.transpose(-1, -2)) * scale
    if cap is not None:
        S = torch.tanh(S / cap) * cap
    if valid is not None:
        S = S.masked_fill(~valid, float("-inf"))
    A = torch.softmax(S, -1)
    R_A, R_V = matmul_uniform_epsilon(A, v, R_out, av_eps)
    S_fin = torch.where(torch.isfinite(S), S, torch.zeros_like(S))
    s = A
    R_S = S_fin * (R_A - s * R_A.sum(-1, keepdim=True))  # identity rule through the cap: R(raw) = R(capped)
    absorbed = R_A.sum() - R_S.sum()  # what the softmax rule keeps
    if valid is not None:  # z = S + M: the attended entries keep S / (S + eps) of their relevance
        R_S = torch.where(valid, S_fin / (S_fin + mask_eps) * R_S, torch.zeros_like(R_S))
    # scores = (q @ k^T) * scale: uniform-epsilon matmul on q @ k^T (the constant scale passes relevance unchanged)
    R_Q, R_Kt = matmul_uniform_epsilon(q, k.transpose(-1, -2), R_S, qk_eps)
    return R_Q, R_Kt.transpose(-1, -2), R_V, absorbed
