"""Save the embedded tiny models as ordinary checkpoints, for the README's "Your own model and data":

    python scripts/make_example_checkpoints.py my_models

writes ``my_models/sentiment_classifier`` (a LLaMA sequence classifier) and ``my_models/tiny_lm`` (a LLaMA causal LM),
each saved with ``save_pretrained`` together with its tokenizer, and ``my_models/shapes_vit`` (a timm ViT saved with
timm's ``save_for_hf``), the way you would save your own model; and ``my_models/reviews.csv``, 60 reviews the
classifier's tokenizer knows in the IMDB Kaggle format (``review,sentiment``: positive / negative, the classifier's
labels 0 / 1). Then ``palrp-bench model=hf model.source=my_models/<name> ...`` runs them like any checkpoint.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .imdb import IMDB_LABELS
from .synthetic_text import make_synthetic_classification, save_tiny_text_checkpoint
from .synthetic_vision import save_tiny_vit_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write the three checkpoints into")
    out = parser.parse_args(argv).out
    import pandas as pd

    for path in (save_tiny_text_checkpoint("cls", out / "sentiment_classifier"),
                 save_tiny_text_checkpoint("causal", out / "tiny_lm"), save_tiny_vit_checkpoint(out / "shapes_vit")):
        print(path)
    reviews = make_synthetic_classification(60, seed=1, split="test")
    pd.DataFrame({"review": [r.meta["text"] for r in reviews],
                  "sentiment": [IMDB_LABELS[r.label] for r in reviews]}).to_csv(out / "reviews.csv", index=False)
    print(out / "reviews.csv")
    return 0
