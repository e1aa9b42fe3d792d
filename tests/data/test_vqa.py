"""Grounded visual questions: the synthetic generator, the JSON-lines format and its writer, the RefCOCO reader
(a release written here in the real file formats: the refs pickle, COCO's instances.json, images), the box
convention and the drops at load."""
import json
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from palrp_bench.data.registry import load_dataset
from palrp_bench.data.synthetic_vision import SYNTHETIC_SIDES
from palrp_bench.data.synthetic_vqa import VQA_VOCAB, make_synthetic_vqa
from palrp_bench.data.vqa import VqaSample, box_mask, collect_vqa, save_vqa_jsonl
from palrp_bench.errors import BadInputError, MissingDataError


def test_synthetic_questions_are_deterministic_and_grounded():
    samples = make_synthetic_vqa(40, seed=3, split="val", questions="colour,side,shape")
    again = make_synthetic_vqa(10, seed=3, split="val", questions="colour,side,shape")
    assert [s.sample_id for s in again] == [s.sample_id for s in samples[:10]]
    assert torch.equal(again[4].image, samples[4].image)
    assert not torch.equal(make_synthetic_vqa(1, seed=3, split="test")[0].image, samples[0].image)
    assert {s.meta["question_kind"] for s in samples} == {"colour", "side", "shape"}
    assert {s.meta["question_kind"] for s in make_synthetic_vqa(20)} == {"colour", "side"}  # the default kinds
    for s in samples:
        objects = s.meta["objects"]
        assert [o["side"] for o in objects] == ["left", "right"]
        assert objects[0]["shape"] != objects[1]["shape"] and objects[0]["colour"] != objects[1]["colour"]
        asked, other = objects[s.meta["asked"]], objects[1 - s.meta["asked"]]
        kind = s.meta["question_kind"]
        assert {"colour": asked["side"], "side": asked["colour"], "shape": asked["shape"]}[kind] in s.question
        if kind == "side":
            assert (s.answer, s.foil) == (asked["side"], other["side"])
        else:
            assert (s.answer, s.foil) == (asked["colour"], other["colour"])
        cols = torch.nonzero(s.mask)[:, 1]
        assert (cols < 32).all() if asked["side"] == "left" else (cols >= 32).all()  # wholly in its half
        x0, y0, x1, y1 = s.box
        rows, cols = torch.nonzero(s.mask, as_tuple=True)
        assert (x0, y0, x1, y1) == (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)
        assert s.mask.sum() > 60
        for word in s.question.split() + [s.answer, s.foil]:
            assert word in VQA_VOCAB
    with pytest.raises(BadInputError, match="question kinds"):
        make_synthetic_vqa(2, questions="colour,size")


def test_the_asked_object_is_saturated_in_its_colour():
    """Red, green and blue objects peak in their own channel (yellow: red and green above blue)."""
    for s in make_synthetic_vqa(20, seed=1):
        r, g, b = s.image[:, s.mask].mean(1).tolist()
        colour = s.meta["objects"][s.meta["asked"]]["colour"]
        assert max(r, g, b) - min(r, g, b) > 0.3  # saturated, not the grey clutter
        assert {"red": r > max(g, b), "green": g > max(r, b), "blue": b > max(r, g),
                "yellow": min(r, g) > b}[colour]


def test_box_convention():
    """A pixel belongs to a box when its centre does: (0, 0, 2, 1) holds the first two pixels of the first row."""
    mask = box_mask((0, 0, 2, 1), (3, 4))
    assert mask.tolist() == [[True, True, False, False], [False] * 4, [False] * 4]
    with pytest.raises(BadInputError, match="x1 < x0"):
        box_mask((3, 0, 1, 1), (3, 4))


def test_jsonl_round_trip_with_boxes_and_masks(tmp_path):
    samples = make_synthetic_vqa(4)
    boxed = VqaSample("boxed", "what colour is the disk ?", "red", "blue", image=samples[0].image, box=(1, 2, 30, 40))
    path = save_vqa_jsonl([boxed, *samples[1:]], tmp_path / "data.jsonl")
    pool = load_dataset("vqa", path=str(path))
    assert [s.sample_id for s in pool] == ["boxed"] + [s.sample_id for s in samples[1:]]
    assert pool[0].box == (1.0, 2.0, 30.0, 40.0) and pool[0].mask_path is None
    for read, written in zip(pool[1:], samples[1:]):
        assert torch.equal(read.evidence_mask(), written.mask)
        assert (read.question, read.answer, read.foil) == (written.question, written.answer, written.foil)
        image = torch.from_numpy(np.array(read.load_image())).permute(2, 0, 1).float() / 255
        assert (image - written.image).abs().max() <= 0.5 / 255 + 1e-6  # 8-bit PNG of the [0, 1] image
    assert len(load_dataset("vqa", path=str(path), limit=2)) == 2


