"""Contrastive explanations (``explain(..., foil=)``; docs/engine.md "Contrastive explanations").

With a foil the explained value is ``logit[target] - logit[foil]`` and the backward is seeded with +1 / -1 on the two
logits. Every LRP rule is a modified gradient, linear in its seed, so under the language models' starting relevance
("the output's own value") the contrastive relevance is exactly the target's minus the foil's; the gradient
attributors (IG, SmoothGrad with the same noise, Grad-CAM without ReLU) and AtMan are linear in the explained value
too. Checked in float64 on a tiny LLaMA (RoPE), GPT-2 (learned PE) and BERT masked LM (learned PE, token types),
against the two single-target explanations; the accounting identity holds for the difference; gradient rollout
takes the gradient of the difference (its positive part is no difference of two explanations); attention rollout
does not change; ViTs ("unit" starting relevance) scale the difference by ``1 / d``; bad foils are one-line
errors."""
import pytest
import torch

from models.families import make_text, padded_batch
from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids
from palrp_bench import explain
from palrp_bench.attributors.attention_maps import layer_attention
from palrp_bench.attributors.base import make_call
from palrp_bench.attributors.rollout import rollout
from palrp_bench.errors import BadInputError
from palrp_bench.lrp import rules
from palrp_bench.lrp.attribution import attribute
from palrp_bench.lrp.composites import get_composite
from palrp_bench.methods.registry import METHODS, get_method
from palrp_bench.models.registry import twin_for

D = torch.float64
MODELS = ["llama", "gpt2", "bert"]
TOKEN_LRP = [m.name for m in METHODS.values() if m.is_lrp and "tokens" in m.modalities]
ATTRIBUTORS = sorted({m.name for m in METHODS.values() if not m.is_lrp and "tokens" in m.modalities})
SMALL = {"integrated_gradients": {"n_steps": 6}, "smoothgrad": {"n_samples": 4}}
#: attributors whose scores are no linear function of the explained value: attention rollout reads none, gradient
#: rollout takes a positive part, the gradient norms a norm (tests/attributors/test_gradient_norms.py checks that
#: they take the norm of the gradient of the difference)
NONLINEAR = ("attn_rollout", "grad_attn_rollout", "gradient_l1", "gradient_l2", "alti")
#: attributors that ignore targets and foils (the explained row only)
TARGET_FREE = ("attn_rollout", "alti")
#: (method, model) pairs refused in one line (tests/attributors/test_alti.py)
REFUSED = {("alti_logit", "bert")}


def tiny(name: str):
    """``(model, ids, mask, options)``: a float64 tiny model of ``name`` and a right-padded batch of two."""
    if name == "llama":
        ids = random_ids(2, 7, seed=4)
        mask = torch.ones_like(ids)
        mask[1, 5:] = 0
        return make_llama("gqa", "causal", dtype=D), ids, mask, {}
    ids, mask, _ = padded_batch([7, 5], "right", seed=3)
    if name == "gpt2":
        return make_text("gpt2", "causal", D), ids, mask, {}
    return make_text("bert", "masked_lm", D), ids, mask, {"position": torch.tensor([2, 3])}


def target_and_foil(model, ids, mask, options):
    """The predicted token and the third most likely one of each sample (a real contrast, never equal)."""
    rel = explain(model, ids, mask, method="grad_x_input", **options)
    twin = twin_for(model)
    with torch.no_grad():
        out = twin.run(twin.prepare(ids, mask), get_composite("grad_x_input"), positional_sinks=False, **options)
    third = out.logits.topk(3, dim=-1).indices[:, 2]
    return rel.target, third


def close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-9) -> bool:
    """Equal to float64 rounding, relative to the largest magnitude of ``b``."""
    scale = max(float(b.abs().max()), 1e-30)
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=rtol * scale, rtol=0))


def _explain_three(model, ids, mask, method, target, foil, **kw):
    contrast = explain(model, ids, mask, method=method, target=target, foil=foil, **kw)
    of_target = explain(model, ids, mask, method=method, target=target, **kw)
    of_foil = explain(model, ids, mask, method=method, target=foil, **kw)
    return contrast, of_target, of_foil


# ------------------------------------------------------------------------------------------------------ LRP
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", TOKEN_LRP)
def test_lrp_contrast_is_the_difference_of_the_two_single_target_explanations(name, method):
    model, ids, mask, options = tiny(name)
    twin = twin_for(model)
    m = get_method(method)
    if not m.positional_abs and not twin.positional.multi_sink:
        pytest.skip(f"{method} is refused on a single positional sink")
    target, foil = target_and_foil(model, ids, mask, options)
    contrast, t, f = _explain_three(model, ids, mask, method, target, foil, **options)
    assert torch.equal(contrast.target, target) and torch.equal(contrast.extras["foil"], foil)
    assert "foil" not in t.extras
    assert close(contrast.logit, t.logit - f.logit)
    assert bool((contrast.logit > 0).all())  # the prediction against a less likely token
    assert close(contrast.semantic, t.semantic - f.semantic)
    assert close(contrast.positional, t.positional - f.positional)
    assert contrast.semantic.abs().max() > 1e-6
    if m.use_semantic and not m.use_positional:  # raw scores (no normalisation): linear too
        assert close(contrast.scores, t.scores - f.scores)
    if "token_type" in contrast.extras:  # BERT's third sink
        assert close(contrast.extras["token_type"], t.extras["token_type"] - f.extras["token_type"])


