"""The AttnLRP perturbation protocol (appendix B.2): step grids, orders, the insertion / flipping equivalence, and
the batched curves against a loop that builds every perturbed input by hand and runs the library model."""
import numpy as np
import pytest
import torch

from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids
from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.procedures.attnlrp_perturbation import (ForwardChunk, feature_order, logit_curves, perturbed_keep,
                                                         pixel_logit_curves, step_counts, token_logit_curves)
from palrp_bench.metrics.delta_a import curve_area


def test_step_counts_per_feature_and_coarsened():
    assert step_counts(4).tolist() == [0, 1, 2, 3, 4]
    assert step_counts(4, max_steps=10).tolist() == [0, 1, 2, 3, 4]
    assert step_counts(10, max_steps=4).tolist() == [0, 3, 5, 7, 10]  # round(2.5) up, mirrored: 10 - 3
    for n, s in [(50176, 256), (7, 3), (101, 10), (5, 4)]:
        c = step_counts(n, s)
        assert c[0] == 0 and c[-1] == n and len(c) == s + 1 and (np.diff(c) > 0).all()
        mirrored = c[::-1] == n - c
        if n % 2 and not s % 2:  # an even S with an odd N has no integer middle point: only it is off
            assert mirrored.sum() == s and not mirrored[s // 2]
        else:
            assert mirrored.all()  # symmetric grid
    with pytest.raises(BadInputError):
        step_counts(0)


def test_orders_and_keep_masks_by_hand():
    scores = np.array([0.5, 2.0, -1.0, 2.0])
    assert feature_order(scores).tolist() == [1, 3, 0, 2]  # ties by index
    keep = perturbed_keep(feature_order(scores), step_counts(4), "flipping")
    assert keep["morf"].int().tolist() == [[1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    assert keep["lerf"].int().tolist() == [[1, 1, 1, 1], [1, 1, 0, 1], [0, 1, 0, 1], [0, 1, 0, 0], [0, 0, 0, 0]]
    inserted = perturbed_keep(feature_order(scores), step_counts(4), "insertion")
    assert inserted["morf"].int().tolist() == [[0, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 1], [1, 1, 0, 1], [1, 1, 1, 1]]
    with pytest.raises(BadInputError):
        perturbed_keep(feature_order(scores), step_counts(4), "deletion")


@pytest.mark.parametrize("max_steps", [None, 3])
def test_insertion_morf_is_flipping_lerf_on_the_same_inputs(max_steps):
    """AttnLRP paper B.2: X^I_MoRF = X^F_LeRF (and vice versa), so A^I_MoRF = A^F_LeRF and delta_a agrees."""
    scores = np.random.default_rng(0).normal(size=7)
    counts = step_counts(7, max_steps)
    flip = perturbed_keep(feature_order(scores), counts, "flipping")
    ins = perturbed_keep(feature_order(scores), counts, "insertion")
    assert torch.equal(ins["morf"], flip["lerf"].flip(0)) and torch.equal(ins["lerf"], flip["morf"].flip(0))
    model = make_llama("gqa", "classifier", dtype=torch.float64)
    ids = random_ids(2, 7, seed=9)
    s = torch.from_numpy(np.stack([scores, -scores]))
    f = token_logit_curves(model, ids, None, s, [0, 1], process="flipping", max_steps=max_steps)
    i = token_logit_curves(model, ids, None, s, [0, 1], process="insertion", max_steps=max_steps)
    for cf, ci in zip(f, i):
        np.testing.assert_allclose(ci.morf, cf.lerf[::-1], atol=1e-12)
        a_morf_f, a_lerf_f = cf.areas()
        a_morf_i, a_lerf_i = ci.areas()
        assert a_morf_i == pytest.approx(a_lerf_f, abs=1e-12) and a_lerf_i == pytest.approx(a_morf_f, abs=1e-12)
        assert a_morf_i - a_lerf_i == pytest.approx(a_lerf_f - a_morf_f, abs=1e-12)


@pytest.mark.parametrize("kind", ["causal", "classifier"])
def test_token_curves_against_a_hand_loop_on_the_library_model(kind):
    model = make_llama("gqa", kind, dtype=torch.float64)
    ids = random_ids(2, 6, seed=1)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    scores = torch.tensor([[0.3, -0.2, 0.9, 0.1, -0.5, 0.0], [1.0, 0.2, -0.4, 0.7, 9.0, 9.0]], dtype=torch.float64)
    targets = [3, 1] if kind == "causal" else [1, 0]
    curves = token_logit_curves(model, ids, mask, scores, targets, process="insertion", batch_size=4)
    for b, c in enumerate(curves):
        n = int(mask[b].sum())
        embeds = model.get_input_embeddings()(ids[b:b + 1, :n]).detach()
        order = np.argsort(-scores[b, :n].numpy(), kind="stable")
        for name, ranking in (("morf", order), ("lerf", order[::-1].copy())):
            expected = []
            for k in range(n + 1):
                x = torch.zeros_like(embeds)
                x[0, ranking[:k]] = embeds[0, ranking[:k]]
                with torch.no_grad():
                    if kind == "causal":
                        logits = model(inputs_embeds=x).logits[0, -1]
                    else:
                        logits = model.score(model.model(inputs_embeds=x).last_hidden_state[0, -1])
                expected.append(float(logits[targets[b]]))
            np.testing.assert_allclose(getattr(c, name), expected, rtol=1e-9, atol=1e-9)
        assert c.fractions.tolist() == [k / n for k in range(n + 1)]


def test_a_chunk_out_of_memory_is_retried_in_halves(caplog):
    """A device with memory for 3 rows: the 64-row chunks are retried 32, 16, 8, 4, 2 at a time (one warning each),
    the curves equal those of one unchunked call (to float64 rounding); other errors, and a single row out of memory, go to the caller."""
    rng = np.random.default_rng(0)
    scores, weights = rng.normal(size=40), torch.as_tensor(rng.normal(size=40))
    sizes = []

    def forward(keep, limit=None):
        sizes.append(keep.shape[0])
        if limit is not None and keep.shape[0] > limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return keep.double() @ weights

    whole = logit_curves(forward, scores, "insertion", None, None)
    sizes.clear()
    with caplog.at_level("WARNING"):
        chunked = logit_curves(lambda k: forward(k, limit=3), scores, "insertion", None, 64)
    for name in ("morf", "lerf"):  # float64 sums of 40 terms, rounded in another order per chunk size
        np.testing.assert_allclose(getattr(chunked, name), getattr(whole, name), rtol=0, atol=1e-12)
    assert sizes[:6] == [64, 32, 16, 8, 4, 2] and max(sizes[6:]) == 2 and sum(sizes[5:]) == 41 + 39
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 5
    shared = ForwardChunk(64)  # the next sample of the batch starts at the size that worked
    logit_curves(lambda k: forward(k, limit=3), scores, "insertion", None, shared)
    sizes.clear()
    again = logit_curves(lambda k: forward(k, limit=3), scores, "insertion", None, shared)
    assert shared.rows == 2 and max(sizes) == 2
    np.testing.assert_allclose(again.morf, whole.morf, rtol=0, atol=1e-12)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        logit_curves(lambda k: forward(k, limit=0), scores, "insertion", None, 64)
    with pytest.raises(ValueError, match="not memory"):
        logit_curves(lambda k: (_ for _ in ()).throw(ValueError("not memory")), scores, "insertion", None, 64)


def test_pixel_curves_against_a_hand_loop_on_the_library_model():
    model = make_vit("plain", dtype=torch.float64)
    x = images(2)
    maps = torch.randn(2, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    curves = pixel_logit_curves(model, x, maps, [1, 4], process="flipping", max_steps=8, batch_size=5)
    counts = step_counts(1024, 8)
    for b, c in enumerate(curves):
        order = np.argsort(-maps[b].reshape(-1).numpy(), kind="stable")
        for name, ranking in (("morf", order), ("lerf", order[::-1].copy())):
            expected = []
            for n in counts:
                img = x[b].clone().reshape(3, -1)
                img[:, ranking[:n]] = 0.0
                with torch.no_grad():
                    expected.append(float(model(img.reshape(1, 3, 32, 32))[0, [1, 4][b]]))
            np.testing.assert_allclose(getattr(c, name), expected, rtol=1e-9, atol=1e-9)
        assert c.morf[0] == c.lerf[0] and c.morf[-1] == c.lerf[-1]
        a_morf, a_lerf = c.areas()
        assert a_morf == pytest.approx(curve_area(c.morf, counts / 1024))


@pytest.mark.parametrize("family, head", [("gemma2", "causal"), ("bert", "classifier")])
def test_text_curves_read_the_logit_the_model_outputs(family, head):
    """The full-input end of a curve is the model's own logit, read as the PA-LRP protocol reads it: Gemma 2's final
    soft-capping applied, BERT's classifier pooling its first token (TextReadout, shared with nlp_perturbation)."""
    if family == "gemma2":
        from models.tiny_families import make_model, random_ids as family_ids

        model, ids = make_model("gemma2", "causal", final_logit_softcapping=3.0), family_ids(1, 6)
        assert model.config.final_logit_softcapping == 3.0
        with torch.no_grad():
            own = model(ids).logits[0, -1]
    else:
        from models.families import make_text, random_ids as family_ids

        model, ids = make_text("bert", "classifier", dtype=torch.float32), family_ids(1, 6)
        with torch.no_grad():
            own = model(ids).logits[0]
    target = int(own.argmax())
    (curves,) = token_logit_curves(model, ids, None, torch.arange(6.0)[None], [target], process="insertion")
    assert curves.morf[-1] == pytest.approx(float(own[target]), rel=1e-5, abs=1e-6)
