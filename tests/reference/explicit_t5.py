"""Slow, explicit LRP of a T5 with one encoder and one decoder layer (``T5ForConditionalGeneration``, both variants):
every relevance tensor written out with the textbook rules of :mod:`reference.explicit_lrp`, one unpadded sample,
float64. The T5 twin (modified Gradient x Input through fused attention) must agree with it.

The rules (AttnLRP, docs/positional.md "Relative position bias (T5)"): the epsilon rule (eps -> 0) for linear maps and
residual sums; T5LayerNorm with its normaliser ``1 / rms(x)`` constant, so that per token it is the diagonal map
``x -> x * w / rms`` (epsilon rule: relevance passes elementwise unchanged); the identity rule for the activation and
the uniform rule for the gate product (v1.1); the softmax rule and the uniform-epsilon rule on both attention
products, without ``1 / sqrt(d)``; the tied head's constant rescale ``d_model ** -0.5`` passes relevance unchanged.
The relative position bias ``B`` [H, T, T] of each stack (the library's ``compute_bias``: its buckets and table) is
added to the scores under the epsilon rule, ``R(B_hij) = B_hij g_hij`` with ``g = R(S) / S``, then

* ``relative_half``: half to query ``i``, half to key ``j``;
* ``key``: all to key ``j``.
"""
import torch

from reference.explicit_lrp import linear_epsilon, sum_epsilon
from reference.explicit_models import attention, head_relevance, heads, merge


def rms_norm(x, module):
    """``(z, rms)`` of T5LayerNorm in float64."""
    rms = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + module.variance_epsilon)
    return x / rms * module.weight, rms


def rms_norm_identity(x, module, rms, R_out):
    """The diagonal map ``x * w / rms`` (rms constant) under the epsilon rule, token by token."""
    z = x * module.weight / rms
    return torch.where(z != 0, x * module.weight / rms / torch.where(z != 0, z, torch.ones_like(z)),
                       torch.zeros_like(z)) * R_out


class Stack:
    """Forward of one T5 layer stack with everything its explicit backward needs."""

    def __init__(self, stack, x0, n_heads, causal):
        self.stack, self.n_heads = stack, n_heads
        block = stack.block[0]
        T = x0.shape[0]
        self.x0 = x0
        attn = block.layer[0].SelfAttention
        self.bias = attn.compute_bias(T, T)[0]                               # [H, T, T]
        self.valid = torch.ones(T, T, dtype=torch.bool).tril() if causal else None
        self.h1, self.r1 = rms_norm(x0, block.layer[0].layer_norm)
        self.q, self.k, self.v = (heads(self.h1 @ m.weight.T, n_heads) for m in (attn.q, attn.k, attn.v))
        S = self.q @ self.k.transpose(-1, -2) + self.bias
        if self.valid is not None:
            S = S.masked_fill(~self.valid, float("-inf"))
        self.o = merge(torch.softmax(S, -1) @ self.v)
        self.a = self.o @ attn.o.weight.T
        self.x1 = x0 + self.a

    def self_attention_backward(self, R_x1):
        """``(R_x0, R_B)`` from the relevance of the residual after the self-attention."""
        block, attn = self.stack.block[0], self.stack.block[0].layer[0].SelfAttention
        R_x0, R_a = sum_epsilon(self.x0, self.a, R_x1)
        R_o = linear_epsilon(self.o, attn.o.weight, None, R_a)
        R_q, R_k, R_v, g = attention(self.q, self.k, self.v, 1.0, heads(R_o, self.n_heads), self.valid, self.bias)
        R_h1 = sum(linear_epsilon(self.h1, m.weight, None, merge(r)) for m, r in ((attn.q, R_q), (attn.k, R_k),
                                                                                 (attn.v, R_v)))
        R_x0 = R_x0 + rms_norm_identity(self.x0, block.layer[0].layer_norm, self.r1, R_h1)
        R_B = torch.where(torch.isfinite(self.bias) if self.valid is None else self.valid, self.bias * g,
                          torch.zeros_like(g))
        return R_x0, R_B


def feed_forward(sub, x):
    """Forward of a T5 feed-forward sub-layer: ``(out, cache)``."""
    h, r = rms_norm(x, sub.layer_norm)
    ff = sub.DenseReluDense
    if hasattr(ff, "wi_0"):
        pre, lin = h @ ff.wi_0.weight.T, h @ ff.wi_1.weight.T
        z = ff.act(pre) * lin
    else:
        pre, lin = h @ ff.wi.weight.T, None
        z = ff.act(pre)
    m = z @ ff.wo.weight.T
    return x + m, (x, h, r, pre, lin, z, m)


