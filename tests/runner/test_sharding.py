"""Deterministic shard assignment (docs/design.md section 6, "Sharding"): stable across processes, a partition of the
samples."""
import hashlib
import subprocess
import sys

import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.runner.sharding import check_shard, select_shard, shard_of, stable_hash
from runner.harness import light_import_preamble


def test_stable_hash_is_the_blake2b_prefix():
    expected = int.from_bytes(hashlib.blake2b(b"imdb-test-00042", digest_size=8).digest(), "big")
    assert stable_hash("imdb-test-00042") == expected
    assert shard_of("imdb-test-00042", 7) == expected % 7


def test_assignment_does_not_depend_on_python_hash_seed():
    code = light_import_preamble() + ("from palrp_bench.runner.sharding import shard_of\n"
                                      "print([shard_of(f's{i}', 5) for i in range(50)])")
    # this process runs with a random hash seed; a child with a fixed one must agree
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "", "HF_HUB_OFFLINE": "1"}).stdout
    assert out.strip() == str([shard_of(f"s{i}", 5) for i in range(50)])


@pytest.mark.parametrize("n_shards", [1, 2, 3, 8])
def test_shards_partition_the_samples_and_keep_order(n_shards):
    ids = [f"sample-{i:04d}" for i in range(200)]
    parts = [select_shard(ids, s, n_shards, key=lambda x: x) for s in range(n_shards)]
    assert sorted(sum(parts, [])) == ids  # every sample exactly once
    for part in parts:
        assert part == sorted(part)  # dataset order kept inside a shard
    if n_shards > 1:  # a hash spreads 200 ids over every shard
        assert all(len(p) > 0 for p in parts)


def test_assignment_is_independent_of_the_rest_of_the_dataset():
    # a sample's shard depends on its id only, never on which other samples exist
    small = [f"x{i}" for i in range(10)]
    large = small + [f"y{i}" for i in range(100)]
    for s in range(4):
        assert select_shard(small, s, 4, key=lambda x: x) == [x for x in select_shard(large, s, 4, key=lambda x: x)
                                                             if x.startswith("x")]


@pytest.mark.parametrize("shard,n", [(3, 3), (-1, 2), (0, 0)])
def test_out_of_range_shard_is_a_one_line_error(shard, n):
    with pytest.raises(BadInputError) as err:
        check_shard(shard, n)
    assert "\n" not in str(err.value) and "runner." in str(err.value)

