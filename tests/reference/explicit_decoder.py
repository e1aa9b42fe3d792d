"""Slow, textbook AttnLRP (and PA-LRP) relevance of a ONE-layer decoder of any RoPE family: explicit relevance
tensors layer by layer, no autograd, float64, one unpadded causal sequence.

It reads the weights of the Hugging Face modules (module names and family options from the family's
:class:`~palrp_bench.models.decoder.DecoderSpec`, which are data) and the cos/sin tables of the model's own rotary
module, and propagates relevance with the rules of the AttnLRP paper as written in tests/reference/explicit_lrp.py:
epsilon rule (eps -> 0) for every linear map (projections, heads, norms with a constant normaliser, LayerNorm's
centring, residual sums, the sum ``x*cos + rot(x)*sin``), identity rule for elementwise nonlinearities (SiLU, GELU,
soft-capping), uniform rule for products (gate * up; ``x*cos`` and ``rot(x)*sin`` with cos/sin as sinks, paper
Eq. 10), the uniform-epsilon rule for both attention matmuls and the softmax rule. None of the twin's code is used.

Mixture-of-experts blocks (:class:`_Moe`, token by token and expert by expert): the router's choice recomputed here
from the scores, each chosen expert a dense gated MLP, the epsilon rule on the sum of the gated contributions, the
uniform rule on each product ``gate * expert(x)`` (half to the gate; all to the expert when the gates are
constants), and the router's routing function under the softmax rule written out: Prop. 3.1 on the softmax of the
chosen logits (renormalised gates) or on the full softmax read at the chosen entries, ``R_j - w_j sum_i R_i`` for a
renormalisation of sigmoid scores, and ``z (1 - sigmoid(z)) R`` for a sigmoid (the softmax of ``(z, 0)``). Latent
attention (:class:`_LatentQKV`): the projections, norms and splits of DeepSeek-V3, the rotation of the decoupled
rotary parts (interleaved pairs permuted to the half layout), the shared rotated key collecting every head's
relevance.

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


class _Dense:
    """A dense MLP of the spec's kind on ``hm`` ``[T, D]``: ``.y`` and ``.relevance(R_y, stab)`` -> ``R_hm``."""

    def __init__(self, mlp, spec: DecoderSpec, hm):
        self.spec, self.hm = spec, hm
        act = getattr(mlp, spec.activation)
        if spec.mlp == "plain":
            self.W_u, self.b_u, u = _linear(getattr(mlp, spec.up_proj), hm)
            self.f = act(u)
            self.W_d, self.b_d, self.y = _linear(getattr(mlp, spec.down_proj), self.f)
            return
        if spec.fused_gate_up is not None:
            fused = getattr(mlp, spec.fused_gate_up)
            width = fused.weight.shape[0] // 2
            (self.W_g, self.b_g, g), (self.W_u, self.b_u, self.u) = (
                _linear(fused, hm, torch.arange(width)), _linear(fused, hm, torch.arange(width, 2 * width)))
        else:
            self.W_g, self.b_g, g = _linear(getattr(mlp, spec.gate_proj), hm)
            self.W_u, self.b_u, self.u = _linear(getattr(mlp, spec.up_proj), hm)
        self.f = act(g)
        self.W_d, self.b_d, self.y = _linear(getattr(mlp, spec.down_proj), self.f * self.u)

    def relevance(self, R_y, stab):
        if self.spec.mlp == "plain":
            R_f = ref.linear_epsilon(self.f, self.W_d, self.b_d, R_y, stab.linear)
            return ref.linear_epsilon(self.hm, self.W_u, self.b_u, R_f, stab.linear)  # identity rule on the activation
        R_fu = ref.linear_epsilon(self.f * self.u, self.W_d, self.b_d, R_y, stab.linear)
        R_f, R_u = ref.product_uniform(self.f, self.u, R_fu)
        return (ref.linear_epsilon(self.hm, self.W_g, self.b_g, R_f, stab.linear)
                + ref.linear_epsilon(self.hm, self.W_u, self.b_u, R_u, stab.linear))


