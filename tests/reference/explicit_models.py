"""Slow, explicit LRP of whole one-layer models (GPT-2, OPT, BLOOM, BERT, RoBERTa, a timm RoPE ViT): every relevance
tensor written out with the textbook rules of :mod:`reference.explicit_lrp`, one unpadded sample at a time, in
float64. The fast twins (modified Gradient x Input through fused attention) must agree with these.

The rules: epsilon rule (eps -> 0) for linear maps and sums, the identity rule for activations and for the
LayerNorm normaliser (the map ``x -> (x - mean) / std * w + b`` is linear once ``std`` is a constant), the softmax
rule and the uniform-epsilon rule on both attention matrix products (AttnLRP), the uniform rule on RoPE's products
(paper Eq. 10), and for ALiBi (docs/positional.md) the epsilon rule on ``S = q k^T * scale + P`` followed by

* ``paper``: ``R(i) = -m_h i g_hij``, ``R(j) = m_h j g_hij`` (the conserving reading of Appendix B, positions from 0),
* ``relative_half``: ``R(P_hij) / 2`` to each of query ``i`` and key ``j``,

with ``g = R(S) / S`` the relevance per unit score (defined where ``P = 0`` too).
"""
import torch
import torch.nn.functional as F

from reference.explicit_lrp import linear_epsilon, matmul_uniform_epsilon, sum_epsilon


def layer_norm_identity(x, weight, bias, eps, R_out):
    """LayerNorm ``[T, n]`` with the standard deviation constant: per token an affine map, epsilon rule."""
    n = x.shape[-1]
    std = torch.sqrt(x.var(-1, unbiased=False) + eps)
    w = torch.ones(n, dtype=x.dtype) if weight is None else weight
    rows = []
    for t in range(x.shape[0]):
        M = (torch.eye(n, dtype=x.dtype) - 1.0 / n) / std[t] * w[None, :]      # z = x @ M + bias
        rows.append(linear_epsilon(x[t:t + 1], M.T, bias, R_out[t:t + 1])[0])
    return torch.stack(rows)


def layer_norm(x, module):
    return F.layer_norm(x, x.shape[-1:], module.weight, module.bias, module.eps)


def attention(q, k, v, scale, R_out, valid=None, bias=None):
    """Heads ``[H, T, d]``; ``bias`` ``[H, T, T]`` added to the scaled scores. Returns ``R_q, R_k, R_v`` and
    ``g = R(S) / S`` ``[H, T, T]`` (0 where masked)."""
    qk = (q @ k.transpose(-1, -2)) * scale
    S = qk if bias is None else qk + bias
    if valid is not None:
        S = S.masked_fill(~valid, float("-inf"))
    A = torch.softmax(S, -1)
    R_A, R_V = matmul_uniform_epsilon(A, v, R_out)
    g = R_A - A * R_A.sum(-1, keepdim=True)          # softmax rule: R(S) = S * g
    if valid is not None:
        g = torch.where(valid, g, torch.zeros_like(g))
    R_Q, R_Kt = matmul_uniform_epsilon(q, k.transpose(-1, -2), qk * g)   # epsilon on S = qk + bias, then matmul
    return R_Q, R_Kt.transpose(-1, -2), R_V, g


