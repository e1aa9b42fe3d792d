"""The baselines of the AttnLRP paper's Table 1 on T5 (docs/baselines.md, "T5"), on tiny random T5 models built from
the shipped configs, checked against the unmodified library model:

* every method of the Flan-T5 column (and the gradient norms) returns scores over the encoder tokens ``[B, T_enc]``,
  zero at padding, batch and padding invariant; ALTI / ALTI-Logit refuse in one line (tests/models/test_t5_twin.py);
* Integrated Gradients: completeness, and equal to a direct Captum call on the library model's ``inputs_embeds``;
* SmoothGrad with noise 0: the plain gradient (``times_input: false``) / Gradient x Input (``true``);
* rollout and gradient rollout: equal to Chefer et al. (2021a)'s encoder-decoder rules written out on the
  library's own encoder, decoder and cross-attention weights (``output_attentions``) and their gradient, per sample
  on its real tokens; a closed form for one layer each; Grad-CAM: equal to Chefer et al.'s encoder-decoder rule
  written out on the library's last cross-attention and its gradient;
* AtMan: equal to a loop of single library forwards whose encoder self-attention and cross-attention keys of the
  suppressed token are scaled (forward hooks on the library's ``k`` projections); suppressing nothing changes
  nothing; the key hook scales the suppressed column in every encoder self- and cross-attention call and nowhere
  else.

Tolerances: float64 throughout with the library's T5LayerNorm statistics in float64 (``float64_library_norm``), so
twin and library agree to ~1e-15 relative; comparisons use 1e-10 relative to the largest value compared.
"""
import copy

import pytest
import torch
from captum.attr import IntegratedGradients

from models.tiny_t5 import PAD, VARIANTS, float64_library_norm, make_t5, padded
from palrp_bench import explain
from palrp_bench.lrp import rules
from palrp_bench.lrp.composites import GRAD_X_INPUT
from palrp_bench.models.registry import twin_for

TABLE1 = ("grad_x_input", "integrated_gradients", "smoothgrad", "grad_cam", "attn_rollout", "grad_attn_rollout",
          "atman", "cp_lrp", "attnlrp")
FAST = {"integrated_gradients": {"n_steps": 8}, "smoothgrad": {"n_samples": 4}}
TOL = 1e-10


@pytest.fixture(autouse=True)
def _float64_norm(monkeypatch):
    float64_library_norm(monkeypatch)


def close(ours, theirs, tol=TOL):
    ours, theirs = ours.detach().double(), theirs.detach().double()
    scale = max(float(theirs.abs().max()), 1e-30)
    return float((ours - theirs).abs().max()) <= tol * scale


def batch(model, enc_side="right", dec_side="right"):
    """Encoder lengths 9 and 6, decoder lengths 3 and 5 (start token first), padded on the given sides."""
    ids, mask, _ = padded(model, [9, 6], enc_side, seed=3)
    dec, dmask, _ = padded(model, [3, 5], dec_side, seed=5, start=PAD)
    return ids, mask, dec, dmask


def run(model, method, ids, mask, dec, dmask, **kwargs):
    params = {**FAST.get(method, {}), **kwargs.pop("params", {})}
    return explain(model, ids, mask, decoder_input_ids=dec, decoder_attention_mask=dmask, method=method,
                   params=params or None, **kwargs)


def library(model, ids, mask, dec, dmask, embeds=None, **kwargs):
    """The library's logits at each sample's last real decoder position, ``[B, V]``, and its full output."""
    inputs = dict(inputs_embeds=embeds) if embeds is not None else dict(input_ids=ids)
    out = model(**inputs, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dmask,
                use_cache=False, **kwargs)
    positions = torch.arange(dec.shape[1])
    last = (positions * dmask).argmax(-1) if dmask is not None else torch.full((dec.shape[0],), dec.shape[1] - 1)
    return out.logits[torch.arange(dec.shape[0]), last], out