def feed_forward_backward(sub, cache, R_out):
    x, h, r, pre, lin, z, m = cache
    ff = sub.DenseReluDense
    R_x, R_m = sum_epsilon(x, m, R_out)
    R_z = linear_epsilon(z, ff.wo.weight, None, R_m)
    if lin is not None:                                   # uniform rule on the gate product, identity on act
        R_h = linear_epsilon(h, ff.wi_0.weight, None, R_z / 2) + linear_epsilon(h, ff.wi_1.weight, None, R_z / 2)
    else:                                                 # identity rule on the activation
        R_h = linear_epsilon(h, ff.wi.weight, None, R_z)
    return R_x + rms_norm_identity(x, sub.layer_norm, r, R_h)


def split(R_B, rule):
    """Per-token query and key sides ``[T]`` of one layer's bias relevance ``[H, T, T]``."""
    if rule == "relative_half":
        return R_B.sum((0, 2)) / 2, R_B.sum((0, 1)) / 2
    return torch.zeros(R_B.shape[1], dtype=R_B.dtype), R_B.sum((0, 1))


@torch.no_grad()
def t5_reference(model, ids, decoder_ids, rule="relative_half") -> dict:
    """Explicit LRP of a one-layer-each T5 at the last decoder position: ``semantic`` ``[T_enc]``,
    ``decoder_semantic`` ``[T_dec]``, the bias sides ``query`` / ``key`` ``[T_enc]`` and ``decoder_query`` /
    ``decoder_key`` ``[T_dec]``, the ``target`` and its ``logit``."""
    cfg = model.config
    H = cfg.num_heads
    enc = Stack(model.encoder, model.shared.weight[ids], H, causal=False)
    enc_x2, enc_ff = feed_forward(model.encoder.block[0].layer[-1], enc.x1)
    encoded, enc_rf = rms_norm(enc_x2, model.encoder.final_layer_norm)

    dec = Stack(model.decoder, model.shared.weight[decoder_ids], H, causal=True)
    cross = model.decoder.block[0].layer[1]
    ca = cross.EncDecAttention
    hc, rc = rms_norm(dec.x1, cross.layer_norm)
    q, k, v = heads(hc @ ca.q.weight.T, H), heads(encoded @ ca.k.weight.T, H), heads(encoded @ ca.v.weight.T, H)
    oc = merge(torch.softmax(q @ k.transpose(-1, -2), -1) @ v)
    ac = oc @ ca.o.weight.T
    y2 = dec.x1 + ac
    y3, dec_ff = feed_forward(model.decoder.block[0].layer[-1], y2)
    hf, rf = rms_norm(y3, model.decoder.final_layer_norm)
    scale = cfg.d_model ** -0.5 if cfg.scale_decoder_outputs else 1.0

    # backward, explicit: the head (a constant rescale passes relevance unchanged), then the decoder
    R_hf, target, logit = head_relevance(hf * scale, model.lm_head.weight, None, decoder_ids.shape[0] - 1)
    R_y3 = rms_norm_identity(y3, model.decoder.final_layer_norm, rf, R_hf)
    R_y2 = feed_forward_backward(model.decoder.block[0].layer[-1], dec_ff, R_y3)
    R_y1, R_ac = sum_epsilon(dec.x1, ac, R_y2)
    R_oc = linear_epsilon(oc, ca.o.weight, None, R_ac)
    R_q, R_k, R_v, _ = attention(q, k, v, 1.0, heads(R_oc, H))
    R_y1 = R_y1 + rms_norm_identity(dec.x1, cross.layer_norm, rc, linear_epsilon(hc, ca.q.weight, None, merge(R_q)))
    R_encoded = (linear_epsilon(encoded, ca.k.weight, None, merge(R_k))
                 + linear_epsilon(encoded, ca.v.weight, None, merge(R_v)))
    R_dec_x0, R_dec_B = dec.self_attention_backward(R_y1)
    # the encoder
    R_x2 = rms_norm_identity(enc_x2, model.encoder.final_layer_norm, enc_rf, R_encoded)
    R_x1 = feed_forward_backward(model.encoder.block[0].layer[-1], enc_ff, R_x2)
    R_x0, R_enc_B = enc.self_attention_backward(R_x1)
    query, key = split(R_enc_B, rule)
    dquery, dkey = split(R_dec_B, rule)
    return {"target": target, "logit": logit, "semantic": R_x0.sum(-1), "decoder_semantic": R_dec_x0.sum(-1),
            "query": query, "key": key, "decoder_query": dquery, "decoder_key": dkey}
