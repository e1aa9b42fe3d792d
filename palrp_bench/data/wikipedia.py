"""Wikipedia next-token prediction for Table 3, right (docs/protocol.md section 2, "Next-token prediction").

The first 2500 articles of ``wikimedia/wikipedia`` config ``20231101.en`` (train split, dataset order), each
tokenised with the tokenizer's special tokens (BOS first) and truncated by the tokenizer to 512 tokens
including BOS; no padding. The evaluation explains the arg-max next token after the last position, so
``label`` is None. ``sample_id`` = ``wiki-{article id}``; ``meta`` has ``title``, ``url``, ``n_tokens`` and
``truncated``.

The official code loaded ``split="train[:1%]"`` and took its first 2500 rows; from the hub this module streams
the same train split in the same order and stops after ``limit`` articles (no 20 GB download). A local copy
(the hub's ``20231101.en/train-*.parquet`` shards, JSON lines, CSV or a ``save_to_disk`` folder) is read
lazily, shard by shard in name order.
"""
from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

from ..errors import BadInputError
from .base import TextSample
from .text_common import (TextPool, check_max_length, check_text, check_tokenizer, check_unique_ids,
                          encode_batch_with_bos, first_record, hub_records, iter_local_records, load_hub_dataset)
from .registry import Option, register_dataset

HF_NAME = "wikimedia/wikipedia"
HF_CONFIG = "20231101.en"
OFFICIAL_LIMIT = 2500
WIKI_MAX_LENGTH = 512
#: mean real tokens per article under LLaMA tokenizers: the first articles nearly all exceed 512
MEAN_ARTICLE_TOKENS = 500
#: columns the protocol needs (the stable sample id, the text) and the descriptive ones read when present
_COLUMNS = ("id", "text")
_OPTIONAL = ("url", "title")

__all__ = ["load_wikipedia", "write_hub_layout"]


def _how_to_get() -> str:
    return (f"download the first shard of {HF_NAME} ({HF_CONFIG}/train-00000-of-00041.parquet) and pass "
            "path=<file or folder>, or run once with network access")


def load_wikipedia(tokenizer: Any, path: str | Path | None = None, limit: int | None = OFFICIAL_LIMIT,
                   max_length: int = WIKI_MAX_LENGTH) -> TextPool:
    """The first ``limit`` Wikipedia articles, tokenised with BOS and truncated to ``max_length`` tokens when first
    used (a :class:`~palrp_bench.data.text_common.TextPool`).

    ``path``: a parquet / JSON-lines / CSV file with columns ``id, text`` (``url, title`` read when present), a
    folder of ``train-*`` shards (hub layout), or a ``save_to_disk`` folder; ``None`` streams the hub (or reads its
    cache with ``HF_DATASETS_OFFLINE=1``).
    """
    check_tokenizer(tokenizer)
    check_max_length(max_length)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadInputError(f"limit must be a non-negative int or None, got {limit!r}", "e.g. limit=2500")
    how = _how_to_get()
    if path is None:
        stream = load_hub_dataset(HF_NAME, HF_CONFIG, split="train", streaming=True, what="Wikipedia",
                                  how_to_get=how)
        records = hub_records(stream, name=HF_NAME, how_to_get=how)
    else:
        records = iter_local_records(path, "train", _COLUMNS, what="Wikipedia", how_to_get=how, optional=_OPTIONAL)
    articles = [(f"wiki-{record['id']}", check_text(str(record["text"]), f"wiki-{record['id']}"),
                 str(record.get("title", "")), str(record.get("url", ""))) for record in islice(records, limit)]

    def build(positions: list[int]) -> list[TextSample]:
        chosen = [articles[p] for p in positions]
        encoded = encode_batch_with_bos(tokenizer, [a[1] for a in chosen], max_length=max_length,
                                        whats=[a[0] for a in chosen])
        return [TextSample(sample_id=sample_id, input_ids=ids, label=None,
                           meta={"title": title, "url": url, "n_tokens": len(ids), "n_pad": 0, "truncated": truncated})
                for (sample_id, _, title, url), (ids, truncated) in zip(chosen, encoded)]

    pool = TextPool([a[0] for a in articles], build)
    check_unique_ids(pool, "Wikipedia")
    return pool


def write_hub_layout(folder: str | Path, records: list[dict], n_shards: int = 1) -> None:
    """Articles (columns ``id``, ``text``, and ``url``, ``title`` where given) as the hub's
    ``20231101.en/train-{k:05d}-of-{n:05d}.parquet`` shards, split evenly in order (what ``task.path`` takes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(folder) / HF_CONFIG
    out.mkdir(parents=True, exist_ok=True)
    size = -(-len(records) // n_shards)
    for shard in range(n_shards):
        pq.write_table(pa.Table.from_pylist(records[shard * size:(shard + 1) * size]),
                       out / f"train-{shard:05d}-of-{n_shards:05d}.parquet")


def _check_copy(task, options, findings) -> None:
    """The head of a local copy: a table with the columns ``id`` and ``text`` and one readable record."""
    first_record(task.path, "train", _COLUMNS, what="Wikipedia", how_to_get=_how_to_get(), optional=_OPTIONAL)


@register_dataset(
    "wikipedia", options=(Option("max_length", WIKI_MAX_LENGTH, "tokens per article, BOS included"),),
    hub=HF_NAME, streamed=True, local_copy="<wikipedia> (20231101.en/train-00000-of-00041.parquet)",
    tokens=MEAN_ARTICLE_TOKENS, check=_check_copy)
def _wikipedia_dataset(path, limit, options, tokenizer) -> TextPool:
    """``task.dataset=wikipedia``: option ``max_length``."""
    return load_wikipedia(tokenizer, path=path, limit=limit, max_length=int(options["max_length"]))