# ------------------------------------------------------------------------------------------- 1. the interface
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_table1_method_scores_the_encoder_tokens(variant):
    model = make_t5(variant, torch.float64)
    ids, mask, dec, dmask = batch(model)
    logits, _ = library(model, ids, mask, dec, dmask)
    for method in TABLE1 + ("gradient_l1", "gradient_l2"):
        # Grad-CAM's clamp at 0 can leave a random model's sample with no positive score: read it signed here
        params = {"relu": False} if method == "grad_cam" else {}
        e = run(model, method, ids, mask, dec, dmask, params=params)
        assert e.scores.shape == ids.shape, method
        assert not e.scores[~mask.bool()].any(), method
        assert e.scores[mask.bool()].abs().max() > 0, method
        assert torch.equal(e.target, logits.argmax(-1)), method
        assert close(e.logit, logits.max(-1).values), method
        assert e.extras["explained_index"].tolist() == [2, 4], method
    atman = run(model, "atman", ids, mask, dec, dmask)
    assert atman.forward_passes.tolist() == [10, 7]  # one per real encoder token, plus the reference


def test_every_other_method_runs_or_refuses_in_one_line():
    """Every registered method either explains T5 over the encoder tokens or refuses it in one line (ALTI and
    ALTI-Logit; the ViT composites)."""
    from palrp_bench.errors import BadInputError
    from palrp_bench.methods.registry import METHODS

    runs_on_t5 = {name for name, m in METHODS.items()
                  if "tokens" in m.modalities and "seq2seq" not in m.refused_model_kinds}

    model = make_t5("tiny_t5_random", torch.float64)
    ids, mask, dec, dmask = batch(model)
    refused = []
    for method in sorted(METHODS):
        if method in runs_on_t5:
            assert run(model, method, ids, mask, dec, dmask).scores.shape == ids.shape, method
            continue
        with pytest.raises(BadInputError) as err:
            run(model, method, ids, mask, dec, dmask)
        assert "\n" not in str(err.value), method
        refused.append(method)
    assert {"alti", "alti_logit", "attnlrp_gamma_b4", "cp_lrp_gamma_b4"} <= set(refused)
    assert not set(TABLE1) & set(refused)


@pytest.mark.parametrize("method", TABLE1[1:7])
def test_baselines_are_batch_and_padding_invariant(method):
    """Each sample alone and unpadded scores as in the padded batch; SmoothGrad draws its noise for the padded
    shape, so it is compared alone with its padding kept (batch invariance only)."""
    model = make_t5("tiny_t5_random", torch.float64)
    ids, mask, dec, dmask = batch(model, "left", "right")
    together = run(model, method, ids, mask, dec, dmask)
    for b in range(2):
        keep, dkeep = mask[b].bool(), dmask[b].bool()
        if method == "smoothgrad":
            keep = torch.ones_like(keep)
            alone = run(model, method, ids[b:b + 1], mask[b:b + 1], dec[b:b + 1, dkeep], None)
        else:
            alone = run(model, method, ids[b:b + 1, keep], None, dec[b:b + 1, dkeep], None)
        assert close(together.scores[b, keep], alone.scores[0]), (method, b)


# -------------------------------------------------------------------------------- 2. IG and SmoothGrad (Captum)
def test_integrated_gradients_is_complete_and_equals_captum_on_the_library():
    """Completeness: sum of the scores = f(x) - f(0) (zero encoder embeddings, decoder inputs fixed). The
    T5LayerNorm epsilon is raised to 0.1, as for LLaMA's RMSNorm in test_gradient_baselines.py: with 1e-6 the
    first norm makes f jump within a ~ 1e-3 of the zero baseline, which no quadrature of tens of nodes resolves.
    Measured: 7e-7 relative with 64 Gauss-Legendre nodes (1-2% with 16), so 1e-4 leaves the quadrature room."""
    model = make_t5("tiny_t5_random", torch.float64, layer_norm_epsilon=0.1)
    ids, mask, dec, dmask = batch(model)
    n = 64
    e = run(model, "integrated_gradients", ids, mask, dec, dmask, params={"n_steps": n})
    embeds = model.get_input_embeddings()(ids).detach()
    with torch.no_grad():
        at_x, _ = library(model, ids, mask, dec, dmask, embeds=embeds)
        at_0, _ = library(model, ids, mask, dec, dmask, embeds=torch.zeros_like(embeds))
    idx = torch.arange(2)
    gap = at_x[idx, e.target] - at_0[idx, e.target]
    assert gap.abs().min() > 0.1
    assert torch.allclose(e.scores.sum(-1), gap, rtol=1e-4, atol=0), (e.scores.sum(-1), gap)

    def forward(x, rows):
        logits, _ = library(model, ids[rows], mask[rows], dec[rows], dmask[rows], embeds=x)
        return logits[torch.arange(len(rows)), e.target[rows]]

    direct = IntegratedGradients(forward).attribute(embeds, baselines=0.0, additional_forward_args=(idx,),
                                                    n_steps=n, method="gausslegendre")
    assert close(e.scores, direct.sum(-1) * mask)


