"""Needle in a haystack (docs/evidence.md, "Needle in a haystack"): one key-value sentence hidden at a chosen depth of
a haystack of a chosen length in the model's tokens, and a question at the end whose answer is the value.

A sample (an :class:`~palrp_bench.data.evidence_common.EvidenceSample` of task ``needle``) is

    <haystack before> The special magic number for <key> is <value>. <haystack after>

    Question: What is the special magic number for <key>?
    Answer: The special magic number for <key> is

with ``context`` the haystack with the needle, ``question`` the two lines after it, the evidence the value's
characters (the explained output is the value's first token, :func:`~palrp_bench.data.evidence_common.render`) and,
as the second evaluation mask ``key``, the key's characters in the needle. ``target`` is the value, ``foil`` another
value of as many digits whose first digit differs (for ``contrastive: true``). The answer's first token follows the
prompt directly: where the model's tokenizer splits the space before a number into a token of its own (LLaMA's), that
space ends the prompt.

The grid: every length of ``lengths`` (tokens of the whole causal input, BOS and question included) x every depth of
``depths`` (0 = the needle opens the haystack, 1 = it closes it) x ``n`` needles. Needle ``r`` has its own key,
value and haystack (the corpus' tokens ``[r * M, r * M + H)``, ``M`` the longest length, ``H`` the length's haystack
tokens), the same at every length and depth, so the cells of the grid differ only in length and depth. Depth
placement, in tokens: the needle goes before haystack token ``k = floor(depth * H + 1/2)``, moved back to the first
token of the sentence ``k`` is in (``task.options.align=sentence``, the default: a word after ``.``, ``!``, ``?`` or a
line break; the word's first token where no sentence starts at or before ``k``) or of its word (``align=word``: a
token starting at a space, or after one); depths 0 and 1 put the needle first and last, and the haystack's text is
kept as it is around it. ``meta["depth_tokens"]`` is the number of haystack tokens before the needle and
``meta["needle_token"]`` the index of its first token in the input ids. Lengths are exact for tokenizers that
tokenise a text's parts as they tokenise the whole (word-level ones); a BPE can merge across the needle's edges, so
the haystack is re-measured and adjusted until the input has ``length`` tokens (up to :data:`_FIT_ROUNDS` rounds;
``meta["n_tokens"]`` is the count reached).

Haystacks come from ``task.path`` (:func:`corpus_documents`): a plain ``.txt`` file (one document), a ``.jsonl`` /
``.json`` / ``.parquet`` / ``.csv`` table with a text column (``task.options.text_field``, default ``text``: e.g. the
hub's Wikipedia or PG-19 shards), or a folder of such files (all of them, sorted by path); documents are joined with a
blank line and read only as far as the haystacks need, and a corpus shorter than that is repeated (logged). Without
``task.path`` the haystack is the shipped synthetic filler (:func:`filler_documents`: seeded English sentences
without digits or the needle's words), which the embedded ``tiny_llama_needle`` (:data:`NEEDLE_VOCAB`, its word-level
tokenizer splitting numbers into digits) was trained on (``scripts/train_tiny_text.py --kind needle``).

Sample ids: ``needle-s{seed}-L{length}-d{depth in percent}-{r:03d}``; the results carry ``length`` and ``depth``
(:data:`palrp_bench.rundir.SAMPLE_COLUMNS`).
"""
from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BadInputError, MissingDataError
from .evidence_common import EvidencePool, EvidenceSample, collect_pool, render
from .registry import Option, register_dataset
from .synthetic_text import SPECIAL_TOKENS, SYNTHETIC_SPLITS, build_tiny_tokenizer
from .text_common import iter_local_records, one_line

__all__ = ["NEEDLE_TEMPLATE", "QUESTION_TEMPLATE", "DEFAULT_LENGTHS", "DEFAULT_DEPTHS", "NEEDLE_KEYS",
           "CORPUS_SUFFIXES", "NEEDLE_VOCAB", "NEEDLE_KIND", "NeedleDraw", "TokenStream", "filler_documents",
           "corpus_documents", "token_stream", "draw_needle", "build_needle", "make_needle_samples", "check_grid",
           "build_needle_tokenizer", "depth_label"]

