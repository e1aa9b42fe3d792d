"""Regenerate the tiny text fixtures in this folder (hand-written rows in the real published formats).

    python tests/data/fixtures_text/make_fixtures.py

* ``imdb/IMDB Dataset.csv``: Kaggle "IMDB Dataset of 50K Movie Reviews" format (columns review, sentiment), 20 rows.
* ``imdb_hf/plain_text/{train,test}-00000-of-00001.parquet``: Hugging Face ``stanfordnlp/imdb`` format
  (columns text, label with 0 = neg, 1 = pos), sorted by label like the real splits.
* ``arc/ARC-Easy/{train,test}-00000-of-00001.parquet`` and ``arc_easy.jsonl``: ``allenai/ai2_arc`` format
  (id, question, choices{text,label}, answerKey), with a numeric-key row and an ``E``-key row (dropped by the
  loader) and 3- and 5-choice questions.
* ``wikipedia/20231101.en/train-0000{0,1}-of-00002.parquet``: ``wikimedia/wikipedia`` format (id, url, title,
  text), two shards of three articles, one article longer than 40 words.
* ``evidence/``: the evidence tasks' formats (``tests/data/test_text_evidence.py``), hand-written except the two
  parquet files this script derives from them: Goldberg's ``lgd_dataset.tsv`` and Linzen's
  ``agr_50_mostcommon_10K.tsv`` (sva), BLiMP's ``anaphor_number_agreement.jsonl``, Ferrando et al.'s
  ``blimp_with_targets/anaphor_number_agreement.csv`` and the hub parquet
  ``blimp/anaphor_number_agreement/train-00000-of-00001.parquet`` (the JSON-lines rows without the
  ``one_prefix_*`` fields) (ra), SQuAD v2's nested ``dev-v2.0.json`` and the hub's flat rows of the same questions
  ``squad_v2/validation-00000-of-00001.parquet`` (qa).
* ``formats/<dataset>/<layout>/``: the same rows (IMDB Hugging Face, ARC-Easy, Wikipedia) in every other local
  layout the loaders read (``data/text_common.py``): JSON lines, a JSON list of records, a JSON dict of columns,
  CSV (flat columns only: not ARC, whose ``choices`` are nested), a ``datasets`` ``save_to_disk`` folder of a
  ``DatasetDict`` and of a single ``Dataset``, and ARC's original AI2 JSON lines (choices nested in ``question``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent

POSITIVE = [
    "A wonderful film. The cast is superb and the story is moving.",
    "I loved every minute of it, the music alone is worth the ticket.",
    'Great acting, great script, "must see" for anyone who likes westerns.',
    "Funny, warm and clever.<br /><br />My kids watched it three times.",
    "The director knows how to build tension; the ending is brilliant.",
    "Beautiful photography and a strong lead, highly recommended.",
    "An honest, gentle drama with a lot of heart, and a great cast.",
    "One of the best sequels ever made, it improves on the original.",
    "Charming from start to finish, the dialogue sparkles.",
    "Solid, entertaining and well paced, a fine evening at the movies.",
]
NEGATIVE = [
    "Boring. The plot goes nowhere and the acting is wooden.",
    "I want my two hours back, this was a complete waste of time.",
    "Terrible script, terrible effects, and the ending makes no sense at all.",
    "The jokes fall flat and the pacing is painfully slow.<br /><br />Skip it.",
    "A lazy remake that adds nothing, the cast looks bored.",
    "Poorly edited, loud and confusing, with characters nobody cares about.",
    "Even the music is annoying, I gave up after forty minutes.",
    "The trailer was better than the film; avoid, avoid, avoid.",
    ("This film is long. " * 30).strip() + " And it is bad.",  # longer than any small max_length
    "Predictable, clumsy and far too long, a real disappointment.",
]


def write_imdb() -> None:
    rows = []
    for pos, neg in zip(POSITIVE, NEGATIVE):
        rows += [(pos, "positive"), (neg, "negative")]
    folder = HERE / "imdb"
    folder.mkdir(exist_ok=True)
    pd.DataFrame(rows, columns=["review", "sentiment"]).to_csv(folder / "IMDB Dataset.csv", index=False)

    hf = HERE / "imdb_hf" / "plain_text"
    hf.mkdir(parents=True, exist_ok=True)
    # sorted by label (all negatives first), as the real Hugging Face splits are
    train = {"text": NEGATIVE[:6] + POSITIVE[:6], "label": [0] * 6 + [1] * 6}
    test = {"text": NEGATIVE[6:] + POSITIVE[6:], "label": [0] * 4 + [1] * 4}
    pq.write_table(pa.table(train), hf / "train-00000-of-00001.parquet")
    pq.write_table(pa.table(test), hf / "test-00000-of-00001.parquet")


def _arc(id_, question, texts, key, labels=None):
    labels = labels or [chr(ord("A") + i) for i in range(len(texts))]
    return {"id": id_, "question": question, "choices": {"text": texts, "label": labels}, "answerKey": key}


ARC_TRAIN = [
    _arc("Mercury_0001", "Which object is a source of light?", ["a mirror", "the Sun", "the Moon", "a rock"], "B"),
    _arc("Mercury_0002", "What do plants need to make food?", ["sunlight", "sand", "salt", "plastic"], "A"),
    _arc("NYSEDREGENTS_2004_4_1", "Which is a liquid at room temperature?", ["ice", "steam", "water", "wood"], "3",
         labels=["1", "2", "3", "4"]),
    _arc("Mercury_0003", "Which tool measures temperature?", ["ruler", "balance", "thermometer"], "C"),
    _arc("Mercury_0004", "Which animal is a mammal?", ["frog", "shark", "eagle", "whale", "snake"], "D"),
]
ARC_TEST = [
    _arc("Mercury_0101", "What causes day and night?", ["Earth's rotation", "the tides", "clouds", "wind"], "A"),
    _arc("Mercury_0102", "Which is renewable?", ["coal", "oil", "gas", "wind", "solar"], "E"),
    _arc("Mercury_0103", "Which state of matter has a fixed shape?", ["gas", "liquid", "solid", "plasma"], "C"),
]


def write_arc() -> None:
    folder = HERE / "arc" / "ARC-Easy"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(ARC_TRAIN), folder / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(ARC_TEST), folder / "test-00000-of-00001.parquet")
    with (HERE / "arc_easy.jsonl").open("w", encoding="utf-8") as handle:
        for record in ARC_TRAIN + ARC_TEST:
            handle.write(json.dumps(record) + "\n")


WIKI = [
    ("12", "Anarchism", "Anarchism is a political philosophy and movement that is against all forms of authority."),
    ("25", "Autism", "Autism is a neurodevelopmental condition. " * 12),
    ("39", "Albedo", "Albedo is the fraction of sunlight that is diffusely reflected by a body."),
    ("290", "A", "A, or a, is the first letter and the first vowel letter of the Latin alphabet."),
    ("303", "Alabama", "Alabama is a state in the Southeastern region of the United States."),
    ("305", "Achilles", "In Greek mythology, Achilles was a hero of the Trojan War."),
]


def write_wikipedia() -> None:
    folder = HERE / "wikipedia" / "20231101.en"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": i, "url": f"https://en.wikipedia.org/wiki?curid={i}", "title": t, "text": x} for i, t, x in WIKI]
    pq.write_table(pa.Table.from_pylist(rows[:3]), folder / "train-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(rows[3:]), folder / "train-00001-of-00002.parquet")


#: layouts of ``formats/`` per dataset (``tests/data/test_text_formats.py`` reads every one)
FORMAT_LAYOUTS = {
    "imdb_hf": ("jsonl", "json_records", "json_columns", "csv", "saved_dict"),
    "arc": ("jsonl", "json_records", "json_columns", "saved_dict", "saved_single", "ai2_jsonl"),
    "wikipedia": ("jsonl", "json_records", "json_columns", "csv", "saved_single"),
}


def _splits(dataset: str) -> dict[str, list[dict]]:
    if dataset == "imdb_hf":
        hf = HERE / "imdb_hf" / "plain_text"
        return {split: pq.read_table(hf / f"{split}-00000-of-00001.parquet").to_pylist() for split in ("train", "test")}
    if dataset == "arc":
        return {"train": ARC_TRAIN, "test": ARC_TEST}
    rows = [{"id": i, "url": f"https://en.wikipedia.org/wiki?curid={i}", "title": t, "text": x} for i, t, x in WIKI]
    return {"train": rows}


def _ai2(record: dict) -> dict:
    """An ARC record as the original AI2 release nests it: ``question = {stem, choices: [{text, label}]}``."""
    choices = [{"text": t, "label": lab} for t, lab in zip(record["choices"]["text"], record["choices"]["label"])]
    return {"id": record["id"], "question": {"stem": record["question"], "choices": choices},
            "answerKey": record["answerKey"]}


def write_formats() -> None:
    import shutil

    import datasets

    for dataset, layouts in FORMAT_LAYOUTS.items():
        splits = _splits(dataset)
        for layout in layouts:
            folder = HERE / "formats" / dataset / layout
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for split, rows in splits.items():
                if layout in ("jsonl", "ai2_jsonl"):
                    convert = _ai2 if layout == "ai2_jsonl" else (lambda r: r)
                    name = f"{split}.jsonl" if layout == "jsonl" else f"ARC-Easy-{split.capitalize()}.jsonl"
                    (folder / name).write_text("".join(json.dumps(convert(r)) + "\n" for r in rows))
                elif layout == "json_records":
                    (folder / f"{split}.json").write_text(json.dumps(rows))
                elif layout == "json_columns":
                    (folder / f"{split}.json").write_text(json.dumps({k: [r[k] for r in rows] for k in rows[0]}))
                elif layout == "csv":
                    pd.DataFrame(rows).to_csv(folder / f"{split}.csv", index=False)
            if layout == "saved_dict":
                datasets.DatasetDict({split: datasets.Dataset.from_list(rows) for split, rows in splits.items()}
                                     ).save_to_disk(str(folder))
            elif layout == "saved_single":
                rows = [r for split_rows in splits.values() for r in split_rows]
                datasets.Dataset.from_list(rows).save_to_disk(str(folder))


def write_evidence() -> None:
    """The two hub parquet files of ``evidence/``, from the hand-written BLiMP JSON lines and SQuAD JSON."""
    folder = HERE / "evidence"
    blimp = [json.loads(line) for line in (folder / "anaphor_number_agreement.jsonl").read_text().splitlines()]
    hub = [{k: v for k, v in row.items() if not k.startswith("one_prefix")} for row in blimp]
    blimp_hub = folder / "blimp" / "anaphor_number_agreement"
    blimp_hub.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(hub), blimp_hub / "train-00000-of-00001.parquet")
    nested = json.loads((folder / "dev-v2.0.json").read_text())
    rows = [{"id": qa["id"], "title": article["title"], "context": paragraph["context"], "question": qa["question"],
             "answers": {"text": [a["text"] for a in qa["answers"]],
                         "answer_start": [a["answer_start"] for a in qa["answers"]]}}
            for article in nested["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    (folder / "squad_v2").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "squad_v2" / "validation-00000-of-00001.parquet")


if __name__ == "__main__":
    write_imdb()
    write_arc()
    write_wikipedia()
    write_formats()
    write_evidence()