def test_smoothgrad_without_noise_is_the_gradient_or_gradient_x_input():
    model = make_t5("tiny_t5_random", torch.float64)
    ids, mask, dec, dmask = batch(model)
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    logits, _ = library(model, ids, mask, dec, dmask, embeds=embeds)
    target = logits.argmax(-1)
    (grad,) = torch.autograd.grad(logits[torch.arange(2), target].sum(), embeds)
    grad = grad * mask[..., None]
    plain = run(model, "smoothgrad", ids, mask, dec, dmask, params={"sigma": 0.0, "n_samples": 3})
    times = run(model, "smoothgrad", ids, mask, dec, dmask,
                params={"sigma": 0.0, "n_samples": 3, "times_input": True})
    gxi = run(model, "grad_x_input", ids, mask, dec, dmask)
    assert close(plain.scores, grad.sum(-1))
    assert close(times.scores, (grad * embeds).sum(-1))
    assert close(times.scores, gxi.semantic)
    assert close(run(model, "gradient_l1", ids, mask, dec, dmask).scores, grad.abs().sum(-1))
    noisy = run(model, "smoothgrad", ids, mask, dec, dmask, params={"sigma": 0.1, "n_samples": 3})
    assert not close(noisy.scores, plain.scores, tol=1e-3)


# ------------------------------------------------------------------------------ 3. attention-map baselines
def library_attention(model, ids, mask, dec, dmask):
    """The library's attention weights per layer ``[B, H, Tq, Tk]`` (``output_attentions``: ``encoder``,
    ``decoder`` self-attention, ``cross``) and their gradient with respect to the explained (arg-max) logit at the
    last real decoder position, as dicts by kind."""
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    logits, out = library(eager, ids, mask, dec, dmask, output_attentions=True)
    maps = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    assert len(maps["encoder"]) == eager.config.num_layers
    assert len(maps["decoder"]) == len(maps["cross"]) == eager.config.num_decoder_layers
    flat = [a for kind in maps.values() for a in kind]
    grads = iter(torch.autograd.grad(logits.max(-1).values.sum(), flat))
    return ({k: [a.detach() for a in v] for k, v in maps.items()},
            {k: [next(grads) for _ in v] for k, v in maps.items()})


def explicit_encoder_decoder_rollout(maps, grads, mask, dmask, b):
    """Sample ``b``'s rollout by Chefer et al. (2021a)'s encoder-decoder rules, written out on its real tokens only
    (the library's padded rows and columns sliced away): ``A = E_h(A^h)`` or ``E_h((G^h * A^h)^+)``;
    ``R^ss = R^tt = I``, ``R^ts = 0``; encoder layer ``R^ss += A R^ss``; decoder self-attention ``R^tt += A R^tt``,
    ``R^ts += A R^ts``; cross-attention ``R^ts += Rbar(R^tt)^T A Rbar(R^ss)``, ``Rbar`` row by row: ``(R - I)_i``
    over its sum (0 where the sum is 0) plus ``e_i``. Returns the last real decoder row of ``R^ts``."""
    enc, de = torch.nonzero(mask[b]).reshape(-1), torch.nonzero(dmask[b]).reshape(-1)

    def head_mean(kind, layer, rows, cols):
        a = maps[kind][layer][b][:, rows][:, :, cols]
        if grads is not None:
            a = (grads[kind][layer][b][:, rows][:, :, cols] * a).clamp(min=0)
        return a.mean(0)

    def bar(r):
        out = torch.zeros_like(r)
        for i in range(r.shape[0]):
            row = r[i].clone()
            row[i] -= 1
            total = float(row.sum())
            out[i] = row / total if total != 0 else 0.0
            out[i, i] += 1
        return out

    r_ss = torch.eye(len(enc), dtype=torch.float64)
    for layer in range(len(maps["encoder"])):
        r_ss = r_ss + head_mean("encoder", layer, enc, enc) @ r_ss
    r_tt, r_ts = torch.eye(len(de), dtype=torch.float64), torch.zeros(len(de), len(enc), dtype=torch.float64)
    for layer in range(len(maps["decoder"])):
        a = head_mean("decoder", layer, de, de)
        r_tt, r_ts = r_tt + a @ r_tt, r_ts + a @ r_ts
        r_ts = r_ts + bar(r_tt).T @ head_mean("cross", layer, de, enc) @ bar(r_ss)
    scores = torch.zeros(mask.shape[1], dtype=torch.float64)
    scores[enc] = r_ts[-1]
    return scores


