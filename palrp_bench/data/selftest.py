"""``task.dataset=selftest``: the samples of the harness self-test, ids only (no model, no data; the numbers come
from each sample id, :mod:`palrp_bench.evaluation.tasks.selftest`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import BadInputError
from .registry import Option, register_dataset

__all__ = ["SelftestSample"]


@dataclass
class SelftestSample:
    sample_id: str
    index: int


@register_dataset(
    "selftest",
    options=(Option("n", 40, "samples"),
             Option("delay_s", 0.0, "seconds each sample takes (kill / resume tests)", changes_results=False),
             Option("nonfinite_every", 0, "every k-th sample gets a NaN relevance (0 = never)")),
    pool_size=lambda options: options["n"])
def _selftest_dataset(path, limit, options, tokenizer) -> list[SelftestSample]:
    """``task.dataset=selftest``: ``options.n`` samples ``selftest-00000``, ...; the other options are read by the
    self-test's computation."""
    n = int(options["n"])
    if n < 1:
        raise BadInputError(f"task.options.n must be >= 1, got {n}", "set task.options.n to a positive integer")
    return [SelftestSample(f"selftest-{i:05d}", i) for i in range(n)]