def _softmax_rule_chosen(z, chosen, R_w, renormalised):
    """Relevance of the router logits ``z`` ``[E]`` from that of the gates ``R_w`` ``[k]`` at ``chosen``: Prop. 3.1
    on the softmax of the chosen logits (renormalised gates) or on the full softmax read at the chosen entries."""
    if renormalised:
        R_z = torch.zeros_like(z)
        R_z[chosen] = ref.softmax_rule(z[chosen], R_w)
        return R_z
    R_out = torch.zeros_like(z)
    R_out[chosen] = R_w
    return ref.softmax_rule(z, R_out)


def _sigmoid_rule(z, R_s):
    """Gradient x Input of ``s = sigmoid(z)`` (the softmax rule on the softmax of ``(z, 0)``): ``z (1 - s) R_s``."""
    return z * (1 - torch.sigmoid(z)) * R_s


class _Moe:
    """A sparse mixture-of-experts block (:class:`~palrp_bench.models.moe.MoeSpec`, data) on ``hm`` ``[T, D]``:
    ``.y`` and ``.relevance(R_y, stab, router_rule)`` -> ``R_hm`` (module docstring)."""

    def __init__(self, block, spec: DecoderSpec, config, hm):
        moe = self.moe = spec.moe
        self.hm, self.config = hm, config
        router = getattr(block, moe.router)
        self.W_r = router.weight.double()
        self.z = hm @ self.W_r.T                                                     # [T, E]
        scores = torch.softmax(self.z, -1) if moe.scoring == "softmax" else torch.sigmoid(self.z)
        choice = scores.clone()
        if moe.selection_bias is not None:
            choice = choice + getattr(router, moe.selection_bias).double()
        n_experts, k = scores.shape[-1], int(getattr(config, moe.top_k))
        if moe.selection == "group_limited":
            size = n_experts // config.n_group
            group = torch.stack([choice[:, g * size:(g + 1) * size].topk(2, -1).values.sum(-1)
                                 for g in range(config.n_group)], -1)
            best = group.topk(config.topk_group, -1).indices
            allowed = torch.zeros_like(choice, dtype=torch.bool)
            for t in range(choice.shape[0]):
                for g in best[t].tolist():
                    allowed[t, g * size:(g + 1) * size] = True
            choice = choice.masked_fill(~allowed, float("-inf"))
        self.chosen = choice.topk(k, -1).indices                                      # [T, k]
        picked = scores.gather(-1, self.chosen)
        self.renormalised = moe.normalize is not None and (moe.normalize == "always"
                                                           or bool(getattr(config, moe.normalize)))
        self.w = picked / (picked.sum(-1, keepdim=True) + moe.normalize_eps) if self.renormalised else picked
        scale = float(getattr(config, moe.scaling)) if moe.scaling is not None else 1.0
        self.gates = self.w * scale                                                   # [T, k]
        experts = getattr(block, moe.experts)
        self.act = experts.act_fn
        self.W_gu, self.W_down = experts.gate_up_proj.double(), experts.down_proj.double()
        width = self.W_gu.shape[1] // 2
        self.parts = []                                                               # [T, D] per slot
        self.saved = []
        for slot in range(k):
            c, saved = [], []
            for t in range(hm.shape[0]):
                e = int(self.chosen[t, slot])
                W_g, W_u, W_d = self.W_gu[e, :width], self.W_gu[e, width:], self.W_down[e]
                f, u = self.act(hm[t] @ W_g.T), hm[t] @ W_u.T
                y = (f * u) @ W_d.T
                c.append(self.gates[t, slot] * y)
                saved.append((W_g, W_u, W_d, f, u))
            self.parts.append(torch.stack(c))
            self.saved.append(saved)
        self.shared = self.shared_gate = None
        if moe.shared_expert is not None:
            self.shared = _Dense(getattr(block, moe.shared_expert), spec, hm)
            part = self.shared.y
            if moe.shared_expert_gate is not None:
                W_sg, _, self.z_shared = _linear(getattr(block, moe.shared_expert_gate), hm)     # [T, 1]
                self.W_sg = W_sg
                part = torch.sigmoid(self.z_shared) * part
            self.parts.append(part)
        self.y = sum(self.parts[1:], self.parts[0])

    def relevance(self, R_y, stab, router_rule="gradient"):
        gate_share = 0.0 if router_rule == "constant" else 0.5
        R_parts = _eps_share(self.parts, self.y, R_y, stab.add)
        k = self.chosen.shape[1]
        R_hm = torch.zeros_like(self.hm)
        R_gates = torch.zeros_like(self.gates)
        for slot in range(k):
            for t in range(self.hm.shape[0]):
                W_g, W_u, W_d, f, u = self.saved[slot][t]
                R_c = R_parts[slot][t:t + 1]
                R_gates[t, slot] = gate_share * R_c.sum()                       # uniform rule on gate * y
                R_expert = (1 - gate_share) * R_c
                R_fu = ref.linear_epsilon((f * u)[None], W_d, None, R_expert, stab.linear)
                R_f, R_u = ref.product_uniform(f, u, R_fu)
                R_hm[t] += (ref.linear_epsilon(self.hm[t:t + 1], W_g, None, R_f, stab.linear)
                            + ref.linear_epsilon(self.hm[t:t + 1], W_u, None, R_u, stab.linear))[0]
        if self.shared is not None:
            R_shared = R_parts[k]
            if self.moe.shared_expert_gate is not None:
                R_gate = gate_share * R_shared.sum(-1, keepdim=True)             # [T, 1]
                R_shared = (1 - gate_share) * R_shared
                R_z = _sigmoid_rule(self.z_shared, R_gate)
                R_hm += ref.linear_epsilon(self.hm, self.W_sg, None, R_z, stab.linear)
            R_hm += self.shared.relevance(R_shared, stab)
        # the router: the scaling is a constant factor, then the routing function under the softmax rule
        R_z = torch.zeros_like(self.z)
        for t in range(self.hm.shape[0]):
            chosen, R_w = self.chosen[t], R_gates[t]
            if self.moe.scoring == "softmax":
                R_z[t] = _softmax_rule_chosen(self.z[t], chosen, R_w, self.renormalised)
            else:
                R_s = R_w - self.w[t] * R_w.sum() if self.renormalised else R_w
                R_z[t, chosen] = _sigmoid_rule(self.z[t, chosen], R_s)
        return R_hm + ref.linear_epsilon(self.hm, self.W_r, None, R_z, stab.linear)