log = logging.getLogger(__name__)

#: the needle and the question (RULER's wording of the passkey task)
NEEDLE_TEMPLATE = "The special magic number for {key} is {value}."
QUESTION_TEMPLATE = ("Question: What is the special magic number for {key}?\n"
                     "Answer: The special magic number for {key} is")
#: the default grid: lengths in tokens and depths 0 %, 10 %, ..., 100 %
DEFAULT_LENGTHS: tuple[int, ...] = (1024, 4096)
DEFAULT_DEPTHS: tuple[float, ...] = tuple(i / 10 for i in range(11))
DEFAULT_N = 4
DEFAULT_VALUE_DIGITS = 7
#: the keys a needle names (none of them is a word of the filler)
NEEDLE_KEYS: tuple[str, ...] = (
    "apple", "anchor", "banner", "candle", "castle", "comet", "crystal", "dragon", "falcon", "feather", "glacier",
    "harbor", "island", "jungle", "lantern", "marble", "meteor", "orchid", "panther", "pepper", "pyramid", "rocket",
    "saddle", "spider", "thunder", "tulip", "velvet", "violin", "walnut", "whistle", "willow", "zebra")
#: where a needle may go: before a sentence's first token, or a word's
ALIGNMENTS: tuple[str, ...] = ("sentence", "word")
#: the file types a corpus may hold (a folder: every such file under it)
CORPUS_SUFFIXES: tuple[str, ...] = (".txt", ".jsonl", ".json", ".parquet", ".csv")
#: the haystack is re-measured at most this often until the input has the length asked for
_FIT_ROUNDS = 4
#: tokens read past the last haystack's nominal end (room for the length fit)
_MARGIN = 64
_NEEDLE_CODE = 7  # the generators' stream code (synthetic_text: 0, 1; synthetic_evidence: 2-4)

# ------------------------------------------------------------------------------------------------ the filler
#: the filler's words: "The [adj] <person> <verb> the [adj] <place> [<time>]." sentences, a few "Then" openers
FILLER_ADJECTIVES: tuple[str, ...] = ("old", "young", "quiet", "tall", "tired", "happy", "careful", "brave", "small",
                                      "kind", "clever", "proud", "busy", "gentle", "calm", "lucky")
FILLER_PEOPLE: tuple[str, ...] = ("farmer", "teacher", "sailor", "painter", "doctor", "child", "merchant", "soldier",
                                  "traveler", "baker", "writer", "student", "hunter", "singer", "miller", "weaver")
FILLER_VERBS: tuple[str, ...] = ("walked to", "looked at", "waited near", "sat by", "rested under", "talked about",
                                 "painted", "visited", "found", "passed", "left", "watched", "cleaned", "crossed",
                                 "reached", "remembered")
FILLER_PLACES: tuple[str, ...] = ("river", "hill", "market", "bridge", "forest", "house", "road", "field", "village",
                                  "tower", "valley", "lake", "wall", "gate", "meadow", "station")
FILLER_TIMES: tuple[str, ...] = ("in the morning", "after the rain", "before dinner", "during the storm", "at night",
                                 "in the spring", "with a friend", "without a word", "on the way home",
                                 "at the end of the day")
FILLER_SENTENCES = (4, 9)


def _rng(seed: int, split: str, *index: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), SYNTHETIC_SPLITS[split], _NEEDLE_CODE, *map(int, index)])


def _pick(rng: np.random.Generator, items: Sequence):
    return items[int(rng.integers(0, len(items)))]


def _filler_sentence(rng: np.random.Generator) -> str:
    words = ["Then the" if rng.random() < 0.15 else "The"]
    if rng.random() < 0.5:
        words.append(_pick(rng, FILLER_ADJECTIVES))
    words += [_pick(rng, FILLER_PEOPLE), _pick(rng, FILLER_VERBS), "the"]
    if rng.random() < 0.3:
        words.append(_pick(rng, FILLER_ADJECTIVES))
    words.append(_pick(rng, FILLER_PLACES))
    if rng.random() < 0.4:
        words.append(_pick(rng, FILLER_TIMES))
    return " ".join(words) + "."


