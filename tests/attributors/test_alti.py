"""ALTI-Logit and ALTI (palrp_bench/attributors/alti.py) against the slow explicit references of
tests/reference/explicit_alti.py, their accounting identity, the invariants of ALTI's matrices, contrastive
explanations, batch invariance, the decoder families they cover and the one-line refusals of the others."""
import pytest
import torch

from models.families import make_text, padded_batch
from models.tiny_families import make_model, random_ids as decoder_ids
from palrp_bench import explain
from palrp_bench.attributors.alti import alti_logit_terms, alti_matrices
from palrp_bench.attributors.base import make_call
from palrp_bench.errors import UnsupportedModelError
from palrp_bench.methods.registry import get_method
from palrp_bench.models.registry import twin_for
from reference import explicit_alti as ref

TERMS = ("mlp", "attention_bias", "embedding", "output_bias")
#: how close a float64 forward of ours is to the library's: LLaMA-style families compute their RMSNorm statistics in
#: float32 even in float64 (tests/models/); GPT-2 stays in float64
LIBRARY_ATOL = {"gpt2": 1e-10, "llama": 1e-6}


def total(e) -> torch.Tensor:
    """Token scores (the explained token's direct embedding term included) plus the terms that no token gets: MLP
    outputs, attention output biases and the output bias, ``[B]``."""
    ex = e.extras
    return (e.scores.double().sum(1) + ex["alti_logit_mlp"].sum(1) + ex["alti_logit_attention_bias"].sum(1)
            + ex["alti_logit_output_bias"])


def gpt2(head="causal"):
    return make_text("gpt2", head)                                   # float64, randomised biases and gains


def llama(head="causal"):
    return make_model("llama", head, "gqa_bias", dtype=torch.float64)  # GQA 4/2, biases, llama3 RoPE, RMSNorm


MODELS = {"gpt2": (gpt2, ref.gpt2_blocks), "llama": (llama, ref.llama_blocks)}


def call_for(model, ids, method, target=None, foil=None, **options):
    twin = twin_for(model)
    call = make_call(twin, twin.prepare(ids), get_method(method), {}, target, options, None)
    if foil is not None:
        call.foil = torch.as_tensor(foil).long().expand(call.batch)
    return call


