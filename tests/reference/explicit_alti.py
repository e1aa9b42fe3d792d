"""Slow, explicit ALTI (Ferrando et al. 2022) and ALTI-Logit (Ferrando et al. 2023) of small GPT-2, LLaMA and BERT
models: one unpadded sequence, float64, no autograd, none of palrp_bench's code.

Each model's forward is written out from the Hugging Face modules' weights (``*_blocks``), keeping per block what the
methods read: the stream entering the block ``x`` ``[T, D]``, the attention weights ``A`` ``[H, T, T]``, every head's
value vector through its slice of the output projection ``pv[h, j] = W_O^h v^h_j`` ``[H, T, D]``, the projection's
bias, the resultant ``y`` (pre-norm: ``x + a``; post-norm: ``LN(x + a)`` with the norm's gain, bias and normaliser
per position) and the MLP output ``m``. The methods are then computed entry by entry with Python loops:

* ALTI matrix: ``X_ij = sum_h A[h, i, j] pv[h, j] + [i == j] x_i`` (post-norm: ``gamma * (X - mean X) / s_i``),
  ``c_ij = max(0, |y_i|_1 - |y_i - X_ij|_1)``, rows divided by their sums;
* ALTI-Logit: ``g`` is the final norm's linear part (normaliser of ``x^L_T`` constant) applied to the head's row
  ``u`` (``u_target - u_foil`` for a contrast), ``Delta^l_j = g . sum_h A[h, T, j] pv[h, j]`` and
  ``R = sum_l Delta^l (C^{l-1} ... C^1)`` with the products formed left to right, block by block.
"""
import math

import torch
import torch.nn.functional as F


def _layer_norm(x, module):
    mean = x.mean(-1, keepdim=True)
    s = torch.sqrt(((x - mean) ** 2).mean(-1, keepdim=True) + module.eps)
    return (x - mean) / s * module.weight.double() + module.bias.double(), s


def _rms_norm(x, module):
    s = torch.sqrt((x ** 2).mean(-1, keepdim=True) + module.variance_epsilon)
    return x / s * module.weight.double(), s


def _softmax_rows(S, valid):
    return torch.softmax(S.masked_fill(~valid, float("-inf")), -1)


def _projected_values(v, W_o_rows):
    """``pv[h, j] = v[h, j] @ W_o_rows[h]`` with ``W_o_rows`` ``[H, d, D]`` (the rows of W_O that head h feeds)."""
    H, T, _ = v.shape
    return torch.stack([torch.stack([v[h, j] @ W_o_rows[h] for j in range(T)]) for h in range(H)])


def _attention_output(A, pv, b_o):
    H, T, _ = A.shape
    return torch.stack([sum(A[h, i, j] * pv[h, j] for h in range(H) for j in range(T)) + b_o for i in range(T)])


@torch.no_grad()
def gpt2_blocks(model, ids):
    """Blocks of a GPT-2 LM / classifier and ``(x^L, final LayerNorm, head rows [C, D], head bias or None)``."""
    tr = model.transformer
    T = ids.shape[0]
    x = tr.wte.weight.double()[ids] + tr.wpe.weight.double()[:T]
    blocks = []
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for blk in tr.h:
        H, d = blk.attn.num_heads, blk.attn.head_dim
        D = x.shape[-1]
        h, _ = _layer_norm(x, blk.ln_1)
        qkv = h @ blk.attn.c_attn.weight.double() + blk.attn.c_attn.bias.double()     # Conv1D: [in, out]
        q, k, v = (t.view(T, H, d).transpose(0, 1) for t in qkv.split(D, -1))
        A = _softmax_rows(q @ k.transpose(-1, -2) / math.sqrt(d), causal)
        W_o = blk.attn.c_proj.weight.double().view(H, d, D)
        b_o = blk.attn.c_proj.bias.double()
        pv = _projected_values(v, W_o)
        y = x + _attention_output(A, pv, b_o)
        h2, _ = _layer_norm(y, blk.ln_2)
        mlp = blk.mlp
        m = mlp.act(h2 @ mlp.c_fc.weight.double() + mlp.c_fc.bias.double()) @ mlp.c_proj.weight.double() \
            + mlp.c_proj.bias.double()
        blocks.append(dict(x=x, A=A, pv=pv, b_o=b_o, y=y, m=m, norm=None))
        x = y + m
    head = model.score if hasattr(model, "score") else model.lm_head
    return blocks, (x, tr.ln_f, head.weight.double(), None if head.bias is None else head.bias.double())