@pytest.mark.parametrize("enc_side,dec_side", [("right", "right"), ("left", "left"), ("left", "right")])
def test_rollouts_equal_the_encoder_decoder_rules_on_the_library_attention(enc_side, dec_side):
    """Both rollouts of a padded batch equal the explicit rules applied to the library's own encoder, decoder and
    cross-attention weights (and their autograd gradient) of each sample's real tokens."""
    model = make_t5("tiny_t5_random", torch.float64, num_layers=3, num_decoder_layers=2)
    ids, mask, dec, dmask = batch(model, enc_side, dec_side)
    maps, grads = library_attention(model, ids, mask, dec, dmask)
    for method, g in (("attn_rollout", None), ("grad_attn_rollout", grads)):
        e = run(model, method, ids, mask, dec, dmask)
        expected = torch.stack([explicit_encoder_decoder_rollout(maps, g, mask, dmask, b) for b in range(2)])
        assert expected.abs().max() > 0, method
        assert close(e.scores, expected), method
        assert e.backward_passes.tolist() == [int(g is not None)] * 2, method


def test_rollout_of_one_encoder_and_one_decoder_layer_in_closed_form():
    """One layer each: ``R^ss = I + A_e`` and ``R^tt = I + A_d`` have rows of ``R - I`` summing to 1, so
    ``Rbar = R``; the causal ``A_d`` makes the explained (last) column of ``R^tt`` zero above its diagonal, so
    the scores are ``(1 + A_d[i, i]) A_c[i] (I + A_e)`` and sum to ``2 (1 + A_d[i, i])``."""
    model = make_t5("tiny_t5_random", torch.float64, num_layers=1, num_decoder_layers=1)
    ids, mask, dec, dmask = batch(model, "right", "right")
    maps, _ = library_attention(model, ids, mask, dec, dmask)
    e = run(model, "attn_rollout", ids, mask, dec, dmask)
    for b, i in enumerate(e.extras["explained_index"].tolist()):
        a_e, a_d, a_c = (maps[kind][0][b].mean(0) for kind in ("encoder", "decoder", "cross"))
        expected = (1 + a_d[i, i]) * (a_c[i] @ (torch.eye(ids.shape[1], dtype=torch.float64) + a_e))
        assert close(e.scores[b], expected * mask[b]), b
        assert abs(float(e.scores[b].sum()) - 2 * (1 + float(a_d[i, i]))) <= 1e-12
        assert float(a_d[i, i]) < 1 - 1e-6  # the decoder's own mixing matters here


def test_residual_normalisation_keeps_unmixed_rows_and_rescales_mixed_ones():
    from palrp_bench.attributors.rollout import residual_normalised

    r = torch.eye(3, dtype=torch.float64)[None].repeat(1, 1, 1)
    r[0, 1, :] += torch.tensor([0.5, 1.0, 0.5], dtype=torch.float64)  # mixed row: (R - I) row sums to 2
    out = residual_normalised(r)
    assert torch.equal(out[0, 0], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))  # unmixed: e_i, no NaN
    assert torch.allclose(out[0, 1], torch.tensor([0.25, 1.5, 0.25], dtype=torch.float64), atol=1e-15, rtol=0)