def test_the_accounting_identity_holds_for_the_difference_on_llama():
    """AttnLRP with positional sinks, float64: sum(semantic) + sum(positional) + absorbed = logit[t] - logit[f]
    (tests/lrp/test_accounting.py for one logit)."""
    model, ids, mask, _ = tiny("llama")
    target, foil = target_and_foil(model, ids, mask, {})
    twin = twin_for(model)
    rec = rules.AttentionRecorder()
    inputs = twin.prepare(ids, mask)

    def run():
        return twin.forward(twin.embed(inputs.input_ids), inputs.attention_mask, inputs.last_index,
                            get_composite("attnlrp"), positional_sinks=True, attention="eager", recorder=rec)

    a = attribute(run, target, starting_relevance="logit", foil=foil)
    semantic = a.relevance["embeds"].flatten(1).sum(1)
    positional = sum(r.flatten(1).sum(1) for name in ("cos", "sin") for r in a.relevance[name])
    absorbed = rec.absorbed()
    assert absorbed.abs().min() > 1e-4 and positional.abs().min() > 1e-6
    assert torch.allclose(semantic + positional + absorbed, a.logit, atol=1e-9, rtol=0)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
@pytest.mark.parametrize("start", ["logit", "unit"])
def test_cp_lrp_with_zero_biases_conserves_the_difference(name, start):
    """CP-LRP without biases conserves exactly: token + position (+ token type) relevance = the explained value,
    ``d`` under the "logit" starting relevance and 1 under "unit"."""
    model, ids, mask, options = tiny(name)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias"):
                p.zero_()
    target, foil = target_and_foil(model, ids, mask, options)
    twin = twin_for(model)
    inputs = twin.prepare(ids, mask)
    a = attribute(lambda: twin.run(inputs, get_composite("cp_lrp"), positional_sinks=True, **options), target,
                  starting_relevance=start, foil=foil)
    total = sum(r.flatten(1).sum(1) for r in a.relevance.values())
    expected = a.logit if start == "logit" else torch.ones_like(a.logit)
    assert len(a.relevance) == (3 if name == "bert" else 2)
    assert torch.allclose(total, expected, atol=1e-9 * float(expected.abs().max()), rtol=0)


# ----------------------------------------------------------------------------------------------- attributors
@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", [m for m in ATTRIBUTORS if m not in NONLINEAR])
def test_attributor_contrast_is_the_difference_of_the_two_single_target_explanations(name, method):
    if (method, name) in REFUSED:
        pytest.skip(f"{method} refuses {name} in one line (tested in tests/attributors/test_alti.py)")
    model, ids, mask, options = tiny(name)
    target, foil = target_and_foil(model, ids, mask, options)
    params = SMALL.get(method, {})
    if method == "smoothgrad" and name != "llama":
        # every path from a GPT-2 / BERT embedding starts with a LayerNorm, whose input gradient sums to 0 over the
        # dimensions: the summed gradient is 0 up to rounding, so the scores would say nothing; times input is not
        params = {**params, "times_input": True}
    contrast, t, f = _explain_three(model, ids, mask, method, target, foil, params=params, **options)
    assert torch.equal(contrast.extras["foil"], foil) and "foil" not in t.extras
    assert close(contrast.logit, t.logit - f.logit)
    assert contrast.scores.abs().max() > 1e-8
    assert close(contrast.scores, t.scores - f.scores, rtol=1e-8), (contrast.scores, t.scores - f.scores)


@pytest.mark.parametrize("score", ["cross_entropy", "logit"])
def test_atman_measures_the_change_of_the_difference_under_both_scores(score):
    """With a foil the log-softmax normaliser cancels: both scores give the same relevance."""
    model, ids, mask, _ = tiny("gpt2")
    target, foil = target_and_foil(model, ids, mask, {})
    contrast, t, f = _explain_three(model, ids, mask, "atman", target, foil, params={"score": score})
    assert close(contrast.scores, t.scores - f.scores)
    other = explain(model, ids, mask, method="atman", target=target, foil=foil,
                    params={"score": "logit" if score == "cross_entropy" else "cross_entropy"})
    assert close(contrast.scores, other.scores, rtol=1e-9)


