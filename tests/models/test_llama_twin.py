"""The LLaMA twin reproduces the library's logits (docs/design.md section 5, parity) and explains batches of
padded inputs exactly as it explains each sample alone."""
import pytest
import torch

from palrp_bench import explain
from palrp_bench.lrp.composites import ATTNLRP, GRAD_X_INPUT
from palrp_bench.models.decoder import DecoderTwin
from models.tiny_llama import VARIANTS, make_llama, random_ids


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("composite", [ATTNLRP, GRAD_X_INPUT])
def test_twin_logits_match_transformers(variant, kind, composite):
    model = make_llama(variant, kind)
    ids = random_ids(2, 11)
    twin = DecoderTwin(model)
    last = twin.last_index(ids, None)
    out = twin.forward(twin.embed(ids), None, last, composite, positional_sinks=True, return_all_logits=True)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
    if kind == "causal":
        assert (out.all_logits - ref).abs().max() < 1e-5
        assert (out.logits - ref[:, -1]).abs().max() < 1e-5
    else:
        assert (out.logits - ref).abs().max() < 1e-5


@pytest.mark.parametrize("kind", ["causal", "classifier"])
def test_twin_logits_match_with_padding_and_position_ids(kind):
    model = make_llama("gqa", kind)
    ids = random_ids(2, 9)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0   # left padding
    ids[0, :3] = 2
    twin = DecoderTwin(model)
    pos = twin.position_ids(mask)
    out = twin.forward(twin.embed(ids), mask, twin.last_index(ids, mask), ATTNLRP, positional_sinks=False,
                       return_all_logits=True)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    if kind == "causal":
        real = mask.bool()
        assert (out.all_logits[real] - ref[real]).abs().max() < 1e-5
    else:
        assert (out.logits - ref).abs().max() < 1e-5


def test_twin_bfloat16_close_to_transformers():
    model = make_llama("gqa", "causal", dtype=torch.bfloat16)
    ids = random_ids(2, 12)
    twin = DecoderTwin(model)
    out = twin.forward(twin.embed(ids), None, twin.last_index(ids, None), ATTNLRP, positional_sinks=True)
    with torch.no_grad():
        ref = model(input_ids=ids).logits[:, -1]
    scale = ref.float().abs().max()
    assert ((out.logits.float() - ref.float()).abs().max() / scale) < 3e-2


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp", "pe_only", "pa_lrp_no_multisink", "grad_x_input", "cp_lrp"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("kind", ["causal", "classifier"])
def test_batch_and_padding_invariance(method, side, kind):
    model = make_llama("gqa", kind)
    lengths = [7, 12, 4]
    T = max(lengths)
    seqs = [random_ids(1, n, seed=i)[0] for i, n in enumerate(lengths)]
    ids = torch.full((3, T), 2)
    mask = torch.zeros(3, T, dtype=torch.long)
    for i, s in enumerate(seqs):
        sl = slice(T - len(s), T) if side == "left" else slice(0, len(s))
        ids[i, sl] = s
        mask[i, sl] = 1
    batched = explain(model, ids, attention_mask=mask, method=method)
    for i, s in enumerate(seqs):
        single = explain(model, s[None], method=method)
        real = mask[i].bool()
        assert torch.allclose(batched.scores[i][real], single.scores[0], atol=2e-5, rtol=1e-4)
        assert torch.allclose(batched.semantic[i][real], single.semantic[0], atol=2e-5, rtol=1e-4)
        assert torch.allclose(batched.positional[i][..., real], single.positional[0], atol=2e-5, rtol=1e-4)
        assert torch.allclose(batched.logit[i], single.logit[0], atol=1e-5)
        assert batched.scores[i][~real].abs().max() == 0 if (~real).any() else True


@pytest.mark.parametrize("method", ["attnlrp", "pa_lrp", "cp_lrp"])
def test_sdpa_and_eager_attention_give_the_same_relevance(method):
    model = make_llama("gqa", "causal", dtype=torch.float64)
    ids = random_ids(2, 10)
    a = explain(model, ids, method=method, attention="sdpa")
    b = explain(model, ids, method=method, attention="eager")
    assert torch.allclose(a.scores, b.scores, atol=1e-10)
    assert torch.allclose(a.positional, b.positional, atol=1e-10)


def test_target_selection():
    model = make_llama("gqa", "classifier")
    ids = random_ids(3, 8)
    default = explain(model, ids, method="attnlrp")
    with torch.no_grad():
        pred = model(input_ids=ids).logits.argmax(-1)
    assert torch.equal(default.target, pred)
    other = explain(model, ids, method="attnlrp", target=1 - pred)
    assert torch.equal(other.target, 1 - pred)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert torch.allclose(other.logit, logits.gather(1, (1 - pred)[:, None])[:, 0], atol=1e-5)
    single = explain(model, ids, method="attnlrp", target=0)
    assert torch.equal(single.target, torch.zeros(3, dtype=torch.long))


def test_bfloat16_explanations_track_float32():
    """bf16 (the official runs' dtype) gives finite relevance close to the float32 one."""
    ids = random_ids(2, 12)
    f32 = explain(make_llama("gqa", "causal"), ids, method="pa_lrp")
    bf16 = explain(make_llama("gqa", "causal", dtype=torch.bfloat16), ids, method="pa_lrp")
    assert torch.isfinite(bf16.scores).all() and bf16.scores.dtype == torch.float32
    for a, b in zip(f32.scores, bf16.scores):
        corr = torch.corrcoef(torch.stack([a, b.float()]))[0, 1]
        assert corr > 0.9
