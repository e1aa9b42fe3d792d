"""Slow, textbook AttnLRP (and PA-LRP) relevance of a ONE-layer decoder of any RoPE family: explicit relevance
tensors layer by layer, no autograd, float64, one unpadded causal sequence.

It reads the weights of the Hugging Face modules (module names and family options from the family's
:class:`~palrp_bench.models.decoder.DecoderSpec`, which are data) and the cos/sin tables of the model's own rotary
module, and propagates relevance with the rules of the AttnLRP paper as written in tests/reference/explicit_lrp.py:
epsilon rule (eps -> 0) for every linear map (projections, heads, norms with a constant normaliser, LayerNorm's
centring, residual sums, the sum ``x*cos + rot(x)*sin``), identity rule for elementwise nonlinearities (SiLU, GELU,
soft-capping), uniform rule for products (gate * up; ``x*cos`` and ``rot(x)*sin`` with cos/sin as sinks, paper
Eq. 10), the uniform-epsilon rule for both attention matmuls and the softmax rule. None of the twin's code is used.

``stab`` (a :class:`~palrp_bench.lrp.stabilizers.Stabilizers`, data only) puts the stabiliser ``eps`` of each place
into the denominators ``z + eps`` of those rules (default: all 0, the exact rules).
"""
import torch

from palrp_bench.lrp.stabilizers import NONE
from palrp_bench.models.decoder import DecoderSpec, layer_windows, spec_for
from reference import explicit_lrp as ref


def _eps_share(parts, total, R_total, eps=0.0):
    """Epsilon rule on a sum ``total = sum(parts)``: part ``p`` receives ``p / (total + eps) * R_total``."""
    return [p / (total + eps) * R_total for p in parts]


class _Norm:
    """A norm with its normaliser constant: a linear map per token (epsilon rule through :func:`ref.linear_epsilon`)."""

    def __init__(self, module, spec: DecoderSpec, x):
        self.x = x
        n = x.shape[-1]
        if spec.norm == "layer":
            var = (x - x.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True)
            self.inv = 1.0 / torch.sqrt(var + module.eps)
            centring = torch.eye(n, dtype=x.dtype) - 1.0 / n
            self.maps = [module.weight.double()[:, None] * centring * self.inv[t] for t in range(x.shape[0])]
            self.bias = module.bias.double()
        else:
            eps = getattr(module, "variance_epsilon", None)
            eps = module.eps if eps is None else eps
            self.inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            gain = spec.norm_offset + module.weight.double()
            self.maps = [torch.diag(gain * self.inv[t]) for t in range(x.shape[0])]
            self.bias = None
        self.y = torch.stack([x[t] @ m.T for t, m in enumerate(self.maps)])
        if self.bias is not None:
            self.y = self.y + self.bias

    def relevance(self, R_y, eps=0.0):
        return torch.stack([ref.linear_epsilon(self.x[t:t + 1], m, self.bias, R_y[t:t + 1], eps)[0]
                            for t, m in enumerate(self.maps)])


def _norm_rows(module, spec, x):
    """A norm over the last dim of ``x`` ``[..., T, d]`` (q/k norms: per head)."""
    flat = x.reshape(-1, x.shape[-1])
    return _Norm(module, spec, flat)


def _linear(module, x, rows=None):
    W = module.weight.double()
    b = None if module.bias is None else module.bias.double()
    if rows is not None:
        W, b = W[rows], (None if b is None else b[rows])
    return W, b, x @ W.T + (0 if b is None else b)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rope(x, cos, sin):
    """Forward of the (partial) rotation of ``x`` ``[H, T, d]`` with tables ``[T, r]``; returns what relevance needs."""
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    p1, p2 = x_rot * cos, _rotate_half(x_rot) * sin
    return torch.cat((p1 + p2, x_pass), -1), (p1, p2, r)


def _rope_relevance(saved, R_out, sinks, eps=0.0):
    """Epsilon on ``p1 + p2``, uniform rule on each product (cos/sin get half when they are sinks, else nothing),
    the signed permutation ``rotate_half`` passes relevance back to the element it moved."""
    p1, p2, r = saved
    R_p1, R_p2 = _eps_share([p1, p2], p1 + p2, R_out[..., :r], eps)
    share = 0.5 if sinks else 1.0
    R_x_cos, R_rot = share * R_p1, share * R_p2
    half = r // 2
    R_x = R_x_cos + torch.cat((R_rot[..., half:], R_rot[..., :half]), -1)
    R_cos = (R_p1 - R_x_cos).sum(0)  # summed over heads: [T, r]
    R_sin = (R_p2 - R_rot).sum(0)
    return torch.cat((R_x, R_out[..., r:]), -1), R_cos, R_sin


