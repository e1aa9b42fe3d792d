"""The real-format writers beside their readers (data/): what each writes, its dataset's loader reads back, and its
preflight accepts (the rehearsal writes full-size copies with them, palrp_bench/bench/rehearse.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from palrp_bench.data import arc, imagenet, imagenet_seg, imdb, wikipedia
from palrp_bench.data.registry import DATASETS
from palrp_bench.data.synthetic_text import load_tiny_tokenizer
from palrp_bench.findings import Findings


def _preflight(dataset: str, path, **options) -> list:
    task = SimpleNamespace(name=dataset, dataset=dataset, path=str(path), pool_size=None, options=options)
    findings = Findings(task)
    DATASETS[dataset].preflight(task, findings)
    return findings.problems


def test_imdb_csv_and_hub_layout(tmp_path):
    reviews = [f"the film was {w}" for w in ("superb", "dull", "brilliant", "okay", "gripping", "average")]
    sentiments = ["positive", "negative"] * 3
    csv = tmp_path / "csv" / imdb.KAGGLE_CSV_NAME
    imdb.write_kaggle_csv(csv, reviews, sentiments)
    tok = load_tiny_tokenizer()
    test = imdb.load_imdb(path=csv, limit=None, tokenizer=tok, max_length=16)
    assert len(test) == 2 and {s.meta["text"] for s in test} <= set(reviews)  # the 30 % test part: ceil(0.3 * 6)
    imdb.write_hub_layout(tmp_path / "hub", {"train": (reviews[:3], [1, 0, 1]), "test": (reviews[3:], [0, 1, 0])})
    hub = imdb.load_imdb("hf", tmp_path / "hub", "test", None, tokenizer=tok, max_length=16)
    assert sorted(s.meta["hf_label"] for s in hub) == [0, 0, 1]
    assert _preflight("imdb", csv) == [] and _preflight("imdb", tmp_path / "hub", source="hf") == []


def test_arc_and_wikipedia_hub_layouts(tmp_path):
    question = {"choices": {"text": ["a", "b", "c", "d"], "label": list("ABCD")}, "answerKey": "C"}
    arc.write_hub_layout(tmp_path / "arc", {split: [dict(question, id=f"{split}-{i}", question=f"q {i}")
                                                    for i in range(2)] for split in ("train", "test")})
    pool = arc.load_arc_easy(load_tiny_tokenizer(), path=tmp_path / "arc")
    assert pool.sample_ids == ["arc-easy-train-0", "arc-easy-train-1", "arc-easy-test-0", "arc-easy-test-1"]
    rows = [{"id": str(i), "text": f"Article {i} text."} for i in range(5)]
    wikipedia.write_hub_layout(tmp_path / "wiki", rows, n_shards=2)
    assert len(list((tmp_path / "wiki" / wikipedia.HF_CONFIG).glob("train-*-of-00002.parquet"))) == 2
    pool = wikipedia.load_wikipedia(load_tiny_tokenizer(), path=tmp_path / "wiki", limit=None)
    assert pool.sample_ids == [f"wiki-{i}" for i in range(5)]
    assert _preflight("arc", tmp_path / "arc") == [] and _preflight("wikipedia", tmp_path / "wiki") == []


def test_image_folder_and_segmentation_file(tmp_path):
    from PIL import Image

    sources = []
    for i in range(2):
        sources.append(tmp_path / f"source{i}.JPEG")
        Image.fromarray(np.full((8, 8, 3), 60 * i, np.uint8)).save(sources[-1])
    imagenet.write_image_folder(tmp_path / "imagenet", sources, ["n00000001", "n00000002", "n00000003"],
                                per_class=2)
    listing = imagenet.list_imagenet_val(tmp_path / "imagenet")
    assert len(listing.files) == 6 and tuple(listing.labels) == (0, 0, 1, 1, 2, 2)
    image, mask = np.zeros((6, 4, 3), np.uint8), np.ones((6, 4), np.uint8)
    imagenet_seg.write_imagenet_seg(tmp_path / "seg.mat", [(image, mask)], count=3)
    data = imagenet_seg.load_imagenet_seg(tmp_path / "seg.mat", image_size=4, expected_count=3)
    assert len(data) == 3 and data[2].mask.shape == (4, 4)
    assert _preflight("imagenet", tmp_path / "imagenet", subset="all") == []
    assert _preflight("imagenet_seg", tmp_path / "seg.mat", expected_count=3) == []
