"""Every local layout the text loaders accept, read by the real loader from a committed fixture
(tests/data/fixtures_text/formats, written by make_fixtures.py there): each gives the same samples as the hub's
parquet layout of the same rows."""
import importlib.util
from pathlib import Path

import pytest

from palrp_bench.data.arc import load_arc_easy
from palrp_bench.data.imdb import load_imdb
from palrp_bench.data.synthetic_text import load_tiny_tokenizer
from palrp_bench.data.wikipedia import load_wikipedia

FIXTURES = Path(__file__).resolve().parent / "fixtures_text"
_spec = importlib.util.spec_from_file_location("make_text_fixtures", FIXTURES / "make_fixtures.py")
make_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_fixtures)


@pytest.fixture(scope="module")
def tok():
    return load_tiny_tokenizer()


def _load(dataset, path, tok):
    if dataset == "imdb_hf":
        return {split: load_imdb("hf", path, split=split, limit=None, tokenizer=tok, max_length=64)
                for split in ("train", "test")}
    if dataset == "arc":
        return {"all": load_arc_easy(tok, path)}
    return {"train": load_wikipedia(tok, path, limit=None, max_length=64)}


def _summary(loaded):
    return {split: [(s.sample_id, s.input_ids, s.label, s.meta.get("answer_letter")) for s in samples]
            for split, samples in loaded.items()}


HUB_LAYOUT = {"imdb_hf": FIXTURES / "imdb_hf", "arc": FIXTURES / "arc", "wikipedia": FIXTURES / "wikipedia"}


@pytest.mark.parametrize("dataset, layout", [(d, lay) for d, layouts in make_fixtures.FORMAT_LAYOUTS.items()
                                             for lay in layouts])
def test_every_layout_reads_like_the_hub_parquet(tok, dataset, layout):
    folder = FIXTURES / "formats" / dataset / layout
    assert folder.is_dir(), "regenerate with python tests/data/fixtures_text/make_fixtures.py"
    expected = _summary(_load(dataset, HUB_LAYOUT[dataset], tok))
    if layout == "ai2_jsonl":  # the original release: one file per split
        ours = [s for split in ("Train", "Test") for s in load_arc_easy(tok, folder / f"ARC-Easy-{split}.jsonl")]
        assert _summary({"all": ours}) == expected
        return
    got = _summary(_load(dataset, folder, tok))
    assert got == expected
    assert all(len(v) >= 3 for v in got.values())


def test_the_hub_parquet_layouts_are_committed():
    assert sorted(p.relative_to(FIXTURES).as_posix() for p in FIXTURES.rglob("*.parquet")
                  if "formats" not in p.parts) == [
        "arc/ARC-Easy/test-00000-of-00001.parquet", "arc/ARC-Easy/train-00000-of-00001.parquet",
        "evidence/blimp/anaphor_number_agreement/train-00000-of-00001.parquet",
        "evidence/squad_v2/validation-00000-of-00001.parquet",
        "imdb_hf/plain_text/test-00000-of-00001.parquet", "imdb_hf/plain_text/train-00000-of-00001.parquet",
        "wikipedia/20231101.en/train-00000-of-00002.parquet", "wikipedia/20231101.en/train-00001-of-00002.parquet"]
