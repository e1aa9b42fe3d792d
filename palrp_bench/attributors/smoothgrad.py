"""SmoothGrad (Smilkov et al. 2017) through Captum's ``NoiseTunnel``, on the input embeddings / pixels.

AttnLRP paper appendix A.1.3, Eq. 22: ``SmoothGrad(x) = 1/m sum_{k=1..m} grad f_j(x + eps_k)``,
``eps_k ~ N(0, sigma^2)`` elementwise (mean 0, an absolute ``sigma`` on the model input: the embedding output of a
language model, the normalised pixels of a ViT). ``captum.attr.NoiseTunnel`` (``nt_type="smoothgrad"``) averages
Captum's signed ``Saliency`` (the gradient, ``abs=False``) over the noisy copies; ``times_input=True`` averages
Gradient x Input instead (``InputXGradient``). Per-token scores sum the embedding dimensions, per-pixel scores the
colour channels. A contrastive call (``foil``) averages the gradient of ``f_j - f_foil``
(:func:`~.integrated_gradients.forward_of` returns the explained value of each row).

Hyperparameters: ``sigma`` (the AttnLRP paper tuned it per dataset: 0.05 IMDB, 0.1 Wikipedia, 0.01 ImageNet; its
Tables 5-7, set in the task configs), ``n_samples`` (m; the paper gives none, 50 as in Smilkov et al.),
``times_input``. The noise of each sample is drawn from a generator seeded by the sample's own input
(:func:`~.base.sample_seed`), so a sample gets the same noise in any batch, shard or run. Cost per sample:
``n_samples`` forwards and backwards.
"""
from __future__ import annotations

import torch

from . import register_attributor
from .base import AttributorCall, AttributorResult, input_of, sample_seed
from .integrated_gradients import forward_of, reduce_features

__all__ = ["smoothgrad"]


@register_attributor("smoothgrad", passes=lambda p, n: (int(p["n_samples"]),) * 2)
def smoothgrad(call: AttributorCall) -> AttributorResult:
    from captum.attr import InputXGradient, NoiseTunnel, Saliency

    p = call.params
    n_samples = int(p["n_samples"])
    x = input_of(call.twin, call.prepared)
    base = InputXGradient(forward_of(call)) if p["times_input"] else Saliency(forward_of(call))
    extra = {} if p["times_input"] else {"abs": False}
    tunnel = NoiseTunnel(base)
    devices = [x.device.index or 0] if x.device.type == "cuda" else []
    out = []
    for b in range(call.batch):
        rows = torch.tensor([b], device=x.device)
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            torch.manual_seed(sample_seed(call.twin, call.prepared, b, 0))
            out.append(tunnel.attribute(x[b:b + 1], nt_type="smoothgrad", nt_samples=n_samples,
                                        nt_samples_batch_size=call.batch_size, stdevs=float(p["sigma"]),
                                        additional_forward_args=(rows,), **extra))
    passes = torch.full((call.batch,), n_samples, dtype=torch.long)
    return AttributorResult(reduce_features(torch.cat(out), call.modality), passes, passes.clone())