def heads(x, n_heads):
    t, d = x.shape
    return x.view(t, n_heads, d // n_heads).transpose(0, 1)


def merge(x):
    h, t, d = x.shape
    return x.transpose(0, 1).reshape(t, h * d)


def head_relevance(h, W, b, position, starting_relevance="logit"):
    """The explained logit (arg-max at ``position`` of ``h @ W^T + b``), its value and the relevance of ``h``
    ``[T, D]``: the logit's own value (or 1) sent back through its row of the head by the epsilon rule (only that
    row: the other logits carry no relevance, and a zero row, e.g. a tied padding embedding, would give 0 / 0)."""
    logits = h[position] @ W.T + (0 if b is None else b)
    target = int(logits.argmax())
    R_out = (logits[target] if starting_relevance == "logit" else torch.ones((), dtype=h.dtype)).reshape(1, 1)
    R = torch.zeros_like(h)
    R[position] = linear_epsilon(h[position:position + 1], W[target:target + 1],
                                 None if b is None else b[target:target + 1], R_out)[0]
    return R, target, float(logits[target])


# ----------------------------------------------------------------------------------- pre-norm decoders
def decoder_weights(model) -> dict:
    """The one layer of a GPT-2 / OPT / BLOOM model as plain tensors (``W`` is ``[out, in]``)."""
    family = model.config.model_type
    if family == "gpt2":
        tr, blk = model.transformer, model.transformer.h[0]
        D = tr.wte.weight.shape[1]
        Wqkv, bqkv = blk.attn.c_attn.weight.T, blk.attn.c_attn.bias
        qkv = [(Wqkv[i * D:(i + 1) * D], bqkv[i * D:(i + 1) * D]) for i in range(3)]
        return dict(table=tr.wte.weight, positions=tr.wpe.weight, offset=0, embed_norm=None, ln1=blk.ln_1,
                    qkv=qkv, o=(blk.attn.c_proj.weight.T, blk.attn.c_proj.bias), ln2=blk.ln_2,
                    fc1=(blk.mlp.c_fc.weight.T, blk.mlp.c_fc.bias), act=blk.mlp.act,
                    fc2=(blk.mlp.c_proj.weight.T, blk.mlp.c_proj.bias), lnf=tr.ln_f, n_heads=blk.attn.num_heads,
                    scale=blk.attn.scaling, head=_head(model, "score", "lm_head"), alibi=None)
    if family == "opt":
        dec, blk = model.model.decoder, model.model.decoder.layers[0]
        at = blk.self_attn
        lin = lambda m: (m.weight, m.bias)  # noqa: E731
        return dict(table=dec.embed_tokens.weight, positions=dec.embed_positions.weight, offset=2, embed_norm=None,
                    ln1=blk.self_attn_layer_norm, qkv=[lin(at.q_proj), lin(at.k_proj), lin(at.v_proj)],
                    o=lin(at.out_proj), ln2=blk.final_layer_norm, fc1=lin(blk.fc1), act=blk.activation_fn,
                    fc2=lin(blk.fc2), lnf=dec.final_layer_norm, n_heads=at.num_heads, scale=at.scaling,
                    head=_head(model, "score", "lm_head"), alibi=None)
    if family == "bloom":
        tr, blk = model.transformer, model.transformer.h[0]
        at, H = blk.self_attention, model.config.n_head
        d = at.head_dim
        W = at.query_key_value.weight.view(H, 3, d, -1)
        b = at.query_key_value.bias.view(H, 3, d)
        qkv = [(W[:, i].reshape(H * d, -1), b[:, i].reshape(-1)) for i in range(3)]
        from transformers.models.bloom.modeling_bloom import build_alibi_tensor
        slopes = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), H, torch.float32)[:, 0, 1].double()
        return dict(table=tr.word_embeddings.weight, positions=None, offset=0, embed_norm=tr.word_embeddings_layernorm,
                    ln1=blk.input_layernorm, qkv=qkv, o=(at.dense.weight, at.dense.bias), ln2=blk.post_attention_layernorm,
                    fc1=(blk.mlp.dense_h_to_4h.weight, blk.mlp.dense_h_to_4h.bias), act=blk.mlp.gelu_impl,
                    fc2=(blk.mlp.dense_4h_to_h.weight, blk.mlp.dense_4h_to_h.bias), lnf=tr.ln_f, n_heads=H,
                    scale=at.inv_norm_factor, head=_head(model, "score", "lm_head"), alibi=slopes)
    raise ValueError(family)


def _head(model, classifier_name, lm_name):
    m = getattr(model, classifier_name, None) or getattr(model, lm_name)
    return m.weight, m.bias


