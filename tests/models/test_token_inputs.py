"""Input checks shared by every text twin (palrp_bench/models/token_inputs.py): one-line errors, the same on the
decoder twin and the learned-PE twins."""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.errors import BadInputError
from palrp_bench.models.token_inputs import attention_mask_of, per_token, token_batch
from models.tiny_llama import make_llama, random_ids


def test_token_batch_accepts_lists_and_1d_and_refuses_bad_ids():
    ids = token_batch([3, 4, 5], vocab_size=8, max_positions=4, device="cpu")
    assert ids.dtype == torch.long and ids.tolist() == [[3, 4, 5]]
    cases = [(torch.zeros(2, 0, dtype=torch.long), "empty input"), (torch.ones(1, 5, dtype=torch.long), "longer than"),
             (torch.full((1, 2), 8), "out of range"), (torch.ones(1, 2), "integer tensor")]
    for bad, message in cases:
        with pytest.raises(BadInputError, match=message) as err:
            token_batch(bad, vocab_size=8, max_positions=4, device="cpu")
        assert "\n" not in str(err.value)


def test_masks_and_per_token_tensors_are_shaped_like_the_ids():
    ids = torch.ones(2, 3, dtype=torch.long)
    assert attention_mask_of(None, ids) is None
    assert attention_mask_of([[1, 1, 0], [0, 1, 1]], ids).tolist() == [[1, 1, 0], [0, 1, 1]]
    for bad, message in [([[1, 1], [1, 1]], "differs from input_ids"), ([[1, 2, 1], [1, 1, 1]], "only 0 and 1"),
                         ([[0, 0, 0], [1, 1, 1]], "no real token")]:
        with pytest.raises(BadInputError, match=message):
            attention_mask_of(bad, ids)
    assert per_token([0, 1, 0], ids[:1], "token_type_ids").tolist() == [[0, 1, 0]]


def test_the_decoder_twin_refuses_a_mask_that_is_not_zero_one():
    model = make_llama()
    ids = random_ids(1, 5)
    with pytest.raises(BadInputError, match="only 0 and 1"):
        explain(model, ids, attention_mask=torch.tensor([[1, 1, 2, 1, 1]]), method="pa_lrp")
