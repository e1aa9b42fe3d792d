"""Deterministic assignment of samples to shards (docs/design.md section 6, "Sharding").

A sample belongs to shard ``stable_hash(sample_id) mod n_shards``, where ``stable_hash`` is the first 8 bytes of
the BLAKE2b digest of the UTF-8 sample id -- the same on every machine, Python version and process (Python's
``hash()`` is salted per process and must never be used here). The assignment depends only on the sample id
and the number of shards, never on the number of GPUs, the batch size or the order samples are loaded in, so
per-sample results are identical for 1 or N shards.
"""
from __future__ import annotations

from typing import Iterable, TypeVar

from ..data.sample_ids import stable_hash
from ..errors import BadInputError

T = TypeVar("T")


def shard_of(sample_id: str, n_shards: int) -> int:
    """The shard index in ``[0, n_shards)`` that owns ``sample_id``."""
    if n_shards < 1:
        raise BadInputError(f"n_shards must be >= 1, got {n_shards}", "set runner.n_shards to a positive integer")
    return stable_hash(sample_id) % n_shards


def check_shard(shard: int, n_shards: int) -> None:
    """Raise a one-line error when a shard index is out of range."""
    if n_shards < 1:
        raise BadInputError(f"runner.n_shards must be >= 1, got {n_shards}", "set runner.n_shards to a positive integer")
    if not 0 <= shard < n_shards:
        raise BadInputError(f"shard index {shard} is out of range for runner.n_shards={n_shards}",
                            f"use runner.shard between 0 and {n_shards - 1}")


def select_shard(samples: Iterable[T], shard: int, n_shards: int, key=lambda s: s.sample_id) -> list[T]:
    """The samples of ``shard`` in their original order."""
    check_shard(shard, n_shards)
    return [s for s in samples if shard_of(key(s), n_shards) == shard]