@torch.no_grad()
def decoder_reference(model, ids, alibi_rule="paper") -> dict:
    """Explicit LRP of a one-layer pre-norm decoder at the last position (causal LM or last-token classifier):
    ``semantic`` ``[T]``, ``positional`` ``[T]`` (learned rows, or ALiBi query + key sides) and for ALiBi the two
    sides apart."""
    p = decoder_weights(model)
    T = ids.shape[0]
    E = p["table"][ids]
    if p["positions"] is not None:
        P = p["positions"][torch.arange(T) + p["offset"]]
        x0 = E + P
    else:
        x0 = layer_norm(E, p["embed_norm"])
    h1 = layer_norm(x0, p["ln1"])
    q, k, v = (heads(h1 @ W.T + b, p["n_heads"]) for W, b in p["qkv"])
    valid = torch.ones(T, T, dtype=torch.bool).tril()
    bias = None
    if p["alibi"] is not None:
        pos = torch.arange(T, dtype=torch.float64)
        bias = p["alibi"][:, None, None] * (pos[None, None, :] - pos[None, :, None])    # m_h (j - i)
    S = (q @ k.transpose(-1, -2)) * p["scale"] + (0 if bias is None else bias)
    A = torch.softmax(S.masked_fill(~valid, float("-inf")), -1)
    o = merge(A @ v)
    a = o @ p["o"][0].T + p["o"][1]
    x1 = x0 + a
    h2 = layer_norm(x1, p["ln2"])
    f = h2 @ p["fc1"][0].T + p["fc1"][1]
    g_act = p["act"](f)
    m = g_act @ p["fc2"][0].T + p["fc2"][1]
    x2 = x1 + m
    hf = layer_norm(x2, p["lnf"])
    # backward, explicit
    R_hf, target, logit = head_relevance(hf, *p["head"], T - 1)
    R_x2 = layer_norm_identity(x2, p["lnf"].weight, p["lnf"].bias, p["lnf"].eps, R_hf)
    R_x1, R_m = sum_epsilon(x1, m, R_x2)
    R_f = linear_epsilon(g_act, *p["fc2"], R_m)                     # identity rule on the activation
    R_h2 = linear_epsilon(h2, *p["fc1"], R_f)
    R_x1 = R_x1 + layer_norm_identity(x1, p["ln2"].weight, p["ln2"].bias, p["ln2"].eps, R_h2)
    R_x0, R_a = sum_epsilon(x0, a, R_x1)
    R_o = linear_epsilon(o, *p["o"], R_a)
    R_q, R_k, R_v, g = attention(q, k, v, p["scale"], heads(R_o, p["n_heads"]), valid, bias)
    R_qkv = torch.cat([merge(r) for r in (R_q, R_k, R_v)], -1)
    W_qkv = torch.cat([W for W, _ in p["qkv"]])
    b_qkv = torch.cat([b for _, b in p["qkv"]])
    R_h1 = linear_epsilon(h1, W_qkv, b_qkv, R_qkv)
    R_x0 = R_x0 + layer_norm_identity(x0, p["ln1"].weight, p["ln1"].bias, p["ln1"].eps, R_h1)
    out = {"target": target, "logit": logit}
    if p["positions"] is not None:
        R_E, R_P = sum_epsilon(E, P, R_x0)
        out.update(semantic=R_E.sum(-1), positional=R_P.sum(-1))
        return out
    en = p["embed_norm"]
    out["semantic"] = layer_norm_identity(E, en.weight, en.bias, en.eps, R_x0).sum(-1)
    m_h = p["alibi"][:, None, None]
    pos = torch.arange(T, dtype=torch.float64)
    if alibi_rule == "paper":
        query = (-m_h * pos[None, :, None] * g).sum((0, 2))
        key = (m_h * pos[None, None, :] * g).sum((0, 1))
    else:
        R_P = bias * g
        query, key = R_P.sum((0, 2)) / 2, R_P.sum((0, 1)) / 2
    out.update(positional=query + key, query=query, key=key)
    return out


