"""palrp_bench.captum: every method as a Captum attribution gives exactly ``explain``'s scores, shaped as Captum's
attributions (token ids -> one score per token; pixels -> the map shared by the channels), and Captum's own
visualisation and metrics take them (docs/captum.md)."""
import re

import pytest
import torch
from captum.attr import Attribution

from palrp_bench import explain
from palrp_bench.captum import CPLRP, PALRP, AttnLRP, GradXInput, LRPAttribution, PALRPNoMultiSink, PEOnly
from palrp_bench.errors import BadInputError
from palrp_bench.methods.registry import METHODS
from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids

TEXT_METHODS = sorted(m for m, spec in METHODS.items() if "tokens" in spec.modalities)
PIXEL_METHODS = sorted(m for m, spec in METHODS.items() if "pixels" in spec.modalities)
#: cheaper settings of the multi-pass baselines (the scores must still be explain's with the same settings)
FAST = {"integrated_gradients": {"n_steps": 8}, "smoothgrad": {"n_samples": 4}}


@pytest.fixture(scope="module")
def lm():
    return make_llama("gqa", "causal")


@pytest.fixture(scope="module")
def vit():
    return make_vit("plain", dtype=torch.float32)


@pytest.mark.parametrize("method", TEXT_METHODS)
def test_token_scores_are_explains(lm, method):
    ids = random_ids(2, 7, seed=3)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding reaches explain through additional_forward_args
    kwargs = {"params": FAST[method]} if method in FAST else {}
    attr = LRPAttribution(lm, method=method, **kwargs)
    assert isinstance(attr, Attribution) and attr.multiplies_by_inputs and not attr.has_convergence_delta()
    got = attr.attribute(ids, target=torch.tensor([5, 9]), additional_forward_args=(mask,))
    expected = explain(lm, ids, attention_mask=mask, method=method, target=torch.tensor([5, 9]), **kwargs)
    assert got.shape == ids.shape and got.dtype.is_floating_point
    torch.testing.assert_close(got, expected.scores, rtol=0, atol=0)
    assert attr.last_explanation.method == method
    assert torch.equal(attr.last_explanation.target, torch.tensor([5, 9]))


@pytest.mark.parametrize("method", PIXEL_METHODS)
def test_pixel_maps_are_explains_shared_by_the_channels(vit, method):
    x = images(2, dtype=torch.float32)
    kwargs = {"params": FAST[method]} if method in FAST else {}
    attr = LRPAttribution(vit, method=method, **kwargs)
    try:
        expected = explain(vit, x, method=method, target=torch.tensor([1, 3]), **kwargs).scores
    except BadInputError as refused:  # e.g. the multi-sink ablation on a single learned PE: the same refusal
        with pytest.raises(BadInputError, match=re.escape(refused.problem)):
            attr.attribute(x, target=[1, 3])
        return
    (got,) = attr.attribute((x,), target=[1, 3])  # a tuple stays a tuple
    assert got.shape == x.shape
    torch.testing.assert_close(got, (expected / 3).unsqueeze(1).expand_as(x), rtol=0, atol=0)
    torch.testing.assert_close(got.sum(1), expected)


def test_named_classes_fix_their_method(lm):
    ids = random_ids(1, 6)
    for cls, name in ((PALRP, "pa_lrp"), (PALRPNoMultiSink, "pa_lrp_no_multisink"), (PEOnly, "pe_only"),
                      (AttnLRP, "attnlrp"), (CPLRP, "cp_lrp"), (GradXInput, "grad_x_input")):
        torch.testing.assert_close(cls(lm).attribute(ids), explain(lm, ids, method=name).scores, rtol=0, atol=0)
    # options given at construction reach explain; per-call options override them
    eq11 = PALRP(lm, aggregation="eq11")
    torch.testing.assert_close(eq11.attribute(ids), explain(lm, ids, aggregation="eq11").scores, rtol=0, atol=0)
    torch.testing.assert_close(eq11.attribute(ids, aggregation="official"), explain(lm, ids).scores, rtol=0, atol=0)


