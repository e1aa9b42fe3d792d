"""Sample selection (issue "Ready for the real run", item 4): ``runner.max_samples`` stops the selection
forwards early, the capped list is the prefix of the uncapped one, the per-candidate flags are cached in the
user cache and shared by run directories (recorded in the manifest), and a progress bar shows the forwards."""
import json

import numpy as np
import pytest

from palrp_bench.evaluation.tasks.selftest import SelftestAdapter, SelftestSample, selftest_correct
from palrp_bench.app import run
from palrp_bench.runner.plan import Cell
from palrp_bench.runner.selection import SELECTION_CHUNK, _CacheEntry, select_samples
from palrp_bench.schema import ModelConfig, Selection, TaskConfig
from runner.harness import compose_cfg, read_results

SELFTEST = ("experiment=selftest", "task=selftest", "method=pa_lrp", "model=selftest", "runner.quiet=true")


class FlagAdapter:
    """Correct iff ``flags[index]``; counts the candidates it forwards."""

    def __init__(self, flags):
        self.flags, self.forwarded = list(flags), 0

    def correct(self, bundle, samples, ctx):
        assert len(samples) <= SELECTION_CHUNK
        self.forwarded += len(samples)
        return [self.flags[s.index] for s in samples]


def _cell(rule: str, count, n: int) -> Cell:
    model = ModelConfig(name="selftest", loader="selftest")
    task = TaskConfig(name="selftest", kind="selftest", dataset="selftest", selection=Selection(rule),
                      select_count=count, options={"n": n})
    return Cell(model, task, "pa_lrp", ("selftest",), "official", "official", None, 0)


def _select(tmp_path, flags, rule, count, cap, cache):
    pool = [SelftestSample(f"selftest-{i:05d}", i) for i in range(len(flags))]
    adapter = FlagAdapter(flags)
    chosen, record = select_samples(pool, _cell(rule, count, len(flags)), adapter, None, None, tmp_path, cap)
    return [s.index for s in chosen], adapter.forwarded, record


@pytest.mark.parametrize("rule", ["until_correct", "correct_only"])
def test_a_capped_selection_is_the_prefix_of_the_full_list_and_stops_early(tmp_path, monkeypatch, rule):
    rng = np.random.default_rng(0)
    for trial in range(6):
        flags = list(rng.random(61) < 0.4)
        count = int(rng.integers(3, 20))
        monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / f"full{trial}"))
        full, full_forwarded, _ = _select(tmp_path, flags, rule, count, None, None)
        for cap in (1, 2, 5, 9, 17, 40, 100):
            monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / f"cap{trial}-{cap}"))
            capped, forwarded, record = _select(tmp_path, flags, rule, count, cap, None)
            assert capped == full[:cap]
            # the forwards stop at the chunk that decides the first `cap` entries
            if rule == "correct_only":
                hits = [i for i, ok in enumerate(flags) if ok]
                need = min(cap, count)
                decided = hits[need - 1] + 1 if len(hits) >= need else len(flags)
            else:
                hits = [i for i, ok in enumerate(flags) if ok]
                decided = min(cap, hits[count - 1] + 1 if len(hits) >= count else len(flags))
            expected = min(len(flags), -(-decided // SELECTION_CHUNK) * SELECTION_CHUNK)
            assert forwarded == expected <= full_forwarded
            assert record.candidates_forwarded == forwarded and record.n_selected == len(capped)


def test_the_cache_is_reused_and_extended_across_callers(tmp_path, monkeypatch):
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "cache"))
    flags = [i % 3 == 0 for i in range(50)]
    small, forwarded, record = _select(tmp_path, flags, "until_correct", 10, 4, None)
    assert (small, forwarded, record.flags_cached) == ([0, 1, 2, 3], 8, 0)
    again, forwarded, record = _select(tmp_path, flags, "until_correct", 10, 4, None)
    assert (again, forwarded, record.flags_cached) == (small, 0, 8)
    # a larger cap continues after the cached chunk; another rule and count reuse the same flags
    full, forwarded, record = _select(tmp_path, flags, "until_correct", 10, None, None)
    assert full == list(range(28)) and forwarded == 32 - 8 and record.flags_cached == 8
    correct, forwarded, _ = _select(tmp_path, flags, "correct_only", 5, None, None)
    assert correct == [0, 3, 6, 9, 12] and forwarded == 0
    (entry,) = (tmp_path / "cache" / "selection").glob("*.json")
    assert record.cache_entry == str(entry)
    stored = json.loads(entry.read_text())
    assert stored["flags"] == flags[:32] and stored["sample_ids"][-1] == "selftest-00031"