def filler_documents(seed: int = 0, split: str = "test") -> Iterator[str]:
    """The shipped synthetic filler: an endless, seeded stream of paragraphs of 4-9 English sentences (module
    docstring), with no digit and no word of the needle or the question."""
    for i in itertools.count():
        rng = _rng(seed, split, 0, i)
        n = int(rng.integers(FILLER_SENTENCES[0], FILLER_SENTENCES[1] + 1))
        yield " ".join(_filler_sentence(rng) for _ in range(n))


# ------------------------------------------------------------------------------------------------ a corpus
def _how_to_get(text_field: str) -> str:
    return (f"pass task.path=<.txt file, or .jsonl / .parquet with a {text_field!r} column, or a folder of them> "
            "(docs/evidence.md 'Needle in a haystack'), or unset it for the synthetic filler")


def corpus_files(path: str | Path) -> list[Path]:
    """The files of a corpus: ``path`` itself, or every file of :data:`CORPUS_SUFFIXES` under the folder ``path``
    (sorted by path); a missing path, another file type or a folder without such files is a one-line error."""
    path = Path(path).expanduser()
    if not path.exists():
        raise MissingDataError(f"needle corpus {path} does not exist", _how_to_get("text"))
    if path.is_file():
        if path.suffix not in CORPUS_SUFFIXES:
            raise BadInputError(f"needle corpus {path} is a {path.suffix or 'suffix-less'} file, not one of "
                                f"{', '.join(CORPUS_SUFFIXES)}", _how_to_get("text"))
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in CORPUS_SUFFIXES)
    if not files:
        raise MissingDataError(f"needle corpus folder {path} holds no {'/'.join(CORPUS_SUFFIXES)} file",
                               _how_to_get("text"))
    return files


def _table_documents(file: Path, text_field: str) -> Iterator[str]:
    what = "needle corpus"
    try:
        records = iter_local_records(file, "train", (text_field,), what=what, how_to_get=_how_to_get(text_field))
        for number, record in enumerate(records, 1):
            text = record[text_field]
            if text is None:
                continue
            if not isinstance(text, str):
                raise BadInputError(f"{what} file {file} record {number}: {text_field!r} holds "
                                    f"{type(text).__name__}, not text", "set task.options.text_field to a text column")
            yield text
    except BadInputError as err:
        if "lacks the columns" in err.problem:
            raise BadInputError(err.problem, f"set task.options.text_field=<its text column>; "
                                             f"{_how_to_get(text_field)}") from None
        raise


def corpus_documents(path: str | Path, text_field: str = "text") -> Iterator[str]:
    """The documents of a local corpus, lazily and in order (module docstring): a ``.txt`` file is one document,
    a table gives its column ``text_field`` row by row (empty ones skipped)."""
    for file in corpus_files(path):
        if file.suffix == ".txt":
            try:
                text = file.read_text(encoding="utf-8")
            except UnicodeDecodeError as err:
                raise BadInputError(f"needle corpus {file} is not UTF-8 text ({one_line(err, 80)})",
                                    "convert it to UTF-8, e.g. iconv -t utf-8") from None
            if text.strip():
                yield text
            continue
        for text in _table_documents(file, text_field):
            if text.strip():
                yield text


# ------------------------------------------------------------------------------------------------ tokens
@dataclass(frozen=True)
class TokenStream:
    """The corpus as one text (documents joined by a blank line) and the character range ``[start, end)`` of each of
    its tokens under the model's tokenizer."""

    text: str
    starts: list[int]
    ends: list[int]

    def __len__(self) -> int:
        return len(self.starts)

    def word_start(self, i: int) -> bool:
        """Whether token ``i`` begins a word: it starts the text, starts at a space, or follows one."""
        s = self.starts[i]
        return s == 0 or self.text[s].isspace() or self.text[s - 1].isspace()

    def sentence_start(self, i: int) -> bool:
        """Whether token ``i`` begins a sentence: a word's first token after the text's start, a line break or
        ``.``, ``!``, ``?`` (a closing quote or bracket between them allowed)."""
        if not self.word_start(i):
            return False
        p = self.starts[i] - 1
        while p >= 0 and self.text[p] in " \t":
            p -= 1
        while p >= 0 and self.text[p] in "\"')]\u201d\u2019":
            p -= 1
        return p < 0 or self.text[p] in ".!?\n"


