"""Attention rollout, gradient rollout and Grad-CAM against slow references written from the equations, with the
attention weights (and their gradients) taken from the libraries' own eager forwards: Hugging Face
``output_attentions`` for a 2-layer (1-layer for Grad-CAM) tiny LLaMA, timm's attention-dropout input for a tiny
ViT."""
import numpy as np
import pytest
import torch

from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids
from palrp_bench import explain
from palrp_bench.methods.pixel_aggregation import paint_patches


def hf_attention(model, ids, mask):
    """Per-layer weights [B, H, T, T] of the library's eager forward, their gradient w.r.t. the explained logit
    (the arg-max at the last real token), and that target."""
    model.config._attn_implementation = "eager"
    ids = ids.masked_fill(mask == 0, model.config.pad_token_id)  # the library's classifier pools at the last non-pad
    out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    logits = out.logits
    last = mask.sum(1) - 1
    if logits.dim() == 3:
        logits = logits[torch.arange(ids.shape[0]), last]
    target = logits.argmax(-1)
    explained = logits.gather(1, target[:, None]).sum()
    grads = torch.autograd.grad(explained, out.attentions)
    return [a.detach() for a in out.attentions], [g.detach() for g in grads], target, last


def timm_attention(model, x):
    """Per-block weights of timm's own (non-fused) attention, read at the attention-dropout input."""
    weights = []
    hooks = []
    for blk in model.blocks:
        blk.attn.fused_attn = False
        hooks.append(blk.attn.attn_drop.register_forward_hook(lambda m, inp, out: weights.append(out)))
    try:
        logits = model(x)
    finally:
        for h in hooks:
            h.remove()
    target = logits.argmax(-1)
    grads = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), weights)
    return [w.detach() for w in weights], [g.detach() for g in grads], target


def reference_rollout(maps, valid, threshold, row):
    """Eq. 23 with the discard threshold, element by element: maps [L][T, T] (head-reduced), one sample."""
    t = maps[0].shape[0]
    r = np.eye(t)
    for a in maps:
        a = np.array(a, dtype=np.float64)
        if threshold < 1:
            q = np.quantile(a[valid], threshold)
            a = np.where(a > q, 0.0, a)
        new = np.zeros((t, t))
        for i in range(t):
            for j in range(t):
                new[i, j] = r[i, j] + sum(a[i, k] * r[k, j] for k in range(t))
        r = new
    return r[row]


def head_maps(weights, grads, b, gradient):
    out = []
    for w, g in zip(weights, grads):
        w, g = w[b].double().numpy(), g[b].double().numpy()
        out.append(np.maximum(g * w, 0).mean(0) if gradient else w.mean(0))
    return out


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("method", ["attn_rollout", "grad_attn_rollout"])
def test_rollout_matches_the_equations_on_a_2_layer_llama(kind, method):
    model = make_llama("gqa", kind, dtype=torch.float64)
    ids = random_ids(2, 9, seed=11)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    rel = explain(model, ids, mask, method=method)
    weights, grads, target, last = hf_attention(model, ids, mask)
    assert torch.equal(rel.target, target)
    for b in range(2):
        n = int(mask[b].sum())
        maps = [m[:n, :n] for m in head_maps(weights, grads, b, method == "grad_attn_rollout")]
        expected = reference_rollout(maps, np.tril(np.ones((n, n), dtype=bool)), 1.0, n - 1)
        np.testing.assert_allclose(rel.scores[b, :n].numpy(), expected, rtol=1e-5, atol=1e-7)
        assert not rel.scores[b, n:].any()


@pytest.mark.parametrize("method,threshold", [("attn_rollout", 0.99), ("attn_rollout", 0.7),
                                              ("grad_attn_rollout", 0.91), ("grad_attn_rollout", 1.0)])
def test_rollout_matches_the_equations_on_a_vit(method, threshold):
    model = make_vit("plain", dtype=torch.float64)
    x = images(2)
    rel = explain(model, x, method=method, params={"discard_threshold": threshold})
    weights, grads, target = timm_attention(model, x)
    assert torch.equal(rel.target, target)
    for b in range(2):
        maps = head_maps(weights, grads, b, method == "grad_attn_rollout")
        t = maps[0].shape[0]
        row = reference_rollout(maps, np.ones((t, t), dtype=bool), threshold, 0)
        patches = torch.from_numpy(row[1:]).reshape(1, 4, 4)
        expected = paint_patches(patches, (8, 8), (32, 32))[0]
        assert torch.allclose(rel.extras["scores_signed"][b].double(), expected, rtol=1e-9, atol=1e-12)


def test_discarding_changes_the_rollout():
    model = make_vit("plain", dtype=torch.float64)
    x = images(1)
    full = explain(model, x, method="attn_rollout", params={"discard_threshold": 1.0}).scores
    cut = explain(model, x, method="attn_rollout", params={"discard_threshold": 0.5}).scores
    assert not torch.allclose(full, cut)


def reference_grad_cam(a, g, row, keys):
    """Grad-CAM by hand: w_h = mean_k G[h, row, k] over the keys, cam_k = mean_h w_h A[h, row, k]."""
    heads = a.shape[0]
    w = [sum(g[h, row, k] for k in keys) / len(keys) for h in range(heads)]
    return np.array([sum(w[h] * a[h, row, k] for h in range(heads)) / heads for k in keys])


@pytest.mark.parametrize("kind", ["causal", "classifier"])
def test_grad_cam_by_hand_on_a_1_layer_llama(kind):
    model = make_llama("mha", kind, dtype=torch.float64, num_hidden_layers=1)
    ids = random_ids(2, 7, seed=2)
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    rel = explain(model, ids, mask, method="grad_cam")
    relu = explain(model, ids, mask, method="grad_cam", params={"relu": True})
    weights, grads, _, last = hf_attention(model, ids, mask)
    assert len(weights) == 1
    for b in range(2):
        n = int(mask[b].sum())
        expected = reference_grad_cam(weights[0][b].numpy(), grads[0][b].numpy(), n - 1, list(range(n)))
        np.testing.assert_allclose(rel.scores[b, :n].numpy(), expected, rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(relu.scores[b, :n].numpy(), np.maximum(expected, 0), rtol=1e-5, atol=1e-9)
    assert (rel.scores < 0).any()  # signed by default


def test_grad_cam_by_hand_on_a_1_layer_vit():
    model = make_vit("plain", dtype=torch.float64)
    model.blocks = model.blocks[:1]
    x = images(2)
    rel = explain(model, x, method="grad_cam")
    weights, grads, _ = timm_attention(model, x)
    for b in range(2):
        cam = reference_grad_cam(weights[0][b].numpy(), grads[0][b].numpy(), 0, list(range(1, 17)))
        expected = paint_patches(torch.from_numpy(cam).reshape(1, 4, 4), (8, 8), (32, 32))[0]
        assert torch.allclose(rel.extras["scores_signed"][b].double(), expected, rtol=1e-9, atol=1e-12)
