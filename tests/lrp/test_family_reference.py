"""The fast twins of GPT-2, OPT, BLOOM (both ALiBi rules), BERT, RoBERTa and the timm RoPE ViT agree with the slow
explicit LRP of one-layer models (tests/reference/explicit_models.py; issue "PA-LRP for the models people use now",
test 5). float64, one unpadded sample, ``explain(..., method="pa_lrp")``; both attention paths. Measured agreement
~1e-15 relative; asserted to 1e-10 relative to the largest relevance."""
import pytest
import torch

from palrp_bench import explain
from models.families import images, make_rope_vit, make_text, random_ids
from reference.explicit_models import decoder_reference, encoder_reference, rope_vit_reference

TOL = 1e-10


def close(ours: torch.Tensor, theirs: torch.Tensor, scale: float) -> bool:
    return float((ours.double() - theirs).abs().max()) <= TOL * scale


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("family,head,rule", [("gpt2", "causal", None), ("gpt2", "classifier", None),
                                              ("opt", "causal", None), ("bloom", "causal", "paper"),
                                              ("bloom", "classifier", "relative_half")])
def test_decoders_match_the_explicit_reference(family, head, rule, attention):
    model = make_text(family, head, torch.float64, attn="eager", layers=1)
    ids = random_ids(1, 9, seed=21)
    ref = decoder_reference(model, ids[0], alibi_rule=rule or "paper")
    options = {"alibi_rule": rule} if rule else {}
    e = explain(model, ids, method="pa_lrp", attention=attention, **options)
    scale = float(ref["semantic"].abs().max())
    assert int(e.target[0]) == ref["target"] and abs(float(e.logit[0]) - ref["logit"]) < 1e-12
    assert close(e.semantic[0], ref["semantic"], scale)
    assert close(e.positional[0].sum((0, 1)), ref["positional"], scale)
    assert ref["positional"].abs().max() > 1e-4 * scale  # positions matter in this model
    if rule:
        assert close(e.extras["alibi_query"][0, 0], ref["query"], scale)
        assert close(e.extras["alibi_key"][0, 0], ref["key"], scale)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("family,head", [("bert", "masked_lm"), ("bert", "classifier"), ("roberta", "classifier")])
def test_encoders_match_the_explicit_reference(family, head, attention):
    model = make_text(family, head, torch.float64, attn="eager", layers=1)
    ids = random_ids(1, 8, seed=22)
    types = (torch.arange(8) >= 5).long()[None] if family == "bert" else torch.zeros_like(ids)
    ref = encoder_reference(model, ids[0], types[0], position=3)
    e = explain(model, {"input_ids": ids, "token_type_ids": types}, method="pa_lrp", attention=attention,
                position=3 if head == "masked_lm" else None)
    scale = float(ref["semantic"].abs().max())
    assert int(e.target[0]) == ref["target"] and abs(float(e.logit[0]) - ref["logit"]) < 1e-12
    assert close(e.semantic[0], ref["semantic"], scale)
    assert close(e.positional[0, 0, 0], ref["positional"], scale)
    assert close(e.extras["token_type"][0], ref["token_type"], scale)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_rope_vit_matches_the_explicit_reference(attention):
    model = make_rope_vit("rope_ape", depth=1)
    x = images(1)
    ref = rope_vit_reference(model, x[0])
    e = explain(model, x, method="pa_lrp", rules="attnlrp", attention=attention)
    scale = float(ref["semantic"].abs().max())
    assert int(e.target[0]) == ref["target"]
    assert close(e.semantic[0], ref["semantic"], scale)
    grid = e.positional.shape[-2:]
    assert close(e.positional[0, 0, 0], ref["ape"].reshape(grid), scale)            # the learned table
    assert close(e.positional[0, 1, 0], ref["cos"].reshape(grid), scale)            # layer 0: cos, sin
    assert close(e.positional[0, 1, 1], ref["sin"].reshape(grid), scale)
    assert ref["cos"].abs().max() > 1e-4 * scale
    assert close(e.extras["cls_semantic"], ref["cls"].reshape(1), scale)