def token_stream(documents: Iterable[str], tokenizer: Any, n_tokens: int, *, what: str) -> TokenStream:
    """At least ``n_tokens`` tokens of ``documents`` (module docstring): each document is tokenised alone (no special
    tokens) and shifted to its place in the joined text; a corpus that runs out is read again from its start (logged),
    one without any token is a one-line error."""
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    base = 0  # where the next piece starts in the joined text
    documents = iter(documents)
    seen: list[str] = []
    repeats = 0
    while len(starts) < n_tokens:
        doc = next(documents, None)
        if doc is None:
            if not starts:  # no document, or none with a token
                raise BadInputError(f"{what} holds no text", _how_to_get("text"))
            if not repeats:
                log.warning("%s holds %d tokens, fewer than the %d the haystacks need: it is repeated", what,
                            len(starts), n_tokens)
            repeats += 1
            documents = iter(seen)
            continue
        if repeats == 0:
            seen.append(doc)
        piece = "\n\n" + doc if pieces else doc  # the blank line is tokenised with the document it opens
        encoded = tokenizer(piece, add_special_tokens=False, return_offsets_mapping=True)
        for s, e in encoded["offset_mapping"]:
            if e > s:
                starts.append(base + int(s))
                ends.append(base + int(e))
        pieces.append(piece)
        base += len(piece)
    return TokenStream("".join(pieces), starts, ends)


# ------------------------------------------------------------------------------------------------ samples
@dataclass(frozen=True)
class NeedleDraw:
    """What needle ``r`` hides: its key, its value and the foil (module docstring)."""

    key: str
    value: str
    foil: str


def draw_needle(seed: int, r: int, value_digits: int, split: str = "test") -> NeedleDraw:
    """The key, value and foil of needle ``r`` (seeded by ``(seed, split, r)``): a key of :data:`NEEDLE_KEYS`, a
    ``value_digits``-digit value without leading zero and a foil of as many digits with another first digit."""
    rng = _rng(seed, split, 1, r)
    key = _pick(rng, NEEDLE_KEYS)
    first = int(rng.integers(1, 10))
    value = str(first) + "".join(str(int(d)) for d in rng.integers(0, 10, size=value_digits - 1))
    other = int(rng.integers(1, 9))
    foil = str(other + (other >= first)) + "".join(str(int(d)) for d in rng.integers(0, 10, size=value_digits - 1))
    return NeedleDraw(key, value, foil)


def _answer_lead(tokenizer: Any, value: str) -> str:
    """The whitespace the prompt ends with so that the value's first token comes next: ``" "`` where the tokenizer
    splits the space before the number into a token of its own, else nothing."""
    ids = tokenizer(" " + value, add_special_tokens=False)["input_ids"]
    return " " if ids and not tokenizer.decode([ids[0]]).strip() else ""


def _place(stream: TokenStream, start: int, h: int, depth: float, align: str = "sentence") -> int:
    """Haystack tokens before the needle (module docstring): ``k = floor(depth * h + 1/2)``, moved back to the first
    token of the sentence (``align="sentence"``; of the word where the haystack has no sentence start at or before
    ``k``) or of the word (``"word"``) token ``k`` is in; ``h`` (the needle last) stays."""
    k = min(h, int(math.floor(depth * h + 0.5)))
    if k in (0, h):
        return k
    if align == "sentence":
        j = k
        while j > 0 and not stream.sentence_start(start + j):
            j -= 1
        if j > 0 or stream.sentence_start(start):
            return j
    while k > 0 and not stream.word_start(start + k):
        k -= 1
    return k


