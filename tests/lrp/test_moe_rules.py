"""The mixture-of-experts rules (palrp_bench/lrp/rules.py ``router_gates``, palrp_bench/models/moe.py) against their
written-out forms (docs/engine.md, "Mixture of experts"):

* the renormalised top-k gates of a softmax router are the softmax of the chosen logits, so the plain gradient of the
  routing function is AttnLRP's softmax rule (Prop. 3.1) on those logits; without renormalisation, on the full
  softmax read at the chosen entries; a renormalisation of sigmoid scores distributes ``R_j - w_j sum R``;
* at ``gate * expert(x)`` the uniform rule gives half of the relevance to the expert branch and half to the gates
  (AttnLRP); with constant gates the block conserves: everything reaches ``x``;
* the router absorbs what enters its gates minus what leaves its logits, and the recorder books exactly that.
"""
import pytest
import torch

from palrp_bench.lrp import rules
from palrp_bench.lrp.composites import ATTNLRP, ATTNLRP_CONSTANT_ROUTER, CP_LRP
from palrp_bench.lrp.stabilizers import NONE
from palrp_bench.models.moe import routed_experts
from reference import explicit_lrp as ref
from lrp.test_rules import grad_x_input

D = torch.float64


def _routing(z, chosen, renormalise):
    gates = torch.softmax(z, -1).gather(-1, chosen)
    return gates / gates.sum(-1, keepdim=True) if renormalise else gates


@pytest.mark.parametrize("renormalise", [True, False])
def test_softmax_router_gates_follow_the_softmax_rule(renormalise):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, 5, generator=g, dtype=D) * 2
    chosen = torch.topk(z, 2, -1).indices
    R_w = torch.randn(6, 2, generator=g, dtype=D)
    (R_z,), _ = grad_x_input(lambda z: rules.router_gates(_routing(z, chosen, renormalise), z, "gradient"), [z], R_w)
    for t in range(6):
        if renormalise:   # the softmax of the chosen logits alone
            expected = torch.zeros(5, dtype=D)
            expected[chosen[t]] = ref.softmax_rule(z[t, chosen[t]], R_w[t])
        else:             # the full softmax, read at the chosen entries
            R_out = torch.zeros(5, dtype=D)
            R_out[chosen[t]] = R_w[t]
            expected = ref.softmax_rule(z[t], R_out)
        assert torch.allclose(R_z[t], expected, atol=1e-12)
    if renormalise:  # the unchosen logits receive nothing, and the renormalisation is the restricted softmax
        assert torch.allclose(_routing(z, chosen, True), torch.softmax(z.gather(-1, chosen), -1), atol=1e-15)


def test_renormalised_sigmoid_scores_distribute_as_a_normalisation():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(4, 3, generator=g, dtype=D)
    R_w = torch.randn(4, 3, generator=g, dtype=D)

    def gates(z):
        s = torch.sigmoid(z)
        return rules.router_gates(2.5 * s / s.sum(-1, keepdim=True), z, "gradient")

    (R_z,), _ = grad_x_input(gates, [z], R_w)
    s = torch.sigmoid(z)
    w = s / s.sum(-1, keepdim=True)
    expected = z * (1 - s) * (R_w - w * R_w.sum(-1, keepdim=True))   # scaling: a constant factor
    assert torch.allclose(R_z, expected, atol=1e-12)


def test_constant_gates_stop_relevance_and_the_recorder_books_the_router():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(1, 4, 5, generator=g, dtype=D, requires_grad=True)
    chosen = torch.topk(z.detach(), 2, -1).indices
    for rule, absorbs in (("gradient", True), ("constant", False)):
        rec = rules.AttentionRecorder()
        gates = rules.router_gates(_routing(z, chosen, True), z, rule, recorder=rec)
        assert gates.requires_grad == absorbs and len(rec.routers) == 1
        if absorbs:
            (gates * torch.randn(gates.shape, generator=g, dtype=D)).sum().backward()
            r_in = float((gates * gates.grad).detach().sum())
            r_out = float((z * z.grad).detach().sum())
            assert abs(float(rec.absorbed()[0].detach()) - (r_in - r_out)) < 1e-12 and abs(r_in - r_out) > 1e-3
            z.grad = None
        else:
            assert float(rec.absorbed()[0].detach()) == 0.0
    with pytest.raises(ValueError, match="router rule"):
        rules.router_gates(z, z, "uniform")


class _Experts(torch.nn.Module):
    """Fused experts as transformers 5 stores them (``gate_up_proj [E, 2I, D]``, ``down_proj [E, D, I]``)."""

    def __init__(self, n_experts=4, hidden=6, width=5, seed=3):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.gate_up_proj = torch.nn.Parameter(torch.randn(n_experts, 2 * width, hidden, generator=g, dtype=D))
        self.down_proj = torch.nn.Parameter(torch.randn(n_experts, hidden, width, generator=g, dtype=D))
        self.act_fn = torch.nn.SiLU()


@pytest.mark.parametrize("composite,expert_share", [(ATTNLRP, 0.5), (ATTNLRP_CONSTANT_ROUTER, 1.0), (CP_LRP, 1.0)])
def test_the_gate_product_splits_relevance_uniformly(composite, expert_share):
    """Sum of ``gate * expert(x)``: the experts' gated MLPs conserve (identity rule, uniform gate * up, no biases),
    so ``x`` receives exactly the expert branch's share of the output relevance and the gates the rest."""
    g = torch.Generator().manual_seed(4)
    experts = _Experts().requires_grad_(False)
    x = torch.randn(7, 6, generator=g, dtype=D, requires_grad=True)
    chosen = torch.stack([torch.randperm(4, generator=g)[:2] for _ in range(7)])
    raw = torch.rand(7, 2, generator=g, dtype=D, requires_grad=True)
    gates = rules.router_gates(raw, raw, composite.router)
    out = routed_experts(experts, x, gates, chosen, composite, NONE)
    seed = torch.randn(out.shape, generator=g, dtype=D)
    out.backward(seed)
    total = float((out * seed).detach().sum())
    assert abs(float((x * x.grad).detach().sum()) - expert_share * total) < 1e-10 * abs(total)
    r_gates = 0.0 if raw.grad is None else float((raw * raw.grad).detach().sum())
    assert abs(r_gates - (1 - expert_share) * total) < 1e-10 * abs(total)
    # the batched experts equal the per-token sum
    with torch.no_grad():
        width = experts.gate_up_proj.shape[1] // 2
        for t in range(7):
            expected = 0
            for slot, e in enumerate(chosen[t].tolist()):
                h = experts.gate_up_proj[e] @ x[t]
                expected = expected + raw[t, slot] * (experts.down_proj[e] @ (experts.act_fn(h[:width]) * h[width:]))
            assert torch.allclose(out[t], expected, atol=1e-12)