class _StandardQKV:
    """Queries, keys (rotated, GQA-expanded) and values of the standard attention: ``.q``, ``.k``, ``.v``
    ``[H, T, d]``; ``.relevance(R_q, R_k, R_v, sinks, stab)`` -> ``(R_h, R_cos, R_sin)``."""

    def __init__(self, attn, spec: DecoderSpec, config, h, cos, sin):
        T = h.shape[0]
        hd = getattr(attn, spec.head_dim_attr)
        n_heads, n_kv = config.num_attention_heads, getattr(config, "num_key_value_heads", config.num_attention_heads)
        self.spec, self.h, self.T, self.hd = spec, h, T, hd
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
        self.lin_qkv = [_linear(module, h, rows) for module, rows in projections]
        q, k, v = (y for _, _, y in self.lin_qkv)
        self.norms_proj = self.norms_qk = None
        if spec.qk_norm is not None and spec.qk_norm_scope == "projection":   # OLMoE: over all heads at once
            self.norms_proj = [_Norm(getattr(attn, name), spec, y) for name, y in zip(spec.qk_norm, (q, k))]
            q, k = (nm.y for nm in self.norms_proj)
        q, k, v = (y.view(T, -1, hd).transpose(0, 1) for y in (q, k, v))
        if spec.qk_norm is not None and spec.qk_norm_scope == "head":
            self.norms_qk = [_norm_rows(getattr(attn, name), spec, y) for name, y in zip(spec.qk_norm, (q, k))]
            q, k = (nm.y.view(y.shape) for nm, y in zip(self.norms_qk, (q, k)))
        self.q, self.q_saved = _rope(q, cos, sin)
        k_rot, self.k_saved = _rope(k, cos, sin)
        self.rep = n_heads // k.shape[0]
        self.k, self.v = k_rot.repeat_interleave(self.rep, 0), v.repeat_interleave(self.rep, 0)

    def relevance(self, R_q_rot, R_k_rep, R_v_rep, sinks, stab):
        T, hd = self.T, self.hd
        R_k_rot = R_k_rep.view(-1, self.rep, T, hd).sum(1)  # a shared k/v head collects from the query heads using it
        R_v = R_v_rep.view(-1, self.rep, T, hd).sum(1)
        R_q, R_cos_q, R_sin_q = _rope_relevance(self.q_saved, R_q_rot, sinks, stab.add)
        R_k, R_cos_k, R_sin_k = _rope_relevance(self.k_saved, R_k_rot, sinks, stab.add)
        if self.norms_qk is not None:
            R_q, R_k = (nm.relevance(R.reshape(-1, hd), stab.norm).view(R.shape)
                        for nm, R in zip(self.norms_qk, (R_q, R_k)))
        R_q, R_k, R_v = (R.transpose(0, 1).reshape(T, -1) for R in (R_q, R_k, R_v))
        if self.norms_proj is not None:
            R_q, R_k = (nm.relevance(R, stab.norm) for nm, R in zip(self.norms_proj, (R_q, R_k)))
        R_h = sum(ref.linear_epsilon(self.h, W, b, R, stab.linear) for (W, b, _), R in zip(self.lin_qkv, (R_q, R_k, R_v)))
        return R_h, R_cos_q + R_cos_k, R_sin_q + R_sin_k