def _assemble(stream: TokenStream, start: int, h: int, k: int, needle: str) -> tuple[str, int]:
    """The haystack tokens ``[start, start + h)`` with ``needle`` before the ``k``-th: ``(context, the needle's
    character offset)``. The haystack's text is kept as it is; a space separates the needle from a neighbour that
    does not already end or start with whitespace."""
    if h == 0:
        return needle, 0
    first, last = stream.starts[start], stream.ends[start + h - 1]
    cut = stream.starts[start + k] if k < h else last
    before, after = stream.text[first:cut], stream.text[cut:last]
    head = before + (" " if before and not before[-1].isspace() else "")
    return head + needle + (" " if after and not after[0].isspace() else "") + after, len(head)


def _span(text: str, word: str, at: int) -> tuple[int, int]:
    i = text.index(word, at)
    return i, i + len(word)


def build_needle(stream: TokenStream, tokenizer: Any, *, start: int, length: int, depth: float, draw: NeedleDraw,
                 sample_id: str, meta: dict | None = None, align: str = "sentence") -> EvidenceSample:
    """One sample (module docstring): the haystack from token ``start`` of ``stream``, sized so that the causal
    input has ``length`` tokens, the needle at ``depth``. A length shorter than the needle and the question is a
    one-line error."""
    needle = NEEDLE_TEMPLATE.format(key=draw.key, value=draw.value)
    question = QUESTION_TEMPLATE.format(key=draw.key) + _answer_lead(tokenizer, draw.value)

    def sample(h: int) -> tuple[EvidenceSample, int, int]:
        k = _place(stream, start, h, depth, align)
        context, at = _assemble(stream, start, h, k, needle)
        key = _span(context, draw.key, at)
        value = _span(context, draw.value, key[1])
        return EvidenceSample(sample_id, "needle", draw.value, draw.foil, (value,), context=context,
                              question=question, extra_evidence={"key": (key,)}, meta=dict(meta or {})), k, at

    def measure(s: EvidenceSample, at: int) -> tuple[int, int]:
        """Tokens of the causal input, and the index of the needle's first token (``at``: its first character; the
        context opens the causal text)."""
        encoded = tokenizer(render(s, "causal").text, return_offsets_mapping=True)
        first = next(i for i, (a, b) in enumerate(encoded["offset_mapping"]) if b > a and b > at)
        return len(encoded["input_ids"]), first

    overhead, _ = measure(*sample(0)[::2])
    if overhead >= length:
        raise BadInputError(f"needle length {length} leaves no haystack: the needle, the question and the special "
                            f"tokens alone take {overhead} tokens",
                            f"use task.options.lengths of at least {overhead + 16}")
    h = length - overhead
    for _ in range(_FIT_ROUNDS):
        if start + h > len(stream):
            raise BadInputError(f"needle haystack of {h} tokens runs past the {len(stream)} tokens read",
                                "use fewer or shorter lengths")
        built, k, at = sample(h)
        n, first = measure(built, at)
        if n == length or h + length - n < 0:
            break
        h += length - n
    built.meta.update(length=int(length), depth=float(depth), haystack_tokens=int(h), depth_tokens=int(k),
                      needle_token=int(first), n_tokens=int(n), key=draw.key, value=draw.value)
    return built


def depth_label(depth: float) -> str:
    """A depth in percent as the sample id writes it (``0.25`` -> ``25``; ``0.125`` -> ``12.5``)."""
    return f"{round(float(depth) * 100, 6):g}"


