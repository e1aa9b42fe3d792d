"""The T5 twin agrees with the slow explicit LRP of a one-layer encoder + one-layer decoder
(tests/reference/explicit_t5.py), both variants, both relative-bias rules, both attention paths; float64, one
unpadded sample, ``explain(..., method="pa_lrp")``. Measured agreement ~1e-15 relative; asserted to 1e-10 relative to
the largest semantic relevance."""
import pytest
import torch

from palrp_bench import explain
from models.tiny_t5 import PAD, VARIANTS, make_t5, random_ids
from reference.explicit_t5 import t5_reference

TOL = 1e-10


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("rule", ["relative_half", "key"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_t5_matches_the_explicit_reference(variant, rule, attention):
    model = make_t5(variant, torch.float64, num_layers=1, num_decoder_layers=1)
    ids = random_ids(model, 1, 9, seed=21)
    dec = random_ids(model, 1, 4, seed=22)
    dec[0, 0] = PAD
    ref = t5_reference(model, ids[0], dec[0], rule=rule)
    e = explain(model, ids, decoder_input_ids=dec, method="pa_lrp", relative_bias_rule=rule, attention=attention)
    scale = float(torch.cat([ref["semantic"], ref["decoder_semantic"]]).abs().max())
    assert int(e.target[0]) == ref["target"] and abs(float(e.logit[0]) - ref["logit"]) < 1e-12
    pairs = [(e.semantic[0], ref["semantic"]), (e.extras["decoder_semantic"][0], ref["decoder_semantic"]),
             (e.extras["relative_bias_query"][0, 0], ref["query"]), (e.extras["relative_bias_key"][0, 0], ref["key"]),
             (e.extras["decoder_relative_bias_query"][0, 0], ref["decoder_query"]),
             (e.extras["decoder_relative_bias_key"][0, 0], ref["decoder_key"])]
    for i, (ours, theirs) in enumerate(pairs):
        assert float((ours - theirs).abs().max()) <= TOL * scale, i
    assert ref["key"].abs().max() > 1e-4 * scale and ref["decoder_key"].abs().max() > 1e-4 * scale
    assert torch.allclose(e.positional[0, 0, 0], ref["query"] + ref["key"], atol=TOL * scale, rtol=0)