@torch.no_grad()
def explicit_relevance(model, ids, *, sinks: bool, target=None, stab=NONE):
    """AttnLRP relevance of a one-layer model for one sequence ``ids`` ``[T]``: ``{"embeds": [T, D], "cos": [T, r],
    "sin": [T, r], "logit": float, "target": int}`` (cos/sin relevance summed over heads and the q and k sides;
    zero when ``sinks`` is False, i.e. cos/sin are constants as in AttnLRP). ``stab``: module docstring."""
    spec = spec_for(model)
    config = model.config.get_text_config()
    base = model
    for part in spec.backbone.split("."):
        base = getattr(base, part)
    (layer,) = base.layers
    attn = getattr(layer, spec.attention)
    hd = getattr(attn, spec.head_dim_attr)
    n_heads, n_kv = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
    T = ids.shape[0]
    x0 = getattr(base, spec.embed_tokens)(ids[None])[0].double()
    positions = torch.arange(T)[None]
    kind = config.layer_types[0] if spec.rope_tables == "per_layer_type" else None
    cos, sin = (getattr(base, spec.rotary)(x0[None], positions) if kind is None
                else getattr(base, spec.rotary)(x0[None], positions, kind))
    cos, sin = cos[0].double(), sin[0].double()

    # ---------------------------------------------------------------------------------------------- forward
    n_attn = _Norm(getattr(layer, spec.attention_norm), spec, x0)
    h = n_attn.y
    if spec.fused_qkv is None:
        projections = [(getattr(attn, name), None) for name in (spec.q_proj, spec.k_proj, spec.v_proj)]
    else:
        fused = getattr(attn, spec.fused_qkv)
        if spec.qkv_layout == "per_head":
            rows = torch.arange(3 * n_heads * hd).view(n_heads, 3, hd)
            projections = [(fused, rows[:, i].reshape(-1)) for i in range(3)]
        else:
            bounds = [0, n_heads * hd, (n_heads + n_kv) * hd, (n_heads + 2 * n_kv) * hd]
            projections = [(fused, torch.arange(bounds[i], bounds[i + 1])) for i in range(3)]
    lin_qkv = [_linear(module, h, rows) for module, rows in projections]
    q, k, v = (y.view(T, -1, hd).transpose(0, 1) for _, _, y in lin_qkv)
    norms_qk = None
    if spec.qk_norm is not None:
        norms_qk = [_norm_rows(getattr(attn, name), spec, y) for name, y in zip(spec.qk_norm, (q, k))]
        q, k = (nm.y.view(y.shape) for nm, y in zip(norms_qk, (q, k)))
    q_rot, q_saved = _rope(q, cos, sin)
    k_rot, k_saved = _rope(k, cos, sin)
    rep = n_heads // k.shape[0]
    k_rep, v_rep = k_rot.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    (window,) = layer_windows(spec, config, 1)
    i = torch.arange(T)
    valid = (i[None, :] <= i[:, None]) & ((i[:, None] - i[None, :] < window) if window else True)
    cap = getattr(config, spec.attention_softcap, None) if spec.attention_softcap else None
    S = (q_rot @ k_rep.transpose(-1, -2)) * attn.scaling
    if cap is not None:
        S = torch.tanh(S / cap) * cap
    A = torch.softmax(S.masked_fill(~valid, float("-inf")), -1)
    o = (A @ v_rep).transpose(0, 1).reshape(T, -1)
    W_o, b_o, a = _linear(getattr(attn, spec.o_proj), o)
    n_attn_out = None
    if spec.attention_out_norm is not None:
        n_attn_out = _Norm(getattr(layer, spec.attention_out_norm), spec, a)
        a = n_attn_out.y
    parallel = bool(getattr(config, spec.parallel_residual)) if spec.parallel_residual else False
    x1 = x0 + a
    mlp_input = x0 if parallel else x1
    n_mlp = _Norm(getattr(layer, spec.mlp_norm), spec, mlp_input)
    mlp = getattr(layer, spec.mlp_block)
    act = getattr(mlp, spec.activation)
    hm = n_mlp.y
    if spec.mlp == "plain":
        W_u, b_u, u = _linear(getattr(mlp, spec.up_proj), hm)
        f = act(u)
        W_d, b_d, m = _linear(getattr(mlp, spec.down_proj), f)
    else:
        if spec.fused_gate_up is not None:
            fused = getattr(mlp, spec.fused_gate_up)
            width = fused.weight.shape[0] // 2
            (W_g, b_g, g), (W_u, b_u, u) = (_linear(fused, hm, torch.arange(width)),
                                            _linear(fused, hm, torch.arange(width, 2 * width)))
        else:
            W_g, b_g, g = _linear(getattr(mlp, spec.gate_proj), hm)
            W_u, b_u, u = _linear(getattr(mlp, spec.up_proj), hm)
        f = act(g)
        W_d, b_d, m = _linear(getattr(mlp, spec.down_proj), f * u)
    n_mlp_out = None
    if spec.mlp_out_norm is not None:
        n_mlp_out = _Norm(getattr(layer, spec.mlp_out_norm), spec, m)
        m = n_mlp_out.y
    x2 = m + a + x0 if parallel else x1 + m
    n_final = _Norm(getattr(base, spec.final_norm), spec, x2[-1:])
    is_classifier = type(model).__name__.endswith("ForSequenceClassification")
    head = getattr(model, spec.classifier_head if is_classifier else spec.lm_head)
    W_h, b_h, z = _linear(head, n_final.y)
    final_cap = (getattr(config, spec.final_softcap, None)
                 if spec.final_softcap and type(model).__name__.endswith("ForCausalLM") else None)
    logits = torch.tanh(z / final_cap) * final_cap if final_cap is not None else z
    target = int(logits[0].argmax()) if target is None else target

    # -------------------------------------------------------------------------------------------- relevance
    R_z = logits[:, target:target + 1]  # starting relevance: the logit itself; identity rule through the cap
    row = slice(target, target + 1)  # the other logits carry no relevance (and a tied pad row may be exactly 0)
    R_x2 = torch.zeros_like(x2)
    R_n = ref.linear_epsilon(n_final.y, W_h[row], None if b_h is None else b_h[row], R_z, stab.linear)
    R_x2[-1:] = n_final.relevance(R_n, stab.final_norm)
    if parallel:
        R_m, R_a, R_x0 = _eps_share([m, a, x0], x2, R_x2, stab.add)
    else:
        R_x1, R_m = _eps_share([x1, m], x2, R_x2, stab.add)
    if n_mlp_out is not None:
        R_m = n_mlp_out.relevance(R_m, stab.norm)
    if spec.mlp == "plain":
        R_f = ref.linear_epsilon(f, W_d, b_d, R_m, stab.linear)
        R_hm = ref.linear_epsilon(hm, W_u, b_u, R_f, stab.linear)  # identity rule on the activation
    else:
        R_fu = ref.linear_epsilon(f * u, W_d, b_d, R_m, stab.linear)
        R_f, R_u = ref.product_uniform(f, u, R_fu)
        R_hm = ref.linear_epsilon(hm, W_g, b_g, R_f, stab.linear) + ref.linear_epsilon(hm, W_u, b_u, R_u, stab.linear)
    R_mlp_input = n_mlp.relevance(R_hm, stab.norm)
    if parallel:
        R_x0 = R_x0 + R_mlp_input
    else:
        R_x1 = R_x1 + R_mlp_input
        R_x0, R_a = _eps_share([x0, a], x1, R_x1, stab.add)
    if n_attn_out is not None:
        R_a = n_attn_out.relevance(R_a, stab.norm)
    R_o = ref.linear_epsilon(o, W_o, b_o, R_a, stab.linear).view(T, n_heads, hd).transpose(0, 1)
    R_q_rot, R_k_rep, R_v_rep, _ = ref.attention_attnlrp(q_rot, k_rep, v_rep, attn.scaling, R_o, valid, cap=cap,
                                                         qk_eps=stab.qk, mask_eps=stab.add, av_eps=stab.av)
    R_k_rot = R_k_rep.view(-1, rep, T, hd).sum(1)  # a shared k/v head collects from the query heads using it
    R_v = R_v_rep.view(-1, rep, T, hd).sum(1)
    R_q, R_cos_q, R_sin_q = _rope_relevance(q_saved, R_q_rot, sinks, stab.add)
    R_k, R_cos_k, R_sin_k = _rope_relevance(k_saved, R_k_rot, sinks, stab.add)
    if norms_qk is not None:
        R_q, R_k = (nm.relevance(R.reshape(-1, hd), stab.norm).view(R.shape) for nm, R in zip(norms_qk, (R_q, R_k)))
    R_h = sum(ref.linear_epsilon(h, W, b, R.transpose(0, 1).reshape(T, -1), stab.linear)
              for (W, b, _), R in zip(lin_qkv, (R_q, R_k, R_v)))
    R_x0 = R_x0 + n_attn.relevance(R_h, stab.norm)
    return {"embeds": R_x0, "cos": R_cos_q + R_cos_k, "sin": R_sin_q + R_sin_k, "logit": float(logits[0, target]),
            "target": target}