def check_grid(options: dict) -> tuple[list[int], list[float]]:
    """``(lengths, depths)`` of the options, checked (one-line :class:`BadInputError`): positive integer lengths,
    depths in [0, 1] with distinct percent labels, ``n`` >= 1, ``value_digits`` in 1..18."""
    lengths, depths = options["lengths"], options["depths"]
    if not isinstance(lengths, Sequence) or isinstance(lengths, str) or not lengths or any(
            isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1 for x in lengths):
        raise BadInputError(f"task.options.lengths must be a list of positive token counts, got {lengths!r}",
                            "e.g. task.options.lengths=[1024,4096]")
    if not isinstance(depths, Sequence) or isinstance(depths, str) or not depths or any(
            isinstance(x, bool) or not isinstance(x, (int, float, np.number)) or not 0 <= x <= 1 for x in depths):
        raise BadInputError(f"task.options.depths must be a list of fractions in [0, 1], got {depths!r}",
                            "e.g. task.options.depths=[0,0.5,1]")
    if options["align"] not in ALIGNMENTS:
        raise BadInputError(f"task.options.align must be one of {ALIGNMENTS}, got {options['align']!r}",
                            "set task.options.align=sentence or word")
    if len({depth_label(d) for d in depths}) != len(depths) or len(set(lengths)) != len(lengths):
        raise BadInputError(f"task.options.lengths {list(lengths)} / depths {list(depths)} repeat a value",
                            "list each length and depth once")
    for name, low, high in (("n", 1, None), ("value_digits", 1, 18)):
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            raise BadInputError(f"task.options.{name} must be an int in [{low}, {high or 'inf'}], got {value!r}",
                                f"e.g. task.options.{name}={low if name == 'n' else DEFAULT_VALUE_DIGITS}")
    return [int(x) for x in lengths], [float(x) for x in depths]


def make_needle_samples(tokenizer: Any, documents: Iterable[str], *, lengths: Sequence[int], depths: Sequence[float],
                        n: int, seed: int = 0, value_digits: int = DEFAULT_VALUE_DIGITS, align: str = "sentence",
                        split: str = "test", source: str = "synthetic_filler",
                        limit: int | None = None) -> list[EvidenceSample]:
    """The grid's samples (module docstring), needle by needle, each needle's lengths and depths in the order given;
    ``limit`` stops after that many."""
    if not getattr(tokenizer, "is_fast", False):
        raise BadInputError("needle haystacks are cut at token offsets, which needs a fast tokenizer",
                            "point model.tokenizer at a tokenizer with a tokenizer.json")
    total = len(lengths) * len(depths) * n
    count = total if limit is None else min(total, int(limit))
    needles = math.ceil(count / (len(lengths) * len(depths))) if count else 0
    stride = max(lengths)
    what = f"needle corpus ({source})"
    stream = token_stream(documents, tokenizer, needles * stride + _MARGIN, what=what) if needles \
        else TokenStream("", [], [])
    samples: list[EvidenceSample] = []
    for r in range(needles):
        draw = draw_needle(seed, r, value_digits, split)
        for length in lengths:
            for depth in depths:
                if len(samples) == count:
                    return samples
                sid = f"needle-s{int(seed)}-L{int(length)}-d{depth_label(depth)}-{r:03d}"
                samples.append(build_needle(stream, tokenizer, start=r * stride, length=length, depth=depth,
                                            draw=draw, sample_id=sid, align=align,
                                            meta={"source": source, "evidence_source": "template", "replicate": r,
                                                  "seed": int(seed)}))
    return samples


# ------------------------------------------------------------------------------------------------ tiny model
#: the asset folder (``model.source``) of the embedded needle model
NEEDLE_KIND = "needle"
#: the tiny needle tokenizer's rule: a run of letters, one digit, one punctuation character, or a newline
NEEDLE_TOKEN_PATTERN = r"[^\W\d_]+|\d|[^\w\s]|\n"
_PROMPT_WORDS = ("The", "special", "magic", "number", "for", "is", "Question", "What", "Answer", "Then", "the", "a",
                 "end", "of", "day", "way", "home", "with", "without", "word", "friend", "rain", "storm", "spring",
                 "morning", "night", "dinner", "in", "after", "before", "during", "at", "on", "to", "near", "by",
                 "under", "about")


