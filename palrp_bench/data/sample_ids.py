"""The stable hash of a sample id: what shards samples and seeds per-sample randomness (docs/design.md section 6,
"Sharding").

The first 8 bytes of the BLAKE2b digest of the UTF-8 sample id, big-endian: the same on every machine, Python
version and process (Python's ``hash()`` is salted per process and must never be used for this).
"""
from __future__ import annotations

import hashlib

__all__ = ["stable_hash"]


def stable_hash(sample_id: str) -> int:
    """A process-independent 64-bit hash of a sample id (module docstring)."""
    return int.from_bytes(hashlib.blake2b(sample_id.encode("utf-8"), digest_size=8).digest(), "big")
