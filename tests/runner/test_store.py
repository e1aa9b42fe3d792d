"""The kill-safe JSONL shard store and the explanation cache (docs/design.md section 6, "Resume")."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from palrp_bench.errors import BadInputError
from runner.harness import light_import_preamble
from palrp_bench.runner.store import (ExplanationCache, ShardStore, decode_rows, encode_record, read_records,
                                      store_name, stored_metrics)


def _record(i):
    return encode_record(f"s{i}", i, [("ac", "generation", 0.1, 0.5 + i), ("correct", "all", None, 1.0)], {"k": i})


def test_append_and_read_back(tmp_path):
    path = tmp_path / store_name(1, 4)
    assert path.name == "shard-001-of-004.jsonl"
    with ShardStore(path) as store:
        for i in range(3):
            store.append(_record(i))
    records = read_records(path)
    assert [r["sample_id"] for r in records] == ["s0", "s1", "s2"]
    rows = decode_rows(records[2])
    assert rows[0] == ("ac", "generation", 0.1, 2.5)
    assert rows[1][:2] == ("correct", "all") and math.isnan(rows[1][2]) and rows[1][3] == 1.0
    assert path.read_bytes().count(b"\n") == 3


def test_non_finite_values_survive_the_round_trip(tmp_path):
    path = tmp_path / store_name(0, 1)
    with ShardStore(path) as store:
        store.append(encode_record("a", 0, [("m", "v", 0.0, float("nan")), ("m", "v", 1.0, float("inf")),
                                            ("m", "v", 2.0, float("-inf"))]))
    values = [r[3] for r in decode_rows(read_records(path)[0])]
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf
    json.loads(path.read_text())  # strict JSON (no bare NaN tokens)


def test_a_torn_tail_is_ignored_and_truncated_on_reopen(tmp_path):
    path = tmp_path / store_name(0, 1)
    with ShardStore(path) as store:
        store.append(_record(0))
        store.append(_record(1))
    good = path.read_bytes()
    with open(path, "ab") as f:  # a writer killed in the middle of a line
        f.write(json.dumps(_record(2)).encode()[:25])
    assert [r["sample_id"] for r in read_records(path)] == ["s0", "s1"]
    with ShardStore(path) as store:
        assert path.read_bytes() == good  # the torn record is gone, the good ones untouched
        store.append(_record(2))
    assert [r["sample_id"] for r in read_records(path)] == ["s0", "s1", "s2"]


def test_a_second_writer_of_the_same_shard_is_refused(tmp_path):
    path = tmp_path / store_name(0, 1)
    code = light_import_preamble() + (f"import time; from palrp_bench.runner.store import ShardStore\n"
            f"s = ShardStore({str(path)!r}); s.open(); print('locked', flush=True); time.sleep(30)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(BadInputError, match="in use by another running process"):
            ShardStore(path).open()
    finally:
        holder.kill()
        holder.wait()
    with ShardStore(path):  # the lock dies with its process
        pass


def test_stored_metrics_are_the_union_over_any_sharding_and_run(tmp_path):
    def record(i, metrics):
        return encode_record(f"s{i}", i, [("m", "all", None, 1.0)], metrics=metrics)

    with ShardStore(tmp_path / store_name(0, 2)) as a, ShardStore(tmp_path / store_name(1, 2)) as b:
        a.append(record(0, ["vision_perturbation"]))
        b.append(record(1, ["vision_perturbation", "positional_share"]))
    with ShardStore(tmp_path / store_name(0, 1)) as c:  # a later run with another n_shards adds a metric
        c.append(record(0, ["positional_share"]))
        c.append(record(2, ["positional_share"]))
    assert stored_metrics(tmp_path) == {"s0": {"vision_perturbation", "positional_share"},
                                        "s1": {"vision_perturbation", "positional_share"},
                                        "s2": {"positional_share"}}


def test_records_of_older_stores_name_their_metrics_protocols(tmp_path):
    record = encode_record("s0", 0, [("m", "all", None, 1.0)], metrics=["segmentation"])
    record["protocols"] = record.pop("metrics")
    with ShardStore(tmp_path / store_name(0, 1)) as store:
        store.append(record)
    assert stored_metrics(tmp_path) == {"s0": {"segmentation"}}


def test_explanation_cache_round_trip(tmp_path):
    cache = ExplanationCache(tmp_path)
    assert cache.load("imdb/test 1") is None
    arrays = {"scores": np.arange(5, dtype=np.float32), "tokens": np.asarray(["<s>", "good", "film"])}
    cache.save("imdb/test 1", arrays)
    back = cache.load("imdb/test 1")
    assert np.array_equal(back["scores"], arrays["scores"]) and list(back["tokens"]) == ["<s>", "good", "film"]
    assert cache.path_for("a/b") != cache.path_for("a_b")  # sanitised names cannot collide
    assert not list((tmp_path / "explanations").glob(".*tmp"))