def _build_vocab() -> dict[str, int]:
    words = [*SPECIAL_TOKENS, "\n", ".", ",", "?", ":", *map(str, range(10)), *_PROMPT_WORDS, *NEEDLE_KEYS,
             *FILLER_ADJECTIVES, *FILLER_PEOPLE, *(w for v in FILLER_VERBS for w in v.split()), *FILLER_PLACES,
             *(w for t in FILLER_TIMES for w in t.split())]
    return {word: i for i, word in enumerate(dict.fromkeys(words))}  # each word at its first place


#: token -> id of the needle model's tokenizer (special tokens first: ``<unk>=0, <s>=1, </s>=2``)
NEEDLE_VOCAB: dict[str, int] = _build_vocab()


def build_needle_tokenizer():
    """The word-level fast tokenizer of the embedded needle model over :data:`NEEDLE_VOCAB`, numbers split into
    digits (what ``assets/text/needle`` holds)."""
    return build_tiny_tokenizer(NEEDLE_VOCAB, pattern=NEEDLE_TOKEN_PATTERN, max_length=4096)


# ------------------------------------------------------------------------------------------------ the dataset
def _options_check(task, options, findings) -> None:
    """The grid options, checked with or without ``task.path`` (:func:`check_grid`)."""
    try:
        check_grid(options)
    except BadInputError as err:
        findings.add(f"{err.problem} ({task.name})", err.fix)


def _check_corpus(task, options, findings) -> None:
    """The preflight reads the corpus' first document in its format."""
    first = next(corpus_documents(task.path, str(options["text_field"])), None)
    if first is None:
        raise BadInputError(f"needle corpus {task.path} holds no text", _how_to_get(str(options["text_field"])))


def _mean_tokens(options: dict) -> float | None:
    try:
        lengths, _ = check_grid(options)
    except BadInputError:
        return None
    return float(np.mean(lengths))


def _pool(options: dict) -> int | None:
    try:
        lengths, depths = check_grid(options)
    except BadInputError:
        return None
    return len(lengths) * len(depths) * int(options["n"])


def _longest(options: dict) -> int | None:
    try:
        lengths, _ = check_grid(options)
    except BadInputError:
        return None
    return max(lengths)


@register_dataset(
    "needle",
    options=(Option("lengths", list(DEFAULT_LENGTHS), "input lengths in tokens (BOS and question included)",
                    (list, tuple)),
             Option("depths", list(DEFAULT_DEPTHS), "needle depths, fractions of the haystack (0: first, 1: last)",
                    (list, tuple)),
             Option("n", DEFAULT_N, "needles (key, value, haystack) per length and depth"),
             Option("seed", 0, "seed of the needles and of the synthetic filler"),
             Option("value_digits", DEFAULT_VALUE_DIGITS, "digits of the magic number"),
             Option("align", "sentence", "the needle opens the sentence (sentence) or the word (word) its depth "
                                         "falls in"),
             Option("text_field", "text", "the text column of a .jsonl / .parquet / .csv corpus")),
    local_copy="<corpus .txt / .jsonl / .parquet, or a folder of them>", pool_size=_pool, tokens=_mean_tokens,
    longest_tokens=_longest, check=_check_corpus, requirements=_options_check)
def _needle_dataset(path, limit, options, tokenizer) -> EvidencePool:
    """``task.dataset=needle``: the grid of ``lengths`` x ``depths`` x ``n`` needles in ``task.path``'s corpus or the
    synthetic filler (module docstring)."""
    if tokenizer is None:
        raise BadInputError("needle haystacks are measured in the model's tokens, but no tokenizer was given",
                            "load the dataset with the model's tokenizer")
    lengths, depths = check_grid(options)
    seed = int(options["seed"])
    if path is None:
        documents, source = filler_documents(seed), "synthetic_filler"
    else:
        documents = corpus_documents(path, str(options["text_field"]))
        source = Path(path).suffix.lstrip(".") or "folder"
    samples = make_needle_samples(tokenizer, documents, lengths=lengths, depths=depths, n=int(options["n"]), seed=seed,
                                  value_digits=int(options["value_digits"]), align=str(options["align"]), source=source,
                                  limit=limit)
    return collect_pool(samples, None, what="needle", source=source if path is None else str(path))
