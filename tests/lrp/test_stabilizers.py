"""The stabilizers switch (palrp_bench/lrp/stabilizers.py): which set a choice resolves to, per protocol and family
(the default follows the family: official only where the official code ran it, LLaMA and DeiT).

Where each stabiliser applies is tested against slow references (tests/lrp/test_rules.py, tests/lrp/test_gamma.py,
tests/lrp/test_decoder_family_reference.py, tests/models/test_vit_twin.py); the official values against the
official code's outputs in tests/methods/test_official_agreement.py and tests/models/test_deit_official.py; the
default of a family the official code never ran against lxt in tests/methods/test_lxt_rope_families_agreement.py."""
import dataclasses

import pytest
import torch

from palrp_bench import explain
from palrp_bench.api import stabilizers_used
from palrp_bench.data.synthetic_vision import load_tiny_vit
from palrp_bench.errors import BadInputError
from palrp_bench.lrp import rules
from palrp_bench.lrp.stabilizers import NONE, OFFICIAL_NLP, OFFICIAL_VISION, Stabilizers, resolve_stabilizers
from palrp_bench.models.decoder import DECODER_SPECS, DecoderTwin, spec_for
from palrp_bench.models.registry import discover
from palrp_bench.models.vit import VitTwin
from palrp_bench.models.torchvision_vit import timm_from_torchvision
from palrp_bench.models.vit_rope import RopeVitTwin
from models.test_torchvision_vit import tiny_torchvision_vit
from models.test_vit_twin import make_vit
from models.tiny_families import FAMILIES, make_model, random_ids


@pytest.mark.parametrize("official", [OFFICIAL_NLP, OFFICIAL_VISION])
def test_choice_resolves_per_protocol_and_family(official):
    ran = dict(official=official, official_code_ran=True)
    assert resolve_stabilizers(None, protocol="official", **ran) is official
    assert resolve_stabilizers(None, protocol="corrected", **ran) is NONE
    assert resolve_stabilizers("official", protocol="corrected", **ran) is official
    assert resolve_stabilizers("none", protocol="official", **ran) is NONE
    custom = dataclasses.replace(official, name="custom", add=0.0)
    assert resolve_stabilizers(custom, protocol="official", **ran) is custom
    with pytest.raises(BadInputError, match="unknown stabilizers 'zennit'"):
        resolve_stabilizers("zennit", protocol="official", **ran)


@pytest.mark.parametrize("official", [OFFICIAL_NLP, OFFICIAL_VISION])
def test_a_family_the_official_code_never_ran_defaults_to_none_and_takes_official_on_request(official):
    never = dict(official=official, official_code_ran=False)
    for protocol in ("official", "corrected"):
        assert resolve_stabilizers(None, protocol=protocol, **never) is NONE
        assert resolve_stabilizers("official", protocol=protocol, **never) is official
        assert resolve_stabilizers("none", protocol=protocol, **never) is NONE


def test_a_family_without_an_official_set_defaults_to_none_and_refuses_official():
    for protocol in ("official", "corrected"):
        for ran in (False, True):
            assert resolve_stabilizers(None, protocol=protocol, official=None, official_code_ran=ran) is NONE
    none = dict(official=None, official_code_ran=False)
    assert resolve_stabilizers("none", protocol="official", **none) is NONE
    assert resolve_stabilizers(Stabilizers("zero"), protocol="official", **none).name == "zero"
    for choice in ("official", Stabilizers("mine", add=1e-3)):
        with pytest.raises(BadInputError, match="has no counterpart for Gpt2.*exist for decoders only"):
            resolve_stabilizers(choice, protocol="corrected", model="Gpt2", families="decoders", **none)


def test_each_family_has_its_official_set():
    assert DecoderTwin.official_stabilizers is OFFICIAL_NLP and VitTwin.official_stabilizers is OFFICIAL_VISION
    assert RopeVitTwin.official_stabilizers is None  # the official code never ran a RoPE ViT
    assert not NONE.active and OFFICIAL_NLP.active and OFFICIAL_VISION.active
    assert all(getattr(NONE, f.name) == 0.0 for f in dataclasses.fields(Stabilizers) if f.name != "name")


def test_the_official_code_ran_one_decoder_family():
    """The fact sits on the decoder specs: LLaMA (LLaMA-2, LLaMA-3.x, TinyLlama) only."""
    discover()
    assert {s.family for s in DECODER_SPECS.values() if s.official_code_ran} == {"llama"}


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_decoder_family_gets_its_default(family, kind):
    """protocol=official defaults to the official set on LLaMA only; corrected to none everywhere; an explicit
    ``official`` places the official NLP set on every decoder family."""
    model = make_model(family, kind)
    ran = family == "llama"
    assert spec_for(model).official_code_ran is ran
    assert stabilizers_used(model, "pa_lrp") == ("official" if ran else "none")
    assert stabilizers_used(model, "pa_lrp", protocol="corrected") == "none"
    for protocol in ("official", "corrected"):
        assert stabilizers_used(model, "pa_lrp", protocol=protocol, stabilizers="official") == "official"
        assert stabilizers_used(model, "pa_lrp", protocol=protocol, stabilizers="none") == "none"
    assert stabilizers_used(model, "grad_x_input", stabilizers="official") == "none"  # plain gradients


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_default_explanation_is_the_named_set(family):
    """What explain uses by default is exactly its named counterpart (and the two sets differ on this input)."""
    model = make_model(family)
    ids = random_ids(2, 9)
    default = explain(model, ids, method="attnlrp")
    expected = "official" if family == "llama" else "none"
    assert default.extras["stabilizers"] == expected
    assert torch.equal(default.semantic, explain(model, ids, method="attnlrp", stabilizers=expected).semantic)
    other = explain(model, ids, method="attnlrp", stabilizers="none" if family == "llama" else "official")
    assert other.extras["stabilizers"] != expected and not torch.equal(default.semantic, other.semantic)


def test_vision_defaults():
    """Every timm ViT counts as DeiT (the embedded tiny ViT, plain and distilled ViTs: official by default); the
    torchvision ViT (the AttnLRP paper's) defaults to none and takes the official set on request."""
    for model in (load_tiny_vit(), make_vit("plain", torch.float32), make_vit("distilled", torch.float32)):
        assert stabilizers_used(model, "pa_lrp") == "official"
        assert stabilizers_used(model, "pa_lrp", protocol="corrected") == "none"
    tv = timm_from_torchvision(tiny_torchvision_vit().float())
    assert stabilizers_used(tv, "pa_lrp") == stabilizers_used(tv, "pa_lrp", protocol="corrected") == "none"
    assert stabilizers_used(tv, "pa_lrp", stabilizers="official") == "official"
    x = torch.randn(1, 3, 32, 32)
    assert explain(tv, x, method="pa_lrp").extras["stabilizers"] == "none"


def test_stabilize_backward_is_the_factor_and_zero_where_the_denominator_vanishes():
    """``z / (z + eps)`` per element, 0 where ``z + eps == 0`` (the official code would divide by zero there);
    the incoming gradient is not modified in place."""
    z = torch.tensor([2.0, -0.5, 0.0, -1e-3], dtype=torch.float64, requires_grad=True)
    grad = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    kept = grad.clone()
    (g,) = torch.autograd.grad(rules.stabilize(z, 1e-3), z, grad)
    assert torch.equal(grad, kept)
    expected = torch.tensor([2.0 / (2.0 + 1e-3), 2.0 * -0.5 / (-0.5 + 1e-3), 0.0, 0.0], dtype=torch.float64)
    assert torch.allclose(g, expected, rtol=1e-15, atol=0)