def test_rollouts_need_the_decoder_and_discard_outliers():
    """The encoder-decoder rollout reads the decoder: another decoder input changes ``attn_rollout`` (which reads no
    logit); a discard threshold below 1 zeroes the largest entries of every map, which changes the scores."""
    model = make_t5("tiny_t5_random", torch.float64)
    ids, mask, dec, dmask = batch(model)
    e = run(model, "attn_rollout", ids, mask, dec, dmask)
    other = dec.clone()
    other[:, 1] = 4 + (other[:, 1] + 1) % (model.config.vocab_size - 4)
    assert not close(run(model, "attn_rollout", ids, mask, other, dmask).scores, e.scores, tol=1e-6)
    for method in ("attn_rollout", "grad_attn_rollout"):
        full = run(model, method, ids, mask, dec, dmask)
        dropped = run(model, method, ids, mask, dec, dmask, params={"discard_threshold": 0.9})
        assert not close(dropped.scores, full.scores, tol=1e-6), method


def explicit_cross_attention_grad_cam(maps, grads, mask, dmask, b):
    """Sample ``b``'s Grad-CAM by Chefer et al.'s encoder-decoder rule, written out on its real tokens: the last
    cross-attention layer's heads ``A^h`` ``[Td, Te]`` and gradients ``G^h``, each head weighted by its gradient
    averaged over every real decoder row and encoder key (their code), the weighted heads averaged, clamped at 0,
    and the explained (last real) decoder row read; then multiplied by the number of real decoder rows (the rows
    other than the explained one have zero gradient in the last layer, so the mean over rows is the explained row's
    mean divided by that number: the factor the attributor leaves out)."""
    enc, de = torch.nonzero(mask[b]).reshape(-1), torch.nonzero(dmask[b]).reshape(-1)
    a = maps["cross"][-1][b][:, de][:, :, enc]
    g = grads["cross"][-1][b][:, de][:, :, enc]
    assert g[:, :-1].abs().max() == 0                      # only the explained row reaches the logit
    cam = (g.mean(dim=(1, 2), keepdim=True) * a).mean(0).clamp(min=0)
    scores = torch.zeros(mask.shape[1], dtype=torch.float64)
    scores[enc] = cam[-1] * len(de)
    return scores


@pytest.mark.parametrize("enc_side,dec_side", [("right", "right"), ("left", "left"), ("left", "right")])
def test_grad_cam_reads_the_explained_row_of_the_last_cross_attention(enc_side, dec_side):
    model = make_t5("tiny_t5_random", torch.float64, num_layers=2, num_decoder_layers=2)
    ids, mask, dec, dmask = batch(model, enc_side, dec_side)
    maps, grads = library_attention(model, ids, mask, dec, dmask)
    expected = torch.stack([explicit_cross_attention_grad_cam(maps, grads, mask, dmask, b) for b in range(2)])
    e = run(model, "grad_cam", ids, mask, dec, dmask)
    assert expected.abs().max() > 0 and (expected == 0).sum() > (mask == 0).sum()   # the clamp removed something
    assert close(e.scores, expected)
    signed = run(model, "grad_cam", ids, mask, dec, dmask, params={"relu": False})
    assert (signed.scores < 0).any() and close(signed.scores.clamp(min=0), e.scores)


# ------------------------------------------------------------------------------------------------- 4. AtMan
def suppressed_library_logits(model, ids, mask, dec, dmask, factors):
    """Library logits at the last real decoder position with the keys of the encoder tokens multiplied by
    ``factors`` ``[B, T_enc]`` in every encoder self-attention and every cross-attention (forward hooks on the
    library's ``k`` projections; the decoder's self-attention untouched)."""
    def scale(module, args, out):
        return out * factors[:, :, None].to(out.dtype)

    modules = [blk.layer[0].SelfAttention.k for blk in model.encoder.block]
    modules += [blk.layer[1].EncDecAttention.k for blk in model.decoder.block]
    handles = [m.register_forward_hook(scale) for m in modules]
    try:
        with torch.no_grad():
            return library(model, ids, mask, dec, dmask)[0]
    finally:
        for h in handles:
            h.remove()


