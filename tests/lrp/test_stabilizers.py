"""The stabilizers switch (palrp_bench/lrp/stabilizers.py): which set a choice resolves to, per protocol and family.

Where each stabiliser applies is tested against slow references (tests/lrp/test_rules.py, tests/lrp/test_gamma.py,
tests/lrp/test_decoder_family_reference.py, tests/models/test_vit_twin.py); the official values against the
official code's outputs in tests/methods/test_official_agreement.py and tests/models/test_deit_official.py."""
import dataclasses

import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.lrp import rules
from palrp_bench.lrp.stabilizers import NONE, OFFICIAL_NLP, OFFICIAL_VISION, Stabilizers, resolve_stabilizers
from palrp_bench.models.decoder import DecoderTwin
from palrp_bench.models.vit import VitTwin
from palrp_bench.models.vit_rope import RopeVitTwin


@pytest.mark.parametrize("official", [OFFICIAL_NLP, OFFICIAL_VISION])
def test_choice_resolves_per_protocol_and_family(official):
    assert resolve_stabilizers(None, protocol="official", official=official) is official
    assert resolve_stabilizers(None, protocol="corrected", official=official) is NONE
    assert resolve_stabilizers("official", protocol="corrected", official=official) is official
    assert resolve_stabilizers("none", protocol="official", official=official) is NONE
    custom = dataclasses.replace(official, name="custom", add=0.0)
    assert resolve_stabilizers(custom, protocol="official", official=official) is custom
    with pytest.raises(BadInputError, match="unknown stabilizers 'zennit'"):
        resolve_stabilizers("zennit", protocol="official", official=official)


def test_a_family_without_an_official_set_defaults_to_none_and_refuses_official():
    for protocol in ("official", "corrected"):
        assert resolve_stabilizers(None, protocol=protocol, official=None) is NONE
    assert resolve_stabilizers("none", protocol="official", official=None) is NONE
    assert resolve_stabilizers(Stabilizers("zero"), protocol="official", official=None).name == "zero"
    for choice in ("official", Stabilizers("mine", add=1e-3)):
        with pytest.raises(BadInputError, match="has no counterpart for Gpt2.*exist for decoders only"):
            resolve_stabilizers(choice, protocol="corrected", official=None, model="Gpt2", families="decoders")


def test_each_family_has_its_official_set():
    assert DecoderTwin.official_stabilizers is OFFICIAL_NLP and VitTwin.official_stabilizers is OFFICIAL_VISION
    assert RopeVitTwin.official_stabilizers is None  # the official code never ran a RoPE ViT
    assert not NONE.active and OFFICIAL_NLP.active and OFFICIAL_VISION.active
    assert all(getattr(NONE, f.name) == 0.0 for f in dataclasses.fields(Stabilizers) if f.name != "name")


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