def test_a_cache_entry_for_other_samples_is_ignored(tmp_path):
    entry = _CacheEntry(tmp_path / "e.json", {"k": 1})
    entry.write(["a", "b", "c"], [True, False, True])
    assert entry.read(["a", "b", "c"]) == [True, False, True]  # covers the pool: no chunk rounding
    assert entry.read(["a", "x", "c", "d"]) == []
    assert entry.read(["a", "b", "c"] + [f"s{i}" for i in range(20)]) == []  # 3 flags -> 0 whole chunks


def test_the_selection_shows_a_progress_bar(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "cache"))
    pool = [SelftestSample(f"selftest-{i:05d}", i) for i in range(40)]
    select_samples(pool, _cell("correct_only", 12, 40), SelftestAdapter(), None, None, tmp_path, None, quiet=False)
    err = capsys.readouterr().err
    assert "selecting selftest/selftest" in err and "candidate" in err


def _run(run_dir, *overrides):
    return run(compose_cfg(run_dir, *SELFTEST, *overrides), out=open("/dev/null", "w"))


def test_run_dirs_share_the_user_cache_and_the_manifest_names_the_entry(tmp_path, monkeypatch):
    monkeypatch.delenv("PALRP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    overrides = ("task.selection=correct_only", "task.select_count=12")
    _run(tmp_path / "a", *overrides, "runner.max_samples=3")
    _run(tmp_path / "b", *overrides)
    ids = [f"selftest-{i:05d}" for i in range(40)]
    expected = [i for i in ids if selftest_correct(i)][:12]
    assert sorted(read_results(tmp_path / "a").sample_id.unique()) == expected[:3]
    assert sorted(read_results(tmp_path / "b").sample_id.unique()) == expected
    (entry,) = (tmp_path / "xdg" / "palrp-bench" / "selection").glob("*.json")
    records = [json.loads((tmp_path / d / "manifest.json").read_text())["cells"][0]["shards"][0]["selection"]
               for d in ("a", "b")]
    assert [r["cache_entry"] for r in records] == [str(entry)] * 2
    assert records[0]["flags_cached"] == 0 and records[0]["candidates_forwarded"] == SELECTION_CHUNK
    assert records[1]["flags_cached"] == SELECTION_CHUNK
    assert records[1]["candidates_forwarded"] == records[1]["candidates_seen"] - SELECTION_CHUNK
    assert not (tmp_path / "a" / "selection").exists()


@pytest.mark.parametrize("rule", ["until_correct", "all"])
def test_a_text_run_tokenises_only_the_candidates_it_forwards_and_the_samples_it_evaluates(tmp_path, monkeypatch,
                                                                                          rule):
    """An IMDB run of 4 samples from a 90-review pool tokenises one selection chunk (until_correct) or the 4
    samples (all), not the pool (data/text_common.py TextPool)."""
    import pandas as pd

    from palrp_bench.data import imdb
    from palrp_bench.data.synthetic_text import make_synthetic_classification

    reviews = [s.meta["text"] for s in make_synthetic_classification(300, seed=3)]
    csv = tmp_path / "IMDB Dataset.csv"
    pd.DataFrame({"review": reviews, "sentiment": ["positive", "negative"] * 150}).to_csv(csv, index=False)
    tokenised = []
    real = imdb.encode_batch_with_bos
    monkeypatch.setattr(imdb, "encode_batch_with_bos",
                        lambda tok, texts, **kw: tokenised.extend(texts) or real(tok, texts, **kw))
    run(compose_cfg(tmp_path / "run", "model=tiny_llama_cls", "task=imdb", f"task.path={csv}", "task.pool_size=90",
                    "method=grad_x_input", f"task.selection={rule}", "runner.max_samples=4", "runner.quiet=true",
                    "runner.devices=[cpu]", "task.options.max_length=64",
                    "runner.loader_workers=0"),  # tokenised in this process, where the count can see it
        out=open("/dev/null", "w"))
    assert read_results(tmp_path / "run").sample_id.nunique() == 4
    assert len(tokenised) == (SELECTION_CHUNK if rule == "until_correct" else 4)
    assert len(set(tokenised)) == len(tokenised)  # each review once