@pytest.mark.parametrize("line, needle", [
    ('{"id": 1, "image": "a.png", "question": "q", "answer": "a"}', "exactly one of 'box' and 'mask'"),
    ('{"id": 1, "image": "a.png", "question": "q", "answer": "a", "box": [1, 2]}', "box must be"),
    ('{"id": 1, "question": "q", "answer": "a", "box": [0, 0, 1, 1]}', "no 'image'"),
    ("not json", "is not JSON"),
])
def test_malformed_jsonl_is_refused_in_one_line(tmp_path, line, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(BadInputError) as err:
        load_dataset("vqa", path=str(path))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_drops_are_counted():
    image = torch.zeros(3, 8, 8)
    pool = collect_vqa([VqaSample("a", "q", "red", "Red", image=image, box=(0, 0, 4, 4)),
                        VqaSample("b", "q", "red", "blue", image=image, box=(0, 0, 0, 0)),
                        VqaSample("c", "q", "red", "blue", image=image, box=(0, 0, 4, 4)), "no_other_category"],
                       None, what="test", source="test")
    assert [s.sample_id for s in pool] == ["c"]
    assert pool.dropped == {"same_answer_foil": 1, "empty_evidence": 1, "no_other_category": 1}
    with pytest.raises(BadInputError, match="twice"):
        collect_vqa([pool[0], pool[0]], None, what="test", source="test")


def write_refcoco(folder):
    """A RefCOCO release in its real formats: two images, three referred objects (one alone in its category's image)."""
    (folder / "images").mkdir(parents=True)
    for name in ("COCO_train2014_000000000001.jpg", "COCO_train2014_000000000002.jpg"):
        Image.fromarray(np.full((40, 60, 3), 120, dtype=np.uint8)).save(folder / "images" / name)
    instances = {
        "images": [{"id": 1, "file_name": "COCO_train2014_000000000001.jpg", "height": 40, "width": 60},
                   {"id": 2, "file_name": "COCO_train2014_000000000002.jpg", "height": 40, "width": 60}],
        "annotations": [{"id": 11, "image_id": 1, "category_id": 1, "bbox": [2, 3, 10, 20], "iscrowd": 0,
                         "segmentation": [[2, 3, 12, 3, 12, 23, 2, 23]]},
                        {"id": 12, "image_id": 1, "category_id": 3, "bbox": [30, 5, 20, 10], "iscrowd": 0,
                         "segmentation": [[30, 5, 50, 5, 40, 15]]},
                        {"id": 21, "image_id": 2, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 0,
                         "segmentation": [[0, 0, 5, 0, 5, 5]]}],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}]}
    (folder / "instances.json").write_text(json.dumps(instances))
    refs = [{"ref_id": 7, "ann_id": 11, "image_id": 1, "split": "val", "category_id": 1,
             "sentences": [{"sent": "man on the left"}, {"sent": "left guy"}]},
            {"ref_id": 8, "ann_id": 12, "image_id": 1, "split": "testA", "category_id": 3,
             "sentences": [{"sent": "red car"}]},
            {"ref_id": 9, "ann_id": 21, "image_id": 2, "split": "val", "category_id": 1,
             "sentences": [{"sent": "the person"}]}]
    with open(folder / "refs(unc).p", "wb") as f:
        pickle.dump(refs, f)
    return folder


def test_refcoco_reader(tmp_path):
    folder = write_refcoco(tmp_path / "refcoco")
    pool = load_dataset("refcoco", path=str(folder))
    assert [s.sample_id for s in pool] == ["refcoco-unc-7"] and pool.dropped == {"no_other_category": 1}
    s = pool[0]
    assert (s.question, s.answer, s.foil) == ("What is the man on the left?", "person", "car")
    assert s.box == (2.0, 3.0, 12.0, 23.0) and s.size() == (40, 60)
    assert torch.equal(s.evidence_mask(), box_mask((2, 3, 12, 23), (40, 60)))
    masked = load_dataset("refcoco", path=str(folder), options={"evidence": "mask"})[0]
    assert masked.mask is not None and 150 <= int(masked.mask.sum()) <= 231 and not masked.mask[0, 0]
    test_a = load_dataset("refcoco", path=str(folder), options={"split": "testA", "question": "Name the {expression}."})
    assert [(t.question, t.answer, t.foil) for t in test_a] == [("Name the red car.", "car", "person")]
    with pytest.raises(MissingDataError, match=r"refs\(google\).p"):
        load_dataset("refcoco", path=str(folder), options={"split_by": "google"})