@pytest.mark.parametrize("name", MODELS)
def test_gradient_rollout_takes_the_gradient_of_the_difference(name):
    model, ids, mask, options = tiny(name)
    target, foil = target_and_foil(model, ids, mask, options)
    twin = twin_for(model)
    method = get_method("grad_attn_rollout")
    params = method.resolved_params()

    def call(t, f=None):
        return make_call(twin, twin.prepare(ids, mask), method, params, t, dict(options), None, f)

    both, of_t, of_f = (layer_attention(c, with_grad=True) for c in (call(target, foil), call(target), call(foil)))
    for lc, lt, lf in zip(both, of_t, of_f):
        assert close(lc.grad, lt.grad - lf.grad)
        assert torch.equal(lc.weights, lt.weights)
    maps = [((lt.grad - lf.grad).double() * lt.weights.double()).clamp(min=0).mean(1) for lt, lf in zip(of_t, of_f)]
    r = rollout(maps, [la.valid for la in of_t], 1.0)
    rows = call(target).explained_index
    expected = r[torch.arange(2), rows] * mask
    got = explain(model, ids, mask, method="grad_attn_rollout", target=target, foil=foil, **options)
    assert close(got.scores, expected)
    plain = explain(model, ids, mask, method="grad_attn_rollout", target=target, **options)
    assert not torch.allclose(got.scores, plain.scores)  # the foil reaches the gradient


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", TARGET_FREE)
def test_target_free_attributors_ignore_the_foil(name, method):
    model, ids, mask, options = tiny(name)
    target, foil = target_and_foil(model, ids, mask, options)
    plain = explain(model, ids, mask, method=method, target=target, **options)
    contrast = explain(model, ids, mask, method=method, target=target, foil=foil, **options)
    assert torch.equal(plain.scores, contrast.scores)
    assert close(contrast.logit, plain.logit - explain(model, ids, mask, method=method, target=foil,
                                                       **options).logit)


# ------------------------------------------------------------------------------------------------------ vision
VISION_LRP = [m.name for m in METHODS.values() if m.is_lrp and "pixels" in m.modalities and m.positional_abs]


@pytest.mark.parametrize("method", VISION_LRP)
def test_vit_contrast_under_the_unit_starting_relevance(method):
    """The ViT's starting relevance is 1 for the explained value: the contrastive relevance is the difference of
    the two single-target relevances, each scaled back to "logit" (times its own logit), divided by ``d``."""
    model = make_vit("plain", dtype=D)
    x = images(2)
    with torch.no_grad():
        order = model(x).argsort(-1, descending=True)
    target, foil = order[:, 0], order[:, 3]
    contrast, t, f = _explain_three(model, x, None, method, target, foil)
    d = contrast.logit
    assert close(d, t.logit - f.logit) and torch.equal(contrast.extras["foil"], foil)
    for part in ("semantic", "positional"):
        a, b, c = getattr(contrast, part), getattr(t, part), getattr(f, part)
        shape = (-1,) + (1,) * (a.dim() - 1)
        assert close(a * d.view(shape), b * t.logit.view(shape) - c * f.logit.view(shape)), part
    signed = contrast.extras["scores_signed"]
    assert torch.equal(contrast.scores, signed.clamp(min=0))


def test_vit_attributor_contrast_is_the_difference():
    model = make_vit("plain", dtype=D)
    x = images(2)
    with torch.no_grad():
        order = model(x).argsort(-1, descending=True)
    target, foil = order[:, 0], order[:, 2]
    contrast, t, f = _explain_three(model, x, None, "integrated_gradients", target, foil, params={"n_steps": 5})
    assert close(contrast.extras["scores_signed"], t.extras["scores_signed"] - f.extras["scores_signed"])
    assert close(contrast.logit, t.logit - f.logit)


# -------------------------------------------------------------------------------------------------- bad foils
@pytest.mark.parametrize("method", ["attnlrp", "integrated_gradients", "attn_rollout"])
def test_bad_foils_are_one_line_errors(method):
    model, ids, mask, _ = tiny("gpt2")
    target, foil = target_and_foil(model, ids, mask, {})
    vocab = model.config.vocab_size
    params = SMALL.get(method)
    cases = [(vocab, "foil id out of range for 96 outputs"), (-1, "out of range"),
             (torch.tensor([1, 2, 3]), r"foil must be an int or a \[2\] tensor"),
             (target, r"the foil equals the explained target for sample\(s\) 0, 1"),
             (torch.stack([foil[0], target[1]]), r"sample\(s\) 1 --"),
             (torch.tensor([1.0, 2.0]), "integer class/token ids")]
    for bad, message in cases:
        with pytest.raises(BadInputError, match=message) as info:
            explain(model, ids, mask, method=method, target=target, foil=bad, params=params)
        assert "\n" not in str(info.value)
    with pytest.raises(BadInputError, match="the foil equals the explained target"):  # the arg-max as target
        explain(model, ids, mask, method=method, foil=target, params=params)


def test_an_int_foil_and_a_cpu_foil_for_every_sample():
    model, ids, mask, _ = tiny("gpt2")
    target, foil = target_and_foil(model, ids, mask, {})
    one = int(foil[0])
    if bool((target == one).any()):
        one = next(i for i in range(4, 96) if not bool((target == i).any()))
    a = explain(model, ids, mask, method="attnlrp", target=target, foil=one)
    b = explain(model, ids, mask, method="attnlrp", target=target, foil=torch.full((2,), one))
    assert torch.equal(a.scores, b.scores) and a.extras["foil"].tolist() == [one, one]