@pytest.mark.parametrize("score", ["cross_entropy", "logit"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_atman_batched_equals_a_loop_of_single_library_forwards(variant, score):
    model = make_t5(variant, torch.float64)
    ids, mask, dec, dmask = batch(model, "left", "right")
    p = 0.9
    e = run(model, "atman", ids, mask, dec, dmask, params={"suppression": p, "score": score}, batch_size=4)
    read = (lambda z: torch.log_softmax(z, -1)) if score == "cross_entropy" else (lambda z: z)
    for b in range(2):
        one = lambda f: read(suppressed_library_logits(model, ids[b:b + 1], mask[b:b + 1], dec[b:b + 1],  # noqa
                                                       dmask[b:b + 1], f[None]))[0, int(e.target[b])]
        reference = one(torch.ones(ids.shape[1], dtype=torch.float64))
        expected = torch.zeros(ids.shape[1], dtype=torch.float64)
        for i in torch.nonzero(mask[b]).reshape(-1).tolist():
            f = torch.ones(ids.shape[1], dtype=torch.float64)
            f[i] = 1 - p
            expected[i] = reference - one(f)
        assert expected.abs().max() > 1e-6
        assert close(e.scores[b], expected), b
    unbatched = run(model, "atman", ids, mask, dec, dmask, params={"suppression": p, "score": score})
    assert close(unbatched.scores, e.scores)


def test_atman_suppressing_nothing_changes_nothing():
    model = make_t5("tiny_t5_random", torch.float64)
    ids, mask, dec, dmask = batch(model)
    e = run(model, "atman", ids, mask, dec, dmask, params={"suppression": 0.0, "score": "logit"})
    assert e.scores.abs().max() <= 1e-12 * float(e.logit.abs().max())
    twin = twin_for(model)
    prepared = twin.prepare(ids, mask, dec, dmask)
    for attention in ("sdpa", "eager"):
        with torch.no_grad():
            plain = twin.run(prepared, GRAD_X_INPUT, positional_sinks=False, attention=attention).logits
            with rules.attention_hooks(key_scale=torch.ones(ids.shape, dtype=torch.float64),
                                       key_scale_sites=twin.feature_key_sites):
                ones = twin.run(prepared, GRAD_X_INPUT, positional_sinks=False, attention=attention).logits
        assert torch.equal(plain, ones), attention


def test_atman_scales_the_column_in_every_encoder_and_cross_attention_and_nowhere_else():
    """Record every attention call's pre-softmax scores (eager) and the library projections' ``q`` and ``k`` under
    the key hook: in every encoder self-attention and cross-attention call the scores are ``Q (f * K)^T + bias``,
    in every decoder self-attention ``Q K^T + bias``; ``f`` suppresses a different token per sample."""
    model = make_t5("tiny_t5_random", torch.float64, num_layers=3, num_decoder_layers=2)
    ids, mask, dec, dmask = batch(model, "right", "left")
    twin = twin_for(model)
    prepared = twin.prepare(ids, mask, dec, dmask)
    factors = torch.ones(ids.shape, dtype=torch.float64)
    factors[0, 2], factors[1, 5] = 0.3, 0.3
    calls = [(blk.layer[0].SelfAttention, "encoder") for blk in model.encoder.block]
    for blk in model.decoder.block:
        calls += [(blk.layer[0].SelfAttention, "decoder"), (blk.layer[1].EncDecAttention, "cross")]
    seen = {}
    handles = [proj.register_forward_hook(lambda m, a, out: seen.__setitem__(m, out))
               for attn, _ in calls for proj in (attn.q, attn.k)]
    recorder = rules.AttentionRecorder()
    try:
        with rules.attention_hooks(recorder=recorder, key_scale=factors,
                                   key_scale_sites=twin.feature_key_sites):
            twin.run(prepared, GRAD_X_INPUT, positional_sinks=False, attention="eager")
    finally:
        for h in handles:
            h.remove()
    assert recorder.sites == [site for _, site in calls]
    te, td = ids.shape[1], dec.shape[1]
    bias = {"encoder": twin.stack_bias(twin.encoder, te, None, causal=False),
            "decoder": twin.stack_bias(twin.decoder, td, None, causal=False), "cross": 0.0}
    for (attn, site), (scores, _, valid) in zip(calls, recorder.records):
        q, k = twin.heads_of(seen[attn.q]), twin.heads_of(seen[attn.k])
        f = factors if site != "decoder" else torch.ones(k.shape[0], k.shape[2], dtype=torch.float64)
        expected = q @ (k * f[:, None, :, None]).transpose(-1, -2) + bias[site]
        unscaled = q @ k.transpose(-1, -2) + bias[site]
        valid = torch.broadcast_to(valid, scores.shape) if valid is not None else torch.ones_like(scores).bool()
        assert close(scores[valid], expected[valid]), site
        if site != "decoder":
            assert not close(scores[valid], unscaled[valid], tol=1e-6), site