class _LatentQKV:
    """Multi-head latent attention's queries, keys and values (DeepSeek-V3), same protocol as :class:`_StandardQKV`."""

    def __init__(self, attn, spec: DecoderSpec, config, h, cos, sin):
        T = h.shape[0]
        self.spec, self.h, self.T = spec, h, T
        self.nope, self.rope = config.qk_nope_head_dim, config.qk_rope_head_dim
        self.vd, latent = config.v_head_dim, config.kv_lora_rank
        r = self.rope
        self.perm = (torch.cat((torch.arange(0, r, 2), torch.arange(1, r, 2))) if config.rope_interleave
                     else torch.arange(r))
        if attn.q_proj is not None:
            self.q_lin, self.q_norm = _linear(attn.q_proj, h), None
            q = self.q_lin[2]
        else:
            self.qa_lin = _linear(attn.q_a_proj, h)
            self.q_norm = _Norm(attn.q_a_layernorm, spec, self.qa_lin[2])
            self.q_lin = _linear(attn.q_b_proj, self.q_norm.y)
            q = self.q_lin[2]
        q = q.view(T, -1, self.nope + r).transpose(0, 1)
        self.heads = q.shape[0]
        q_nope, q_pe = q[..., :self.nope], q[..., self.nope:][..., self.perm]
        self.kva_lin = _linear(attn.kv_a_proj_with_mqa, h)
        c, k_pe = self.kva_lin[2][:, :latent], self.kva_lin[2][:, latent:][:, self.perm]
        self.kv_norm = _Norm(attn.kv_a_layernorm, spec, c)
        self.kvb_lin = _linear(attn.kv_b_proj, self.kv_norm.y)
        kv = self.kvb_lin[2].view(T, -1, self.nope + self.vd).transpose(0, 1)
        k_nope, self.v = kv[..., :self.nope], kv[..., self.nope:]
        q_rot, self.q_saved = _rope(q_pe, cos, sin)
        k_rot, self.k_saved = _rope(k_pe[None], cos, sin)
        self.q = torch.cat((q_nope, q_rot), -1)
        self.k = torch.cat((k_nope, k_rot.expand(self.heads, -1, -1)), -1)

    def relevance(self, R_q, R_k, R_v, sinks, stab):
        T, nope = self.T, self.nope
        R_q_pe, R_cos_q, R_sin_q = _rope_relevance(self.q_saved, R_q[..., nope:], sinks, stab.add)
        R_k_pe, R_cos_k, R_sin_k = _rope_relevance(self.k_saved, R_k[..., nope:].sum(0, keepdim=True), sinks,
                                                    stab.add)   # the shared key collects every head's relevance
        unperm = torch.empty_like(R_q_pe)
        unperm[..., self.perm] = R_q_pe
        R_q = torch.cat((R_q[..., :nope], unperm), -1).transpose(0, 1).reshape(T, -1)
        R_k_pe_orig = torch.empty_like(R_k_pe[0])
        R_k_pe_orig[:, self.perm] = R_k_pe[0]
        R_kv = torch.cat((R_k[..., :nope], R_v), -1).transpose(0, 1).reshape(T, -1)
        W, b, _ = self.kvb_lin
        R_c = self.kv_norm.relevance(ref.linear_epsilon(self.kv_norm.y, W, b, R_kv, stab.linear), stab.norm)
        W, b, _ = self.kva_lin
        R_h = ref.linear_epsilon(self.h, W, b, torch.cat((R_c, R_k_pe_orig), -1), stab.linear)
        W, b, _ = self.q_lin
        if self.q_norm is None:
            R_h = R_h + ref.linear_epsilon(self.h, W, b, R_q, stab.linear)
        else:
            R_qa = self.q_norm.relevance(ref.linear_epsilon(self.q_norm.y, W, b, R_q, stab.linear), stab.norm)
            W, b, _ = self.qa_lin
            R_h = R_h + ref.linear_epsilon(self.h, W, b, R_qa, stab.linear)
        return R_h, R_cos_q + R_cos_k, R_sin_q + R_sin_k


