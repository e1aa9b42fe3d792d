"""Which samples a float32 agreement test can judge: those whose float32 map float32 rounding does not decide.

A comparison of our float32 maps with another implementation's float32 maps (the official PA-LRP code's fixtures)
mixes two float32 roundings. Where a stabilised denominator ``z + eps`` comes close to zero, rounding alone moves a
map by far more than elsewhere, differently on every CPU's kernels. A sample is *well-conditioned* when our float32
map and our float64 map of the same model with the same rules (the model cast to float64) agree to ``cond``
relative to the map's max |value|; the agreement tests judge those samples only, with the bound

    |ours32 - theirs| <= |ours32 - ours64| + |ours64 - theirs| <= c + r,

where ``c`` is our float32 rounding of that sample, measured on this CPU (<= ``cond``), and ``r`` bounds the other
implementation's own float32 rounding: the distance of its stored map to our float64 map, the same on every
machine (float64 evaluation error is negligible), checked by a test of its own. Nothing else may separate the two
maps, so the bound is the worst case float32 rounding alone can produce, and it stays below ``cond + r``.
"""
from __future__ import annotations

from typing import Sequence


def judged_samples(rounding: Sequence[float], cond: float, minimum: int, what: str) -> tuple[list[int], str]:
    """Indices of the well-conditioned samples (``rounding[i] <= cond``) and a line saying how many of how many;
    fails when fewer than ``minimum`` are judged, so the test using them cannot pass vacuously."""
    judged = [i for i, c in enumerate(rounding) if c <= cond]
    line = (f"{what}: judged {len(judged)} of {len(rounding)} samples (float32 vs float64 of our map <= {cond:.0e}: "
            + ", ".join(f"{c:.2e}" for c in rounding) + ")")
    assert len(judged) >= minimum, f"{line}; at least {minimum} must be well-conditioned"
    return judged, line
