"""The fast twin (Gradient x Input form, one forward and one backward) agrees with the slow textbook reference
(tests/reference/explicit_decoder.py: explicit relevance tensors, AttnLRP's equations) on one-layer models of every
RoPE family, for AttnLRP (cos/sin constant) and for the PA-LRP pass (cos/sin sinks, paper Eq. 10), in float64.

Tolerance 1e-9 relative to the largest |relevance| (the reference divides by every pre-activation, the fast path
never does; measured <= 2.4e-14).

The same comparison with large epsilon-rule stabilisers at every place (``stabilizers``, palrp_bench/lrp/stabilizers.py;
a distinct eps per field) pins where the twin puts each of them, for every family.
"""
import pytest
import torch

from palrp_bench.lrp.composites import ATTNLRP, ATTNLRP_CONSTANT_ROUTER
from palrp_bench.lrp.stabilizers import NONE, Stabilizers
from palrp_bench.models.decoder import DecoderTwin
from models.tiny_families import FAMILIES, MOE_FAMILIES, make_model, random_ids, variants
from reference.explicit_decoder import explicit_relevance

#: one-layer versions of the default variants that keep the family's features on layer 0
ONE_LAYER = {"qwen2": dict(max_window_layers=0), "qwen3": dict(max_window_layers=0),
             "gemma3": dict(layer_types=["sliding_attention"]), "deepseek_v3": dict(first_k_dense_replace=0)}
TOL = 1e-9


#: a distinct eps per field, large enough to move every relevance by far more than TOL (values of order 1)
LARGE = Stabilizers("large", linear=0.011, add=0.023, qk=0.031, av=0.017, norm=0.043, final_norm=0.057)


def fast_relevance(model, ids, sinks, stabilizers=NONE, composite=ATTNLRP):
    twin = DecoderTwin(model)
    embeds = twin.embed(ids[None])
    out = twin.forward(embeds, None, twin.last_index(ids[None], None), composite, positional_sinks=sinks,
                       attention="eager", stabilizers=stabilizers)
    logit = out.logits[0].max()
    leaves = [embeds, *out.cos, *out.sin]
    grads = torch.autograd.grad(logit, leaves)
    r = [(x.detach() * g)[0] for x, g in zip(leaves, grads)]
    return {"embeds": r[0], "cos": r[1] if sinks else None, "sin": r[2] if sinks else None,
            "logit": float(logit.detach()), "target": int(out.logits[0].argmax())}


def rel_diff(ours, theirs):
    return float((ours - theirs).abs().max() / theirs.abs().max())


@pytest.mark.parametrize("sinks", [False, True])
@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_twin_matches_the_explicit_reference(family, kind, sinks):
    model = make_model(family, kind, dtype=torch.float64, num_hidden_layers=1, **ONE_LAYER.get(family, {}))
    ids = random_ids(1, 9)[0]
    fast = fast_relevance(model, ids, sinks)
    slow = explicit_relevance(model, ids, sinks=sinks)
    assert fast["target"] == slow["target"] and abs(fast["logit"] - slow["logit"]) < 1e-10
    assert rel_diff(fast["embeds"], slow["embeds"]) < TOL
    if sinks:
        assert slow["cos"].abs().max() > 1e-6
        assert rel_diff(fast["cos"], slow["cos"]) < TOL
        assert rel_diff(fast["sin"], slow["sin"]) < TOL
    else:
        assert slow["cos"].abs().max() == 0


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_stabilisers_sit_at_the_reference_places(family, kind):
    """Every stabiliser of :class:`Stabilizers` in the denominator of its rule, at the same places for every
    family (linears incl. fused ones and the head, residual and RoPE sums, Q K^T, the masked scores, A V, the norms
    inside the layer incl. q/k and sandwich norms, the final norm); a missing or misplaced one moves the relevance
    by ~eps / z, far beyond TOL."""
    model = make_model(family, kind, dtype=torch.float64, num_hidden_layers=1, **ONE_LAYER.get(family, {}))
    ids = random_ids(1, 9)[0]
    fast = fast_relevance(model, ids, True, LARGE)
    slow = explicit_relevance(model, ids, sinks=True, stab=LARGE)
    exact = explicit_relevance(model, ids, sinks=True)
    assert rel_diff(slow["embeds"], exact["embeds"]) > 1e4 * TOL, "the stabilisers must make a difference"
    for part in ("embeds", "cos", "sin"):
        assert rel_diff(fast[part], slow[part]) < TOL, part


@pytest.mark.parametrize("family,variant", [(f, v) for f in MOE_FAMILIES for v in variants(f)[1:]])
def test_other_moe_variants_match_the_explicit_reference(family, variant):
    """The variants beyond the default (DeepSeek-V3: ``q_proj`` instead of the low-rank queries, the half rotary
    layout, YaRN's attention scale, unnormalised gates, two shared experts)."""
    model = make_model(family, "causal", variant, dtype=torch.float64, num_hidden_layers=1,
                       **ONE_LAYER.get(family, {}))
    ids = random_ids(1, 9)[0]
    fast, slow = fast_relevance(model, ids, True), explicit_relevance(model, ids, sinks=True)
    for part in ("embeds", "cos", "sin"):
        assert rel_diff(fast[part], slow[part]) < TOL, part


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_constant_router_gates_match_the_explicit_reference(family):
    """``attnlrp_constant_router``: the gates are constants, the experts carry all of the block's relevance; the
    reference with the gate rule switched differs by far more than the tolerance, so the router's share matters."""
    model = make_model(family, "causal", dtype=torch.float64, num_hidden_layers=1, **ONE_LAYER.get(family, {}))
    ids = random_ids(1, 9)[0]
    fast = fast_relevance(model, ids, True, composite=ATTNLRP_CONSTANT_ROUTER)
    slow = explicit_relevance(model, ids, sinks=True, router_rule="constant")
    for part in ("embeds", "cos", "sin"):
        assert rel_diff(fast[part], slow[part]) < TOL, part
    gradient = explicit_relevance(model, ids, sinks=True)
    assert rel_diff(slow["embeds"], gradient["embeds"]) > 1e-3
