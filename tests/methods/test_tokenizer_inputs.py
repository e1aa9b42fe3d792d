"""``explain(model, tokenizer(texts, return_tensors="pt"))`` for every family: the mapping (a ``BatchEncoding`` or a
dict) is taken apart by name -- ``input_ids``, ``attention_mask`` and ``token_type_ids`` where the family has token
types -- and gives the explanation of the same tensors passed one by one; what a family does not take is refused in
one line naming what to pass (palrp_bench/models/token_inputs.py, ``model_inputs``)."""
import pytest
import torch
from transformers import BatchEncoding, BatchFeature

from palrp_bench import explain
from palrp_bench.errors import BadInputError
from models import families, tiny_families, tiny_t5

#: (name, builder of (model, positional inputs: input_ids / mask / token types or pixels)); one head per family
LEFT_PADDED = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])


def _decoder(family):
    def build():
        model = tiny_families.make_model(family, "classifier")
        return model, {"input_ids": tiny_families.random_ids(2, 6), "attention_mask": LEFT_PADDED}
    return build


def _text(family, head):
    def build():
        attn = families.LIBRARY_ATTENTION.get(family, ("sdpa",))[0]
        model = families.make_text(family, head, dtype=torch.float32, attn=attn)
        inputs = {"input_ids": families.random_ids(2, 6), "attention_mask": LEFT_PADDED.flip(-1)}
        if family == "bert":
            inputs["token_type_ids"] = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
        return model, inputs
    return build


def _t5():
    model = tiny_t5.make_t5(dtype=torch.float32)
    return model, {"input_ids": tiny_t5.random_ids(model, 2, 6), "attention_mask": LEFT_PADDED.flip(-1),
                   "decoder_input_ids": torch.full((2, 1), tiny_t5.PAD)}


CASES = {**{f"{f}_classifier": _decoder(f) for f in tiny_families.FAMILIES},
         **{f"{f}_{h}": _text(f, h) for f, h in families.CASES},
         "t5_seq2seq": _t5}


def _explanations(model, inputs, method="pa_lrp"):
    kwargs = {"position": 2} if getattr(model.config, "model_type", "") in ("bert", "roberta") \
        and type(model).__name__.endswith("MaskedLM") else {}
    if "token_type_ids" in inputs:  # only the mapping carries token types
        one_by_one = None
    else:
        decoder = {k: inputs[k] for k in ("decoder_input_ids",) if k in inputs}
        one_by_one = explain(model, inputs["input_ids"], inputs["attention_mask"], method=method, **decoder, **kwargs)
    return explain(model, BatchEncoding(inputs), method=method, **kwargs), one_by_one, kwargs


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_tokenizer_mapping_explains_like_its_tensors(case):
    model, inputs = CASES[case]()
    mapped, one_by_one, kwargs = _explanations(model, inputs)
    assert mapped.scores.shape == inputs["input_ids"].shape and torch.isfinite(mapped.scores).all()
    if one_by_one is not None:
        torch.testing.assert_close(mapped.scores, one_by_one.scores, rtol=0, atol=0)
        torch.testing.assert_close(mapped.logit, one_by_one.logit, rtol=0, atol=0)
    else:  # BERT: the token types change the explained logit (the library's own forward with them)
        with torch.no_grad():
            library = model(**inputs).logits
        rows = torch.arange(2)
        expected = library[rows, 2][rows, mapped.target] if kwargs else library[rows, mapped.target]
        torch.testing.assert_close(mapped.logit, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(BadInputError, match=r"does not take 'position_ids' from the inputs mapping -- pass "
                                            r"input_ids, attention_mask") as err:
        explain(model, {**inputs, "position_ids": inputs["attention_mask"].cumsum(-1)}, **kwargs)
    assert "\n" not in str(err.value)
    with pytest.raises(BadInputError, match="the inputs mapping has no 'input_ids'"):
        explain(model, {"attention_mask": inputs["attention_mask"]}, **kwargs)


@pytest.mark.parametrize("case", ["llama_classifier", "opt_causal", "bloom_causal", "gpt2_causal"])
def test_token_types_of_a_family_without_them(case):
    """All-zero token types (what a generic tokenizer returns) are ignored where the library forward takes none;
    GPT-2's forward would embed them, and any non-zero type would be silently dropped: refused, naming the fix."""
    model, inputs = CASES[case]()
    zeros = {**inputs, "token_type_ids": torch.zeros_like(inputs["input_ids"])}
    ones = {**inputs, "token_type_ids": torch.ones_like(inputs["input_ids"])}
    for refused in ([ones, zeros] if case.startswith("gpt2") else [ones]):
        with pytest.raises(BadInputError, match="has no token types: drop token_type_ids"):
            explain(model, refused)
    if not case.startswith("gpt2"):
        torch.testing.assert_close(explain(model, zeros).scores, explain(model, inputs).scores, rtol=0, atol=0)


def test_the_tiny_llama_classifier_takes_its_tokenizers_output():
    """The case of the report: explain(llama_classifier, tokenizer(texts, return_tensors="pt")) failed with
    "Could not infer dtype of dict"."""
    from palrp_bench.data.synthetic_text import load_tiny_text_model, load_tiny_tokenizer

    model, tokenizer = load_tiny_text_model("cls"), load_tiny_tokenizer()
    encoded = tokenizer(["the movie was great", "bad"], return_tensors="pt", padding=True)
    assert isinstance(encoded, BatchEncoding)
    torch.testing.assert_close(explain(model, encoded).scores,
                               explain(model, encoded["input_ids"], encoded["attention_mask"]).scores, rtol=0, atol=0)
    with pytest.raises(BadInputError, match="attention_mask was given twice"):
        explain(model, encoded, encoded["attention_mask"])
    with pytest.raises(BadInputError, match="input_ids is a mapping -- pass the tokenizer's output as the inputs"):
        from palrp_bench.models.token_inputs import token_batch

        token_batch(dict(encoded), vocab_size=10, max_positions=None, device="cpu")


def test_a_vision_transformer_takes_an_image_processors_output():
    model = families.make_rope_vit(dtype=torch.float32)
    pixels = families.images(2, dtype=torch.float32)
    torch.testing.assert_close(explain(model, BatchFeature({"pixel_values": pixels})).scores,
                               explain(model, pixels).scores, rtol=0, atol=0)
    with pytest.raises(BadInputError, match="the inputs mapping has no 'pixel_values'.* -- pass pixel_values"):
        explain(model, {"input_ids": torch.ones(2, 3, dtype=torch.long)})