def test_t5_takes_decoder_inputs_through_additional_forward_args():
    from models.tiny_t5 import make_t5, random_ids as t5_ids

    t5 = make_t5(dtype=torch.float32)
    ids, start = t5_ids(t5, 1, 6), torch.zeros(1, 1, dtype=torch.long)
    got = PALRP(t5).attribute(ids, additional_forward_args=(None, start))  # forward(input_ids, attention_mask, ...)
    torch.testing.assert_close(got, explain(t5, ids, decoder_input_ids=start).scores, rtol=0, atol=0)


def test_bad_calls_fail_with_one_line(lm, vit):
    ids = random_ids(1, 5)
    for call, match in ((lambda: LRPAttribution(lm), "needs a method"),
                        (lambda: LRPAttribution(lm, method="lime"), "unknown method"),
                        (lambda: PALRP(lm).attribute((ids, ids)), "2 input tensors"),
                        (lambda: PALRP(lm).attribute(ids, additional_forward_args=(None, None, ids)),
                         "does not take"),
                        (lambda: PALRP(lm).attribute(ids, target=[(0, 1)]), "tuple targets"),
                        (lambda: PALRP(vit).attribute(images(1, dtype=torch.float32), additional_forward_args=(ids,)),
                         "sets 'attn_mask'")):
        with pytest.raises(BadInputError, match=match) as info:
            call()
        assert "\n" not in str(info.value)


def test_captum_infidelity_reads_the_channel_split_as_the_map(vit):
    """``captum.metrics.infidelity`` with a perturbation equal over the channels: ``(sum(attr * I) - (f(x) -
    f(x - I)))^2`` where ``sum(attr * I)`` is ``c * sum(map)``, computed here by hand."""
    from captum.metrics import infidelity

    x = images(2, dtype=torch.float32)
    target = torch.tensor([1, 3])
    attr = PALRP(vit).attribute(x, target=target)
    c = 0.1

    def perturb(inputs):
        noise = torch.full_like(inputs, c)
        return noise, inputs - noise

    def forward(inputs):
        return vit(inputs)

    got = infidelity(forward, perturb, x, attr, target=target, n_perturb_samples=1, normalize=False)
    with torch.no_grad():
        drop = vit(x).gather(1, target[:, None])[:, 0] - vit(x - c).gather(1, target[:, None])[:, 0]
    maps = explain(vit, x, target=target).scores
    expected = (c * maps.flatten(1).sum(1) - drop) ** 2
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


def test_captum_text_visualisation_colours_one_mark_per_token(lm):
    """What Captum's ``visualization.visualize_text`` renders per record (``format_word_importances``; the function
    itself needs IPython, i.e. a notebook)."""
    from captum.attr import visualization

    ids = random_ids(1, 6)
    scores = PALRP(lm).attribute(ids)[0]
    words = [f"w{i}" for i in range(6)]
    html = visualization.format_word_importances(words, scores / scores.abs().max())
    assert html.count("<mark") == 6 and all(w in html for w in words)


def test_the_documented_example_runs(monkeypatch):
    """docs/captum.md's visualize_text example on the shipped tiny classifier (visualize_text itself needs IPython:
    the records it would draw are checked instead)."""
    import re
    from pathlib import Path

    from captum.attr import visualization

    drawn = []
    monkeypatch.setattr(visualization, "visualize_text", lambda records, legend=True: drawn.append(records))
    text = (Path(__file__).resolve().parents[2] / "docs" / "captum.md").read_text()
    exec(re.findall(r"```python\n(.*?)```", text, re.S)[0], {})
    (records,) = drawn
    assert [r.attr_class for r in records] == ["PALRP", "AttnLRP"]
    for r in records:
        assert len(r.word_attributions) == len(r.raw_input_ids) and float(r.word_attributions.abs().max()) == 1.0