# ------------------------------------------------------------------------------------ post-norm encoders
@torch.no_grad()
def encoder_reference(model, ids, types, position) -> dict:
    """Explicit LRP of a one-layer BERT / RoBERTa (masked LM at ``position``, or classifier at position 0):
    ``semantic``, ``positional``, ``token_type`` ``[T]``."""
    base = model.base_model
    emb, layer = base.embeddings, base.encoder.layer[0]
    T = ids.shape[0]
    start = 0 if model.config.model_type == "bert" else model.config.pad_token_id + 1
    E, P, Ty = emb.word_embeddings.weight[ids], emb.position_embeddings.weight[torch.arange(T) + start], \
        emb.token_type_embeddings.weight[types]
    s0 = E + Ty + P
    x0 = layer_norm(s0, emb.LayerNorm)
    sa, n_heads = layer.attention.self, model.config.num_attention_heads
    lin = lambda mod: (mod.weight, mod.bias)  # noqa: E731
    q, k, v = (heads(x0 @ W.T + b, n_heads) for W, b in (lin(sa.query), lin(sa.key), lin(sa.value)))
    A = torch.softmax((q @ k.transpose(-1, -2)) * sa.scaling, -1)
    o = merge(A @ v)
    out_attn = layer.attention.output
    a = o @ out_attn.dense.weight.T + out_attn.dense.bias
    s1 = a + x0
    x1 = layer_norm(s1, out_attn.LayerNorm)
    f = x1 @ layer.intermediate.dense.weight.T + layer.intermediate.dense.bias
    g_act = layer.intermediate.intermediate_act_fn(f)
    m = g_act @ layer.output.dense.weight.T + layer.output.dense.bias
    s2 = m + x1
    x2 = layer_norm(s2, layer.output.LayerNorm)
    is_classifier = type(model).__name__.endswith("ForSequenceClassification")
    e = 0 if is_classifier else position
    h = x2[e:e + 1]
    # the head, forward then backward
    if is_classifier:
        if model.config.model_type == "bert":
            dense, out_lin = base.pooler.dense, model.classifier
        else:
            dense, out_lin = model.classifier.dense, model.classifier.out_proj
        z = h @ dense.weight.T + dense.bias
        t = torch.tanh(z)
        R_z, target, logit = head_relevance(t, out_lin.weight, out_lin.bias, 0)  # tanh: identity rule
        R_h = linear_epsilon(h, dense.weight, dense.bias, R_z)
    else:
        if model.config.model_type == "bert":
            tr = model.cls.predictions.transform
            dense, act, norm, dec = tr.dense, tr.transform_act_fn, tr.LayerNorm, model.cls.predictions.decoder
        else:
            from transformers.activations import gelu
            lm = model.lm_head
            dense, act, norm, dec = lm.dense, gelu, lm.layer_norm, lm.decoder
        z = h @ dense.weight.T + dense.bias
        u = act(z)
        t = layer_norm(u, norm)
        R_t, target, logit = head_relevance(t, dec.weight, dec.bias, 0)
        R_z = layer_norm_identity(u, norm.weight, norm.bias, norm.eps, R_t)     # GELU: identity rule
        R_h = linear_epsilon(h, dense.weight, dense.bias, R_z)
    R_x2 = torch.zeros_like(x2)
    R_x2[e] = R_h[0]
    R_s2 = layer_norm_identity(s2, layer.output.LayerNorm.weight, layer.output.LayerNorm.bias,
                               layer.output.LayerNorm.eps, R_x2)
    R_m, R_x1 = sum_epsilon(m, x1, R_s2)
    R_f = linear_epsilon(g_act, layer.output.dense.weight, layer.output.dense.bias, R_m)
    R_x1 = R_x1 + linear_epsilon(x1, layer.intermediate.dense.weight, layer.intermediate.dense.bias, R_f)
    R_s1 = layer_norm_identity(s1, out_attn.LayerNorm.weight, out_attn.LayerNorm.bias, out_attn.LayerNorm.eps, R_x1)
    R_a, R_x0 = sum_epsilon(a, x0, R_s1)
    R_o = linear_epsilon(o, out_attn.dense.weight, out_attn.dense.bias, R_a)
    R_q, R_k, R_v, _ = attention(q, k, v, sa.scaling, heads(R_o, n_heads))
    W_qkv = torch.cat([sa.query.weight, sa.key.weight, sa.value.weight])
    b_qkv = torch.cat([sa.query.bias, sa.key.bias, sa.value.bias])
    R_x0 = R_x0 + linear_epsilon(x0, W_qkv, b_qkv, torch.cat([merge(r) for r in (R_q, R_k, R_v)], -1))
    R_s0 = layer_norm_identity(s0, emb.LayerNorm.weight, emb.LayerNorm.bias, emb.LayerNorm.eps, R_x0)
    share = R_s0 / s0                                                           # epsilon rule on E + Ty + P
    return {"target": target, "logit": logit, "semantic": (E * share).sum(-1),
            "positional": (P * share).sum(-1), "token_type": (Ty * share).sum(-1)}


# -------------------------------------------------------------------------------------------- RoPE ViT
def rotate_pairs(x):
    return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)


def rotate_pairs_relevance(R_rot):
    """``rot`` is a signed permutation (``rot(x)[2i] = -x[2i+1]``, ``rot(x)[2i+1] = x[2i]``): element ``n`` of
    ``rot(x)`` is built from element ``perm(n)`` of ``x``, whose relevance it passes back unchanged."""
    R = torch.empty_like(R_rot)
    R[..., 1::2] = R_rot[..., ::2]
    R[..., ::2] = R_rot[..., 1::2]
    return R


def rope_relevance(x, cos, sin, R_out):
    """``x~ = x * cos + rot(x) * sin`` (``[H, N, d]``, ``cos``/``sin`` ``[N, d]``): epsilon rule on the sum, uniform
    rule on each product. Returns ``R_x``, ``R_cos``, ``R_sin`` (summed over heads)."""
    a, b = x * cos, rotate_pairs(x) * sin
    R_a, R_b = sum_epsilon(a, b, R_out)
    return R_a / 2 + rotate_pairs_relevance(R_b / 2), (R_a / 2).sum(0), (R_b / 2).sum(0)


