"""AtMan: the batched suppression equals a loop of single forwards, suppressing nothing changes nothing, the key
hook scales exactly one column of the pre-softmax scores, and the correlated-token factors follow Deb et al."""
import pytest
import torch

from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids
from palrp_bench import explain
from palrp_bench.attributors.atman import suppression_factors
from palrp_bench.lrp import rules
from palrp_bench.lrp.composites import GRAD_X_INPUT
from palrp_bench.models.registry import twin_for


def single_forward_logits(twin, prepared, b, key_scale, **options):
    """One forward of sample ``b`` alone with one row of key factors."""
    embeds = twin.embed(prepared.input_ids[b:b + 1])
    mask = None if prepared.attention_mask is None else prepared.attention_mask[b:b + 1]
    with torch.no_grad(), rules.attention_hooks(key_scale=key_scale[None]):
        return twin.forward(embeds, mask, prepared.last_index[b:b + 1], GRAD_X_INPUT, positional_sinks=False,
                            **options).logits[0]


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("score", ["cross_entropy", "logit"])
def test_batched_suppression_equals_a_loop_of_single_forwards(kind, score):
    model = make_llama("gqa", kind, dtype=torch.float64)
    ids = random_ids(2, 8, seed=4)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    p = 0.7
    rel = explain(model, ids, mask, method="atman", params={"suppression": p, "score": score}, batch_size=3)
    twin = twin_for(model)
    prepared = twin.prepare(ids, mask)
    for b in range(2):
        n = int(mask[b].sum())
        t = int(rel.target[b])
        read = (lambda z: torch.log_softmax(z, -1)[t]) if score == "cross_entropy" else (lambda z: z[t])
        reference = read(single_forward_logits(twin, prepared, b, torch.ones(8, dtype=torch.float64)))
        for i in range(n):
            scale = torch.ones(8, dtype=torch.float64)
            scale[i] = 1 - p
            expected = reference - read(single_forward_logits(twin, prepared, b, scale))
            assert torch.allclose(rel.scores[b, i].double(), expected, atol=1e-10), (b, i)
        assert not rel.scores[b, n:].any()
        assert int(rel.forward_passes[b]) == n + 1
    unbatched = explain(model, ids, mask, method="atman", params={"suppression": p, "score": score})
    assert torch.allclose(unbatched.scores, rel.scores, atol=1e-10)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_suppressing_nothing_changes_nothing(attention):
    model = make_llama("gqa", "causal", dtype=torch.float64)
    ids = random_ids(3, 7, seed=8)
    twin = twin_for(model)
    prepared = twin.prepare(ids)
    embeds = twin.embed(ids)
    with torch.no_grad():
        plain = twin.forward(embeds, None, prepared.last_index, GRAD_X_INPUT, positional_sinks=False,
                             attention=attention).logits
        with rules.attention_hooks(key_scale=torch.ones(3, 7, dtype=torch.float64)):
            hooked = twin.forward(embeds, None, prepared.last_index, GRAD_X_INPUT, positional_sinks=False,
                                  attention=attention).logits
    assert torch.equal(plain, hooked)
    rel = explain(model, ids, method="atman", params={"suppression": 0.0})
    assert not rel.scores.any()


def test_the_key_hook_scales_one_column_of_the_pre_softmax_scores():
    model = make_vit("plain", dtype=torch.float64)
    x = images(1)
    twin = twin_for(model)
    scale = torch.ones(1, 17, dtype=torch.float64)
    scale[0, 5] = 0.25

    def scores(key_scale):
        recorder = rules.AttentionRecorder()
        with torch.enable_grad(), rules.attention_hooks(recorder=recorder, key_scale=key_scale):
            twin.forward(x.clone().requires_grad_(True), GRAD_X_INPUT, attention="eager")
        return recorder.records[0][0].detach()  # first layer: the same input either way

    plain, scaled = scores(None), scores(scale)
    assert torch.allclose(scaled[..., 5], 0.25 * plain[..., 5], atol=1e-12)
    others = [j for j in range(17) if j != 5]
    assert torch.equal(scaled[..., others], plain[..., others])


def test_correlated_token_factors_follow_deb_et_al():
    features = torch.tensor([1, 2, 3])
    embeddings = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]], dtype=torch.float64)  # cos: 0.8, 0.0, 0.6
    f = suppression_factors(features, 4, suppression=0.9, threshold=0.5, embeddings=embeddings)
    own = 1 - 0.9
    expected = torch.tensor([[1, 1, 1, 1],
                             [1, own, (1 - own) * (1 - 0.8) + own, 1],
                             [1, (1 - own) * (1 - 0.8) + own, own, (1 - own) * (1 - 0.6) + own],
                             [1, 1, (1 - own) * (1 - 0.6) + own, own]], dtype=torch.float64)
    assert torch.allclose(f, expected, atol=1e-12)
    plain = suppression_factors(features, 4, suppression=0.9, threshold=None)
    assert torch.allclose(plain[1:, 1:], torch.eye(3, dtype=torch.float64) * (own - 1) + 1)


def test_atman_on_a_vit_suppresses_patch_tokens_and_records_its_cost():
    model = make_vit("plain", dtype=torch.float64)
    x = images(2)
    rel = explain(model, x, method="atman", params={"threshold": 0.1}, batch_size=5)
    assert rel.scores.shape == (2, 32, 32)
    assert rel.forward_passes.tolist() == [17, 17]  # 16 patches + the reference
    blocks = rel.extras["scores_signed"].reshape(2, 4, 8, 4, 8)
    assert torch.equal(blocks, blocks[:, :, :1, :, :1].expand_as(blocks))  # constant per patch
    one_by_one = explain(model, x, method="atman", params={"threshold": 0.1}, batch_size=1)
    assert torch.allclose(one_by_one.scores, rel.scores, atol=1e-10)