@torch.no_grad()
def explicit_relevance(model, ids, *, sinks: bool, target=None, stab=NONE, router_rule="gradient"):
    """AttnLRP relevance of a one-layer model for one sequence ``ids`` ``[T]``: ``{"embeds": [T, D], "cos": [T, r],
    "sin": [T, r], "logit": float, "target": int}`` (cos/sin relevance summed over heads and the q and k sides;
    zero when ``sinks`` is False, i.e. cos/sin are constants as in AttnLRP). ``stab``: module docstring;
    ``router_rule``: ``gradient`` (AttnLRP's softmax rule on the routing function) or ``constant`` gates."""
    spec = spec_for(model)
    config = model.config.get_text_config()
    base = model
    for part in spec.backbone.split("."):
        base = getattr(base, part)
    (layer,) = base.layers
    attn = getattr(layer, spec.attention)
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
    qkv = (_LatentQKV if spec.attention_kind == "latent" else _StandardQKV)(attn, spec, config, h, cos, sin)
    q_rot, k_rep, v_rep = qkv.q, qkv.k, qkv.v
    (window,) = layer_windows(spec, config, 1)
    i = torch.arange(T)
    valid = (i[None, :] <= i[:, None]) & ((i[:, None] - i[None, :] < window) if window else True)
    cap = getattr(config, spec.attention_softcap, None) if spec.attention_softcap else None
    S = (q_rot @ k_rep.transpose(-1, -2)) * attn.scaling
    if cap is not None:
        S = torch.tanh(S / cap) * cap
    A = torch.softmax(S.masked_fill(~valid, float("-inf")), -1)
    heads = A.shape[0]
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
    block = getattr(layer, spec.mlp_block)
    if spec.moe is not None and spec.moe.is_sparse(block):
        mlp = _Moe(block, spec, config, n_mlp.y)
    else:
        mlp = _Dense(block, spec, n_mlp.y)
    m = mlp.y
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
    R_hm = mlp.relevance(R_m, stab, router_rule) if isinstance(mlp, _Moe) else mlp.relevance(R_m, stab)
    R_mlp_input = n_mlp.relevance(R_hm, stab.norm)
    if parallel:
        R_x0 = R_x0 + R_mlp_input
    else:
        R_x1 = R_x1 + R_mlp_input
        R_x0, R_a = _eps_share([x0, a], x1, R_x1, stab.add)
    if n_attn_out is not None:
        R_a = n_attn_out.relevance(R_a, stab.norm)
    R_o = ref.linear_epsilon(o, W_o, b_o, R_a, stab.linear).view(T, heads, -1).transpose(0, 1)
    R_q_rot, R_k_rep, R_v_rep, _ = ref.attention_attnlrp(q_rot, k_rep, v_rep, attn.scaling, R_o, valid, cap=cap,
                                                         qk_eps=stab.qk, mask_eps=stab.add, av_eps=stab.av)
    R_h, R_cos, R_sin = qkv.relevance(R_q_rot, R_k_rep, R_v_rep, sinks, stab)
    R_x0 = R_x0 + n_attn.relevance(R_h, stab.norm)
    return {"embeds": R_x0, "cos": R_cos, "sin": R_sin, "logit": float(logits[0, target]), "target": target}