# ------------------------------------------------------------------------------------------ ALTI-Logit
@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("head", ["causal", "classifier"])
def test_alti_logit_matches_the_explicit_two_layer_reference(family, head):
    build, blocks_of = MODELS[family]
    model = build(head)
    ids = decoder_ids(1, 7, seed=3)[0] if family == "llama" else padded_batch([7], "right")[2][0]
    e = explain(model, ids[None], method="alti_logit")
    blocks, top = blocks_of(model, ids)
    assert len(blocks) == 2
    expected = ref.alti_logit(blocks, top, ids.shape[0] - 1, int(e.target[0]))
    library = model(ids[None]).logits.detach()
    library = (library[0, -1] if library.dim() == 3 else library[0])[int(e.target[0])]
    assert abs(expected["forward"] - float(library)) < LIBRARY_ATOL[family]     # the explicit forward
    assert abs(expected["explained"] - expected["forward"]) < 1e-10
    assert torch.allclose(e.scores[0].double(), expected["scores"], rtol=1e-10, atol=1e-12)
    for name in TERMS:
        assert torch.allclose(e.extras[f"alti_logit_{name}"][0].double(),
                              torch.as_tensor(expected[name], dtype=torch.float64), rtol=1e-10, atol=1e-12), name
    assert expected["scores"].abs().sum() > 0.1 and expected["mlp"].abs().sum() > 0.01


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_tokens_mlp_and_biases_add_up_to_the_logit_and_padding_changes_nothing(family, side):
    model = MODELS[family][0]("causal")
    ids, mask, seqs = padded_batch([7, 4, 6], side, seed=5)
    e = explain(model, ids, mask, method="alti_logit")
    explained = e.extras["alti_logit_explained"]
    assert torch.allclose(total(e), explained, rtol=1e-12, atol=1e-12)
    for b, seq in enumerate(seqs):
        library = model(seq[None]).logits.detach()[0, -1, int(e.target[b])]
        assert abs(float(explained[b]) - float(library)) < LIBRARY_ATOL[family]
        alone = explain(model, seq[None], method="alti_logit")
        real = mask[b].bool()
        assert torch.allclose(e.scores[b, real].double(), alone.scores[0].double(), rtol=1e-9, atol=1e-11)
        assert not e.scores[b, ~real].any()
        for name in TERMS:
            assert torch.allclose(e.extras[f"alti_logit_{name}"][b], alone.extras[f"alti_logit_{name}"][0],
                                  rtol=1e-9, atol=1e-11)
    assert e.extras["alti_logit_mlp"].shape == (3, 2) and e.forward_passes.tolist() == [1, 1, 1]
    assert e.backward_passes.tolist() == [0, 0, 0]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_contrastive_explanation_is_the_difference_of_the_two_decompositions(family):
    model = MODELS[family][0]("causal")
    ids = decoder_ids(2, 6, seed=8)
    target, foil = torch.tensor([5, 9]), torch.tensor([11, 3])
    one = alti_logit_terms(call_for(model, ids, "alti_logit", target))
    other = alti_logit_terms(call_for(model, ids, "alti_logit", foil))
    contrast = alti_logit_terms(call_for(model, ids, "alti_logit", target, foil=foil))
    for name in ("scores", "mlp", "attention_bias", "embedding", "output_bias", "explained"):
        assert torch.allclose(contrast[name], one[name] - other[name], rtol=1e-10, atol=1e-12), name
    logits = model(ids).logits.detach()[:, -1]
    gap = logits.gather(1, target[:, None])[:, 0] - logits.gather(1, foil[:, None])[:, 0]
    assert torch.allclose(contrast["explained"], gap, atol=LIBRARY_ATOL[family])
    # the explicit reference with the difference of the head rows
    blocks, top = ref.gpt2_blocks(model, ids[0]) if family == "gpt2" else ref.llama_blocks(model, ids[0])
    expected = ref.alti_logit(blocks, top, 5, 5, foil=11)
    assert torch.allclose(contrast["scores"][0], expected["scores"], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("family,variant", [("mistral", "window"), ("qwen2", "window"), ("qwen3", "window"),
                                            ("phi3", "partial_window"), ("gpt_neox", "sequential"),
                                            ("mixtral", "window"), ("qwen2_moe", "shared"), ("olmoe", "gqa"),
                                            ("deepseek_v3", "lora_grouped")])
def test_other_pre_norm_decoder_families_decompose_exactly(family, variant):
    model = make_model(family, "causal", variant, dtype=torch.float64)
    ids = decoder_ids(2, 9, seed=1)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    e = explain(model, ids, mask, method="alti_logit")
    assert torch.allclose(total(e), e.extras["alti_logit_explained"], rtol=1e-12, atol=1e-12)
    library = model(ids[:1]).logits.detach()[0, -1, int(e.target[0])]
    assert abs(float(e.extras["alti_logit_explained"][0]) - float(library)) < 1e-6  # float32 norms (above)
    alone = explain(model, ids[1:, :6], method="alti_logit")
    assert torch.allclose(e.scores[1, :6].double(), alone.scores[0].double(), rtol=1e-9, atol=1e-11)


def test_float32_models_decompose_to_float32_rounding():
    model = make_model("llama", "causal", "gqa_bias", dtype=torch.float32)
    e = explain(model, decoder_ids(2, 12, seed=2), method="alti_logit")
    explained = e.extras["alti_logit_explained"].double()
    assert torch.allclose(total(e), explained, rtol=1e-5, atol=1e-5 * float(explained.abs().max()))


# ------------------------------------------------------------------------------------------------- ALTI
def test_alti_matrices_are_row_stochastic_and_respect_the_masks():
    model = make_text("bert", "masked_lm")
    ids, mask, _ = padded_batch([7, 5], "right", seed=2)
    call = call_for(model, {"input_ids": ids, "attention_mask": mask}, "alti", position=3)
    matrices = alti_matrices(call)
    assert len(matrices) == 2
    rollout = torch.eye(7, dtype=torch.float64).expand(2, 7, 7)
    for c in matrices:
        assert bool((c >= 0).all())
        assert torch.allclose(c.sum(-1), torch.ones(2, 7, dtype=torch.float64), atol=1e-12)
        assert not c[1, :5, 5:].any()                    # padded keys contribute nothing to real tokens
        rollout = torch.bmm(c, rollout)
    assert torch.allclose(rollout.sum(-1), torch.ones(2, 7, dtype=torch.float64), atol=1e-12)
    e = explain(model, ids, mask, method="alti", position=3)
    assert torch.allclose(e.scores.double(), rollout[:, 3], atol=1e-12)
    assert torch.allclose(e.scores.double().sum(1), torch.ones(2, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("head", ["masked_lm", "classifier"])
def test_alti_matches_the_explicit_reference_on_a_two_layer_bert(head):
    model = make_text("bert", head)
    ids = padded_batch([8], "right", seed=4)[2][0]
    position = 5 if head == "masked_lm" else 0
    e = explain(model, ids[None], method="alti", **({"position": position} if head == "masked_lm" else {}))
    blocks, x_last = ref.bert_blocks(model, ids)
    assert len(blocks) == 2
    assert torch.allclose(x_last, model.bert(ids[None]).last_hidden_state.detach()[0], atol=1e-12)  # the model's
    expected = ref.alti_rollout(blocks)[position]
    assert torch.allclose(e.scores[0].double(), expected, rtol=1e-10, atol=1e-12)
    assert float(expected.max()) < 0.9                          # not the identity: tokens do mix


def test_alti_on_a_decoder_matches_the_explicit_reference_and_ignores_the_target():
    model = gpt2()
    ids = padded_batch([6], "right", seed=9)[2][0]
    e = explain(model, ids[None], method="alti")
    other = explain(model, ids[None], method="alti", target=3)
    blocks, _ = ref.gpt2_blocks(model, ids)
    expected = ref.alti_rollout(blocks)[5]
    assert torch.allclose(e.scores[0].double(), expected, rtol=1e-10, atol=1e-12)
    assert torch.equal(e.scores, other.scores)


@pytest.mark.parametrize("family,head", [("gpt2", "causal"), ("opt", "causal"), ("bert", "masked_lm"),
                                         ("roberta", "classifier")])
def test_alti_is_batch_invariant(family, head):
    model = make_text(family, head)
    ids, mask, seqs = padded_batch([6, 4], "right")
    options = {"position": 2} if head == "masked_lm" else {}
    e = explain(model, ids, mask, method="alti", **options)
    alone = explain(model, ids[1:, :4], mask[1:, :4], method="alti", **options)
    assert torch.allclose(alone.scores, e.scores[1:, :4], atol=1e-10) and not e.scores[1, 4:].any()


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("family,head", [("bert", "masked_lm"), ("roberta", "classifier")])
def test_alti_logit_on_a_post_norm_encoder_names_alti(family, head):
    model = make_text(family, head)
    options = {"position": 1} if head == "masked_lm" else {}
    with pytest.raises(UnsupportedModelError, match="post-norm.*use method=alti") as err:
        explain(model, padded_batch([5], "right")[0], method="alti_logit", **options)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("build,method,reason", [
    (lambda: make_model("gemma2", "causal", "no_softcap", dtype=torch.float64), "alti_logit", "sandwich norm"),
    (lambda: make_model("gemma2", "causal", "softcap", dtype=torch.float64), "alti_logit", "soft-caps its logits"),
    (lambda: make_model("gpt_neox", "causal", "parallel", dtype=torch.float64), "alti", "parallel residual"),
    (lambda: make_text("bloom", "causal", attn="eager"), "alti_logit", "no residual sum was traced"),
])
def test_models_whose_stream_is_not_a_chain_of_sums_are_refused_in_one_line(build, method, reason):
    with pytest.raises(UnsupportedModelError, match=reason) as err:
        explain(build(), decoder_ids(1, 5), method=method)
    assert "\n" not in str(err.value)


def test_the_methods_refuse_vision_models():
    from models.test_vit_twin import images, make_vit

    from palrp_bench.errors import BadInputError

    for method in ("alti", "alti_logit"):
        with pytest.raises(BadInputError, match="defined for tokens"):
            explain(make_vit("plain"), images(1), method=method)
