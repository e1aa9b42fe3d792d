"""Public API contract and one-line errors for bad input."""
import pytest
import torch
import transformers

from palrp_bench import explain
from palrp_bench.errors import BadInputError, PalrpError, UnsupportedModelError
from models.tiny_llama import make_llama, random_ids


@pytest.fixture(scope="module")
def model():
    return make_llama("gqa", "causal")


def test_shapes_and_fields(model):
    ids = random_ids(2, 6)
    rel = explain(model, ids, method="pa_lrp")
    assert rel.scores.shape == (2, 6) and rel.semantic.shape == (2, 6)
    assert rel.positional.shape == (2, model.config.num_hidden_layers, 2, 6)
    assert rel.logit.shape == (2,) and rel.target.shape == (2,)
    assert rel.method == "pa_lrp" and rel.rules == "attnlrp" and rel.aggregation == "official"
    assert torch.isclose(rel.scores.abs().max(dim=-1).values, torch.ones(2)).all()  # max-abs normalised
    base = explain(model, ids, method="attnlrp")
    assert base.positional.abs().max() == 0


def test_eq11_aggregation_is_nonnegative_and_differs(model):
    ids = random_ids(1, 8)
    official = explain(model, ids, method="pa_lrp")
    eq11 = explain(model, ids, method="pa_lrp", aggregation="eq11")
    assert (eq11.scores >= 0).all() and not torch.allclose(eq11.scores, official.scores)
    pe = explain(model, ids, method="pe_only", aggregation="eq11")
    manual = pe.extras["positional_relu"].sum(dim=(1, 2))
    assert torch.allclose(pe.scores, manual / manual.max(), atol=1e-6)


@pytest.mark.parametrize("kwargs,match", [
    (dict(method="lime"), "unknown method 'lime'"),
    (dict(aggregation="mean"), "unknown aggregation"),
    (dict(rules="zennit"), "unknown rules"),
    (dict(protocol="paper"), "unknown protocol"),
    (dict(stabilizers="zennit"), "unknown stabilizers 'zennit'"),
    (dict(target=500), "target index out of range"),
])
def test_bad_arguments_fail_with_one_line_messages(model, kwargs, match):
    with pytest.raises(PalrpError, match=match) as info:
        explain(model, random_ids(1, 5), **kwargs)
    assert "\n" not in str(info.value) and " -- " in str(info.value)


def test_bad_inputs(model):
    with pytest.raises(BadInputError, match="empty input"):
        explain(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(BadInputError, match="longer than the model context"):
        explain(model, random_ids(1, model.config.max_position_embeddings + 1))
    with pytest.raises(BadInputError, match="integer tensor"):
        explain(model, torch.randn(1, 4))
    with pytest.raises(BadInputError, match="out of range for a vocabulary"):
        explain(model, torch.tensor([[1, 5000]]))
    with pytest.raises(BadInputError, match="no real token"):
        explain(model, random_ids(1, 4), attention_mask=torch.zeros(1, 4, dtype=torch.long))


def test_unsupported_model():
    headless = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    with pytest.raises(UnsupportedModelError, match="no LRP twin for model class GPT2Model"):
        explain(headless, torch.tensor([[1, 2, 3]]))


def test_stabilizers_switch_defaults_from_protocol_and_keeps_the_forward(model):
    """``stabilizers`` (lrp/stabilizers.py): ``official`` under protocol=official, ``none`` under corrected, either
    on request; the forward (logits, prediction) is the same, the relevance moves; plain Gradient x Input and the
    baselines never take them."""
    ids = random_ids(2, 9)
    default = explain(model, ids, method="pa_lrp")
    official = explain(model, ids, method="pa_lrp", stabilizers="official")
    none = explain(model, ids, method="pa_lrp", stabilizers="none")
    corrected = explain(model, ids, method="pa_lrp", protocol="corrected")
    assert default.stabilizers == "official" and none.stabilizers == "none"
    assert corrected.stabilizers == "none"
    assert torch.equal(default.semantic, official.semantic) and torch.equal(default.positional, official.positional)
    assert torch.equal(corrected.semantic, none.semantic)
    assert torch.equal(official.logit, none.logit) and torch.equal(official.target, none.target)
    assert not torch.equal(official.semantic, none.semantic)
    assert (official.semantic - none.semantic).abs().max() < 1e-3 * none.semantic.abs().max()
    # eager adds the two score stabilisers (Q K^T, mask add): same forward as eager without them, tiny change
    eager = explain(model, ids, method="pa_lrp", stabilizers="official", attention="eager")
    eager_none = explain(model, ids, method="pa_lrp", stabilizers="none", attention="eager")
    assert torch.equal(eager.logit, eager_none.logit)
    assert not torch.equal(eager.semantic, official.semantic)
    assert torch.allclose(eager.semantic, official.semantic, rtol=0, atol=1e-5 * official.semantic.abs().max())
    gxi = explain(model, ids, method="grad_x_input", stabilizers="official")
    assert gxi.stabilizers == "none"
    assert torch.equal(gxi.semantic, explain(model, ids, method="grad_x_input", stabilizers="none").semantic)
    assert explain(model, ids, method="integrated_gradients", params={"n_steps": 2}).stabilizers == "none"


def test_families_without_an_official_set_take_none_and_refuse_official():
    """GPT-2 (and the other twins the official code never ran): the protocol default resolves to ``none``
    (recorded as such), an explicit ``official`` is refused with one line naming the families that have one."""
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50)).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    default = explain(gpt2, ids, method="pa_lrp")
    assert default.stabilizers == "none"
    assert torch.equal(default.scores, explain(gpt2, ids, method="pa_lrp", stabilizers="none").scores)
    with pytest.raises(BadInputError, match="stabilizers='official' has no counterpart for GPT2LMHeadModel") as info:
        explain(gpt2, ids, method="pa_lrp", stabilizers="official")
    message = str(info.value)
    assert "\n" not in message and "decoders (" in message and "vit/deit" in message