def _rotate_half(t):
    t1, t2 = t.chunk(2, dim=-1)
    return torch.cat((-t2, t1), dim=-1)


@torch.no_grad()
def llama_blocks(model, ids):
    """Blocks of a LLaMA LM / classifier (RMSNorm, RoPE from the model's rotary tables, grouped-query attention,
    gated SiLU MLP, optional biases) and ``(x^L, final RMSNorm, head rows, None)``."""
    base = model.model
    cfg = model.config
    T = ids.shape[0]
    x = base.embed_tokens.weight.double()[ids]
    cos, sin = base.rotary_emb(x[None], torch.arange(T)[None])
    cos, sin = cos[0].double(), sin[0].double()
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def linear(module, t):
        out = t @ module.weight.double().T
        return out if module.bias is None else out + module.bias.double()

    blocks = []
    for layer in base.layers:
        at = layer.self_attn
        d = at.head_dim
        D = x.shape[-1]
        h, _ = _rms_norm(x, layer.input_layernorm)
        q = linear(at.q_proj, h).view(T, H, d).transpose(0, 1)
        k = linear(at.k_proj, h).view(T, Hkv, d).transpose(0, 1)
        v = linear(at.v_proj, h).view(T, Hkv, d).transpose(0, 1)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        group = H // Hkv
        k = torch.stack([k[hh // group] for hh in range(H)])        # query head hh reads key/value head hh // group
        v = torch.stack([v[hh // group] for hh in range(H)])
        A = _softmax_rows(q @ k.transpose(-1, -2) * at.scaling, causal)
        W_o = at.o_proj.weight.double().T.reshape(H, d, D)
        b_o = torch.zeros(D, dtype=torch.float64) if at.o_proj.bias is None else at.o_proj.bias.double()
        pv = _projected_values(v, W_o)
        y = x + _attention_output(A, pv, b_o)
        h2, _ = _rms_norm(y, layer.post_attention_layernorm)
        mlp = layer.mlp
        m = linear(mlp.down_proj, F.silu(linear(mlp.gate_proj, h2)) * linear(mlp.up_proj, h2))
        blocks.append(dict(x=x, A=A, pv=pv, b_o=b_o, y=y, m=m, norm=None))
        x = y + m
    head = model.score if hasattr(model, "score") else model.lm_head
    return blocks, (x, base.norm, head.weight.double(), None)


@torch.no_grad()
def bert_blocks(model, ids):
    """Blocks of a BERT encoder (token type 0, no padding) and its output ``[T, D]``: post-norm, so each block
    keeps its first LayerNorm's gain, bias and normaliser ``s_i`` in ``norm``."""
    bert = model.bert
    emb = bert.embeddings
    T = ids.shape[0]
    x, _ = _layer_norm(emb.word_embeddings.weight.double()[ids] + emb.position_embeddings.weight.double()[:T]
                       + emb.token_type_embeddings.weight.double()[0], emb.LayerNorm)
    everything = torch.ones(T, T, dtype=torch.bool)
    blocks = []
    for layer in bert.encoder.layer:
        sa, out = layer.attention.self, layer.attention.output
        H, d = sa.num_attention_heads, sa.attention_head_size
        D = x.shape[-1]
        q, k, v = (F.linear(x, lin.weight.double(), lin.bias.double()).view(T, H, d).transpose(0, 1)
                   for lin in (sa.query, sa.key, sa.value))
        A = _softmax_rows(q @ k.transpose(-1, -2) / math.sqrt(d), everything)
        W_o = out.dense.weight.double().T.reshape(H, d, D)
        b_o = out.dense.bias.double()
        pv = _projected_values(v, W_o)
        y, s = _layer_norm(x + _attention_output(A, pv, b_o), out.LayerNorm)
        norm = dict(gain=out.LayerNorm.weight.double(), bias=out.LayerNorm.bias.double(), s=s[:, 0])
        m_in = F.gelu(F.linear(y, layer.intermediate.dense.weight.double(), layer.intermediate.dense.bias.double()))
        x_next, _ = _layer_norm(y + F.linear(m_in, layer.output.dense.weight.double(),
                                             layer.output.dense.bias.double()), layer.output.LayerNorm)
        blocks.append(dict(x=x, A=A, pv=pv, b_o=b_o, y=y, m=None, norm=norm))
        x = x_next
    return blocks, x


def transformed(block, i, j):
    """``X_ij``: the part of the sum block forms at ``i`` that comes from ``j`` (residual included, post-norm's
    linear part applied)."""
    H = block["A"].shape[0]
    X = sum(block["A"][h, i, j] * block["pv"][h, j] for h in range(H))
    if i == j:
        X = X + block["x"][i]
    norm = block["norm"]
    if norm is not None:
        X = norm["gain"] * (X - X.mean()) / norm["s"][i]
    return X


@torch.no_grad()
def alti_matrix(block):
    """The normalised ALTI matrix ``[T, T]`` of one block, entry by entry."""
    T = block["x"].shape[0]
    C = torch.zeros(T, T, dtype=torch.float64)
    for i in range(T):
        y = block["y"][i]
        for j in range(T):
            C[i, j] = max(0.0, float(y.abs().sum() - (y - transformed(block, i, j)).abs().sum()))
        C[i] = C[i] / C[i].sum()
    return C


def alti_rollout(blocks):
    """``C^L ... C^1`` multiplied block by block."""
    M = torch.eye(blocks[0]["x"].shape[0], dtype=torch.float64)
    for block in blocks:
        M = alti_matrix(block) @ M
    return M


@torch.no_grad()
def alti_logit(blocks, top, row, target, foil=None):
    """ALTI-Logit of the logit ``target`` (minus ``foil``) at position ``row``: ``{"scores": [T], "mlp": [L],
    "attention_bias": [L], "embedding", "output_bias", "explained"}`` and the logit difference of this explicit
    forward, ``"forward"``. ``scores[row]`` holds the direct term ``embedding = g . x^0_row`` (Ferrando et al.'s
    ``contribs_input_tok[-1] += init_logits_diff``), so scores, MLP, attention biases and output bias sum to
    ``explained``."""
    x_last, final_norm, head, head_bias = top
    u = head[target] - (head[foil] if foil is not None else 0)
    b = 0.0 if head_bias is None else head_bias[target] - (head_bias[foil] if foil is not None else 0)
    z = x_last[row]
    if hasattr(final_norm, "variance_epsilon"):                      # RMSNorm: g = gamma * u / s, no bias
        s = torch.sqrt((z ** 2).mean() + final_norm.variance_epsilon)
        g = final_norm.weight.double() * u / s
        normed, c = z / s * final_norm.weight.double(), b
    else:                                                             # LayerNorm: centring, then gamma / s
        s = torch.sqrt(((z - z.mean()) ** 2).mean() + final_norm.eps)
        gu = final_norm.weight.double() * u
        g = (gu - gu.mean()) / s
        normed = (z - z.mean()) / s * final_norm.weight.double() + final_norm.bias.double()
        c = float(final_norm.bias.double() @ u) + b
    T = x_last.shape[0]
    scores = torch.zeros(T, dtype=torch.float64)
    M = torch.eye(T, dtype=torch.float64)
    mlp, bias = [], []
    for block in blocks:
        H = block["A"].shape[0]
        delta = torch.tensor([float(g @ sum(block["A"][h, row, j] * block["pv"][h, j] for h in range(H)))
                              for j in range(T)], dtype=torch.float64)
        scores = scores + delta @ M
        M = alti_matrix(block) @ M
        mlp.append(float(g @ block["m"][row]))
        bias.append(float(g @ block["b_o"]))
    embedding = float(g @ blocks[0]["x"][row])
    scores[row] += embedding                     # the explained token's own input vector, straight to the head
    return {"scores": scores, "mlp": torch.tensor(mlp, dtype=torch.float64),
            "attention_bias": torch.tensor(bias, dtype=torch.float64),
            "embedding": embedding, "output_bias": float(c),
            "explained": float(g @ z) + float(c), "forward": float(normed @ u) + float(b)}
