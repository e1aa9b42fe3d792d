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
