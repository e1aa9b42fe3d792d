"""The gradient norms ``gradient_l1`` / ``gradient_l2`` against a slow reference: autograd on the Hugging Face model
itself (``inputs_embeds``), one sample at a time, for a tiny LLaMA, GPT-2 and BERT masked LM, with and without a
foil; and on a ViT's pixels against timm."""
import pytest
import torch

from models.families import make_text, padded_batch
from models.test_vit_twin import images, make_vit
from models.tiny_llama import make_llama, random_ids
from palrp_bench import explain

D = torch.float64


def tiny(name: str):
    """``(model, ids, mask, position)``: float64 model and a right-padded batch of three."""
    if name == "llama":
        ids = random_ids(3, 8, seed=2)
        mask = torch.ones_like(ids)
        mask[1, 6:] = 0
        mask[2, 4:] = 0
        return make_llama("gqa", "causal", dtype=D), ids, mask, None
    ids, mask, _ = padded_batch([8, 6, 4], "right", seed=5)
    if name == "gpt2":
        return make_text("gpt2", "causal", D), ids, mask, None
    return make_text("bert", "masked_lm", D), ids, mask, torch.tensor([2, 1, 3])


def reference_gradient(model, ids, mask, position, target, foil) -> list[torch.Tensor]:
    """Per sample, ``d f / d inputs_embeds`` ``[n, D]`` over its real tokens, straight from the library model."""
    out = []
    for b in range(ids.shape[0]):
        n = int(mask[b].sum())
        embeds = model.get_input_embeddings()(ids[b:b + 1, :n]).detach().requires_grad_(True)
        logits = model(inputs_embeds=embeds).logits[0]
        row = logits[n - 1] if position is None else logits[int(position[b])]
        f = row[int(target[b])] - (0 if foil is None else row[int(foil[b])])
        (g,) = torch.autograd.grad(f, embeds)
        out.append(g[0])
    return out


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
@pytest.mark.parametrize("contrast", [False, True])
def test_gradient_norms_equal_autograd_on_the_library_model(name, contrast):
    model, ids, mask, position = tiny(name)
    options = {} if position is None else {"position": position}
    l1 = explain(model, ids, mask, method="gradient_l1", **options)
    target = l1.target
    foil = (target + 7) % model.config.vocab_size if contrast else None
    l1 = explain(model, ids, mask, method="gradient_l1", target=target, foil=foil, **options)
    l2 = explain(model, ids, mask, method="gradient_l2", target=target, foil=foil, **options)
    reference = reference_gradient(model, ids, mask, position, target, foil)
    # Hugging Face's RMSNorm computes its statistics in float32 even in a float64 LLaMA: compare at that rounding
    rtol = 1e-5 if name == "llama" else 1e-10
    for b, g in enumerate(reference):
        n = g.shape[0]
        for rel, expected in ((l1, g.abs().sum(-1)), (l2, (g * g).sum(-1))):
            assert expected.min() > 0
            assert torch.allclose(rel.scores[b, :n], expected, atol=rtol * float(expected.max()), rtol=0), (b, rel.method)
            assert not rel.scores[b, n:].any()
    assert bool((l1.scores >= 0).all()) and bool((l2.scores >= 0).all())
    assert l2.rules == "gradient_l2" and l2.positional.numel() == 0
    assert (int(l2.forward_passes[0]), int(l2.backward_passes[0])) == (1, 1)
    if contrast:
        assert torch.equal(l2.extras["foil"], foil)


def test_the_l2_score_is_the_squared_norm_not_the_norm():
    model, ids, mask, _ = tiny("gpt2")
    l2 = explain(model, ids, mask, method="gradient_l2")
    g = reference_gradient(model, ids, mask, None, l2.target, None)[0]
    assert torch.allclose(l2.scores[0, :8], g.pow(2).sum(-1), rtol=1e-10, atol=0)
    assert not torch.allclose(l2.scores[0, :8], g.norm(dim=-1), rtol=1e-3, atol=0)


def test_gradient_norms_on_pixels_equal_autograd_on_the_timm_model():
    model = make_vit("plain", dtype=D)
    x = images(2)
    rel = explain(model, x, method="gradient_l1")
    leaf = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model(leaf).gather(1, rel.target[:, None]).sum(), leaf)
    assert torch.allclose(rel.scores, g.abs().sum(1), rtol=1e-10, atol=0)
    sq = explain(model, x, method="gradient_l2")
    assert torch.allclose(sq.scores, (g * g).sum(1), rtol=1e-10, atol=0)