@torch.no_grad()
def rope_vit_reference(model, pixels) -> dict:
    """Explicit LRP of a one-layer timm RoPE ViT with a CLS token, a learned table added to the patches only
    (``no_embed_class``), fused-qkv ``AttentionRope``, LayerScale, ``Mlp`` and token pooling; starting relevance 1.
    Returns the pixel map ``[H, W]``, the table's per-patch relevance ``ape`` ``[Np]`` and ``cos`` / ``sin``
    ``[Np]``."""
    pe, blk = model.patch_embed, model.blocks[0]
    p = pe.patch_size[0]
    cols = F.unfold(pixels[None], p, stride=p)[0].T                        # [Np, 3 p p]
    Wc = pe.proj.weight.reshape(pe.proj.weight.shape[0], -1)
    tokens = cols @ Wc.T + pe.proj.bias
    P = model.pos_embed[0]
    cls = model.cls_token[0]
    z = tokens + P
    x0 = torch.cat([cls, z])
    h1 = layer_norm(x0, blk.norm1)
    at = blk.attn
    qkv = h1 @ at.qkv.weight.T + at.qkv.bias
    D = qkv.shape[-1] // 3
    q, k, v = (heads(qkv[:, i * D:(i + 1) * D], at.num_heads) for i in range(3))
    sin, cos = model.rope.get_embed().chunk(2, -1)
    qr = torch.cat([q[:, :1], q[:, 1:] * cos + rotate_pairs(q[:, 1:]) * sin], 1)
    kr = torch.cat([k[:, :1], k[:, 1:] * cos + rotate_pairs(k[:, 1:]) * sin], 1)
    A = torch.softmax((qr @ kr.transpose(-1, -2)) * at.scale, -1)
    o = merge(A @ v)
    a = (o @ at.proj.weight.T + at.proj.bias) * blk.gamma_1
    x1 = x0 + a
    h2 = layer_norm(x1, blk.norm2)
    f = h2 @ blk.mlp.fc1.weight.T + blk.mlp.fc1.bias
    g_act = blk.mlp.act(f)
    m = (g_act @ blk.mlp.fc2.weight.T + blk.mlp.fc2.bias) * blk.gamma_2
    x2 = x1 + m
    x3 = layer_norm(x2, model.norm)
    R_x3, target, _ = head_relevance(x3, model.head.weight, model.head.bias, 0, "unit")
    R_x2 = layer_norm_identity(x2, model.norm.weight, model.norm.bias, model.norm.eps, R_x3)
    R_x1, R_m = sum_epsilon(x1, m, R_x2)                                   # layer scale: constant factor
    R_f = linear_epsilon(g_act, blk.mlp.fc2.weight, blk.mlp.fc2.bias, R_m)
    R_x1 = R_x1 + layer_norm_identity(x1, blk.norm2.weight, blk.norm2.bias, blk.norm2.eps,
                                      linear_epsilon(h2, blk.mlp.fc1.weight, blk.mlp.fc1.bias, R_f))
    R_x0, R_a = sum_epsilon(x0, a, R_x1)
    R_o = linear_epsilon(o, at.proj.weight, at.proj.bias, R_a)
    R_qr, R_kr, R_v, _ = attention(qr, kr, v, at.scale, heads(R_o, at.num_heads))
    R_q, R_k = R_qr.clone(), R_kr.clone()
    R_q[:, 1:], cq, sq = rope_relevance(q[:, 1:], cos, sin, R_qr[:, 1:])
    R_k[:, 1:], ck, sk = rope_relevance(k[:, 1:], cos, sin, R_kr[:, 1:])
    R_h1 = linear_epsilon(h1, at.qkv.weight, at.qkv.bias, torch.cat([merge(r) for r in (R_q, R_k, R_v)], -1))
    R_x0 = R_x0 + layer_norm_identity(x0, blk.norm1.weight, blk.norm1.bias, blk.norm1.eps, R_h1)
    R_tokens, R_P = sum_epsilon(tokens, P, R_x0[1:])
    R_cols = linear_epsilon(cols, Wc, pe.proj.bias, R_tokens)
    size = pixels.shape[-1]
    R_pixels = F.fold(R_cols.T[None], (size, size), p, stride=p)[0]
    return {"target": target, "semantic": R_pixels.sum(0), "ape": R_P.sum(-1),
            "cos": (cq + ck).sum(-1), "sin": (sq + sk).sum(-1), "cls": R_x0[0].sum()}
