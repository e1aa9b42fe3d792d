"""The job's sample loader (palrp_bench/runner/loader.py): worker processes load the samples ahead, in order, and
change no number; shards and resume work with them; a job that dies keeps every sample it computed."""
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from palrp_bench.app import run
from palrp_bench.errors import BadInputError, MissingDataError, PalrpError
from palrp_bench.runner import loader as loading
from palrp_bench.runner.loader import SampleLoader, check_loader_workers, resolve_loader_workers
from runner.harness import compose_cfg, per_sample_values, read_results

VISION = Path(__file__).resolve().parents[1] / "data" / "fixtures_vision"


class _Lazy:
    """A lazy sample: ``load()`` returns its number and the process that loaded it (an error for ``bad``)."""

    def __init__(self, i: int, bad: bool = False):
        self.i, self.bad = i, bad

    def load(self):
        if self.bad:
            raise MissingDataError(f"cannot read image {self.i}", "replace the file")
        return self.i, os.getpid()


@pytest.mark.parametrize("workers", [0, 2])
def test_samples_come_back_loaded_in_the_order_asked_for(workers):
    positions = [7, 3, 11, 0, 5, 9, 1]
    with SampleLoader([_Lazy(i) for i in range(12)], positions, workers=workers, ahead=3) as loader:
        first = loader.take(2)
        loader.give_back(first[1:])  # a batch that ran out of memory: its samples are taken again
        taken = first[:1] + loader.take(4) + loader.take(5) + loader.take(5)
    assert [i for i, _ in taken] == positions
    assert {pid == os.getpid() for _, pid in taken} == {workers == 0}


def test_an_order_loads_every_sample_first_and_an_error_in_a_worker_reaches_the_job():
    with SampleLoader([_Lazy(i) for i in range(6)], range(6), workers=2,
                      order=lambda s: sorted(s, key=lambda x: -x[0])) as loader:
        assert [i for i, _ in loader.take(10)] == [5, 4, 3, 2, 1, 0]
    with pytest.raises(MissingDataError, match="cannot read image 4"):
        with SampleLoader([_Lazy(i, bad=i == 4) for i in range(6)], range(6), workers=2, ahead=2) as loader:
            loader.take(6)


class _Dies(_Lazy):
    def load(self):
        os._exit(9)  # a worker killed while loading (e.g. by the kernel's out-of-memory killer)


def test_a_worker_that_dies_is_one_line_naming_the_fix():
    with pytest.raises(PalrpError, match="a sample loader worker died .* -- run again .* runner.loader_workers"):
        with SampleLoader([_Dies(i) for i in range(4)], range(4), workers=1) as loader:
            loader.take(4)


def test_samples_in_memory_are_not_sent_to_workers():
    assert SampleLoader([("a", 1), ("b", 2)], [0, 1], workers=2).workers == 0


def test_the_setting_is_auto_or_a_count(monkeypatch):
    assert check_loader_workers("auto") == "auto" and check_loader_workers(3) == 3
    for bad in (-1, "two", 1.5, True):
        with pytest.raises(BadInputError, match="runner.loader_workers must be a non-negative integer or 'auto'"):
            check_loader_workers(bad)
    monkeypatch.setattr(loading, "_cores", lambda: 16)
    assert resolve_loader_workers("auto", "cuda:0") == 8 and resolve_loader_workers("auto", "cpu") == 2
    monkeypatch.setattr(loading, "_cores", lambda: 2)
    assert resolve_loader_workers("auto", "cuda:0") == 1 and resolve_loader_workers("auto", "cpu") == 1
    assert resolve_loader_workers(0, "cuda:0") == 0


def _imdb_csv(folder: Path, n: int) -> Path:
    from palrp_bench.data.synthetic_text import make_synthetic_classification

    reviews = [s.meta["text"] for s in make_synthetic_classification(n, seed=5)]
    csv = folder / "IMDB Dataset.csv"
    pd.DataFrame({"review": reviews, "sentiment": ["positive", "negative"] * (n // 2)}).to_csv(csv, index=False)
    return csv


CELLS = {
    # an IMDB CSV tokenised in the workers (a TextPool, selection=all), batched by length
    "text": lambda tmp: ("model=tiny_llama_cls", "task=imdb", f"task.path={_imdb_csv(tmp, 24)}", "task.pool_size=6",
                         "task.selection=all", "task.options.max_length=48", "method=grad_x_input"),
    # JPEG and PNG files of an ImageFolder decoded and resized in the workers
    "vision": lambda tmp: ("model=tiny_vit", "task=imagenet", f"task.path={VISION / 'imagefolder'}",
                           "task.options.subset=all", "task.options.image_size=64", "method=attnlrp"),
}


def _run(run_dir, *overrides):
    run(compose_cfg(run_dir, "runner.quiet=true", "runner.devices=[cpu]", "runner.batch_size=2", *overrides),
        out=open("/dev/null", "w"))
    return read_results(run_dir)


def _statuses(run_dir):
    return [json.loads(p.read_text()) for p in sorted(Path(run_dir).glob("cells/*/*/*/shard-*.status.json"))]


@pytest.mark.parametrize("kind", sorted(CELLS))
def test_results_are_identical_with_and_without_workers_and_shards_resume_with_them(tmp_path, kind):
    cell = CELLS[kind](tmp_path)
    alone = _run(tmp_path / "in_process", *cell, "runner.loader_workers=0")
    workers = _run(tmp_path / "workers", *cell, "runner.loader_workers=2")
    assert [s["loader_workers"] for s in _statuses(tmp_path / "workers")] == [2]
    assert alone.sample_id.nunique() >= 5
    pd.testing.assert_frame_equal(alone.drop(columns="run"), workers.drop(columns="run"), check_exact=True)
    # two shards, the first run stopped after 2 samples, then resumed: the same samples and values (other batches:
    # float rounding of differently padded or stacked forwards)
    _run(tmp_path / "resumed", *cell, "runner.loader_workers=2", "runner.n_shards=2", "runner.max_samples=2")
    resumed = _run(tmp_path / "resumed", *cell, "runner.loader_workers=2", "runner.n_shards=2")
    assert sum(s["n_computed"] for s in _statuses(tmp_path / "resumed")) == alone.sample_id.nunique() - 2
    a, b = per_sample_values(alone), per_sample_values(resumed)
    assert a.index.equals(b.index)
    pd.testing.assert_series_equal(a, b, check_exact=False, rtol=1e-4, atol=1e-5)


def test_a_job_that_dies_keeps_every_sample_it_computed(tmp_path, monkeypatch):
    from palrp_bench.evaluation.tasks.vision_common import VisionAdapter

    real, calls = VisionAdapter.evaluate, []

    def failing(self, bundle, samples, ctx, metrics=None):
        calls.append(len(samples))
        if len(calls) == 3:
            raise BadInputError("image 5 is broken", "replace it")
        return real(self, bundle, samples, ctx, metrics)

    monkeypatch.setattr(VisionAdapter, "evaluate", failing)
    with pytest.raises(BadInputError, match="image 5 is broken"):
        _run(tmp_path, *CELLS["vision"](tmp_path), "runner.loader_workers=2", "runner.batch_size=1")
    (status,) = _statuses(tmp_path)
    assert status["status"] == "failed" and status["n_computed"] == 2 and status["timings"]["failed"]
    stored = read_results(tmp_path)  # the run merged what was stored
    assert stored.sample_id.nunique() == 2
