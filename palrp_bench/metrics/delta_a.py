"""Faithfulness as the area between the least- and most-relevant-first perturbation curves (Blücher et al. 2024),
as the AttnLRP paper measures it (Achtibat et al. 2024, appendix B.2; its Table 1 and appendix Tables 5-8).

Per sample, the explained logit ``f_j`` is read along two perturbation processes over the ``N`` input features
(tokens of a language model, pixels of a ViT), ordered by relevance: MoRF (most relevant first) and LeRF (least
relevant first). Its curve over the fraction ``k / N`` of perturbed features gives an area

* :func:`curve_area`: the trapezoid over the fractions in [0, 1] (``1/N [sum_k f(x^k) - (f(x^0) + f(x^N)) / 2]``
  per feature). The paper's Eq. 31 is the left sum ``1/N sum_{k<N} f(x^k)``; the two differ by
  ``(f(x^N) - f(x^0)) / 2N``, a term the MoRF and LeRF curves share (same endpoints: the input and the baseline), so
  the difference ``delta_a`` is exactly the paper's. The trapezoid is also symmetric under reversing a curve, which
  makes the paper's insertion / flipping equivalence exact (``A^I_MoRF = A^F_LeRF``). On a coarsened grid (long
  inputs) the fractions are the actual shares of features perturbed at each step.

The table metrics, from the per-sample areas ``a_morf`` and ``a_lerf`` of result rows (variant = the process):

* ``delta_a``: mean over samples of ``A_LeRF - A_MoRF`` for ``flipping`` (features set to the baseline, as for the
  ViT) and ``A_MoRF - A_LeRF`` for ``insertion`` (features restored from the baseline, as for the language models).
  Both mean "the curve that keeps the most relevant features longer, minus the other", so higher is better.
* ``a_morf`` / ``a_lerf``: the sample-mean areas. Flipping: low ``a_morf``, high ``a_lerf`` are good; insertion: the
  reverse.
"""
from __future__ import annotations

from types import MappingProxyType

import numpy as np

from ..errors import BadInputError
from .registry import MetricSource, MetricSpec, register_metric, sample_mean

__all__ = ["PROCESSES", "curve_area", "delta_a"]

#: perturbation processes of the AttnLRP paper's appendix B.2
PROCESSES = ("flipping", "insertion")


def curve_area(curve, fractions) -> float:
    """Trapezoid area of one logit curve ``[S + 1]`` over its fractions ``[S + 1]`` (ascending from 0 to 1) of
    perturbed features (module docstring)."""
    y = np.asarray(curve, dtype=np.float64).reshape(-1)
    x = np.asarray(fractions, dtype=np.float64).reshape(-1)
    if y.shape != x.shape or y.size < 2:
        raise BadInputError(f"a curve of {y.size} values needs as many fractions (got {x.size}), at least 2",
                            "pass one fraction of perturbed features per curve point")
    if x[0] != 0.0 or x[-1] != 1.0 or bool(np.any(np.diff(x) < 0)):
        raise BadInputError("fractions must rise from 0 to 1", "pass k / N for k = 0..N (or the coarsened grid)")
    return float(np.trapezoid(y, x))


def delta_a(components) -> np.ndarray | float:
    """``delta_a`` of per-sample areas ``[..., n, 2]``: the mean over samples of ``components[..., 0] -
    components[..., 1]``, the first column being the area of the curve that keeps the most relevant features longer
    (``a_lerf`` for flipping, ``a_morf`` for insertion); vectorised over leading axes (bootstrap resamples)."""
    c = np.asarray(components, dtype=np.float64)
    if c.ndim < 2 or c.shape[-1] != 2 or c.shape[-2] == 0:
        raise BadInputError(f"delta_a needs per-sample area pairs [n, 2], got shape {c.shape}",
                            "pass (keeps-relevant area, other area) per sample")
    out = (c[..., 0] - c[..., 1]).mean(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


_CONVENTION = "per-sample trapezoid over the fraction of perturbed features, mean over samples"
register_metric(MetricSpec(
    "delta_a", True, _CONVENTION + "; flipping: A_LeRF - A_MoRF, insertion: A_MoRF - A_LeRF",
    "area between the least- and most-relevant-first curves of the explained logit (AttnLRP paper appendix B.2)",
    "B.2", "logit", PROCESSES,
    (MetricSource(("a_lerf", "a_morf"), "flipping", "flipping"),
     MetricSource(("a_morf", "a_lerf"), "insertion", "insertion")), delta_a))
register_metric(MetricSpec(
    "a_morf", MappingProxyType({"flipping": False, "insertion": True}), _CONVENTION,
    "area under the explained logit, most relevant features first (AttnLRP paper Eq. 31)", "B.2", "logit",
    PROCESSES, (MetricSource(("a_morf",)),), sample_mean))
register_metric(MetricSpec(
    "a_lerf", MappingProxyType({"flipping": True, "insertion": False}), _CONVENTION,
    "area under the explained logit, least relevant features first (AttnLRP paper Eq. 31)", "B.2", "logit",
    PROCESSES, (MetricSource(("a_lerf",)),), sample_mean))
