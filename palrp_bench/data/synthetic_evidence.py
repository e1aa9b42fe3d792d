"""Synthetic evidence tasks and the shipped tiny evidence model (docs/evaluation.md, "Evidence data" and "The
embedded suites").

Three template tasks in the shape of the real ones, with the evidence known by construction:

* ``synthetic_sva`` (:func:`make_synthetic_sva`): "[Opener,] The [adj] N1 (prep the [adj] N2){0-2} VERB adj." --
  the verb (``is/are``, ``was/were``, ``seems/seem``, ``looks/look``, ``remains/remain``) agrees with N1, while the
  attractors N2 have a random number. Evidence = N1; target = the agreeing form, foil = the other number.
* ``synthetic_ra`` (:func:`make_synthetic_ra`): "[Opener,] The [adj] N1 | Name [prep the N2] VERBED REFLEXIVE."
  -- the reflexive agrees with the subject (``himself`` / ``herself`` by the noun's gender, ``themselves`` for
  plurals); an attractor N2 of any number and gender may stand between. Evidence = the subject's head word (N1 or
  the name; option ``evidence=head``, the default here, which the shipped numbers use) or its noun phrase
  (``evidence=phrase``: "The [adj] N1" or the name, as the real ra task's default); foil = the reflexive of the
  other number (a plural subject gets its gender's singular one), as in BLiMP.
* ``synthetic_qa`` (:func:`make_synthetic_qa`): a context of 2-3 facts about different people, each of another
  relation ("Tom lives in Paris. Anna has a cat."), and a question about one of them ("Where does Tom live?"); the
  answer is one word of the context (the evidence). The foil is an object of the same kind that is not in the
  context (``Rome``), so only the context tells the target from the foil: the evidence is the one reason for the
  preference. (The SQuAD rule, another answer of the paragraph, would contrast objects of different kinds here,
  which the question alone decides; and contrasting two people's objects of one kind, a two-step lookup, is
  beyond what the tiny model learns in minutes on a CPU.)

Samples are :class:`~palrp_bench.data.evidence_common.EvidenceSample` (``meta["evidence_source"] = "template"``),
deterministic: sample ``i`` of ``(task, seed, split)`` comes from its own generator seeded with
``(seed, split, task, i)``; ``sample_id`` = ``synth-{sva|ra|qa}-{split}-s{seed}-{i:05d}``.

The tiny model ``tiny_llama_evidence`` (asset folder ``assets/text/evidence``) is the suite's tiny LLaMA
(data/synthetic_text.py: RoPE, 2 layers, hidden 64, 4 heads / 2 KV heads) with its own word-level fast tokenizer
over :data:`EVIDENCE_VOCAB` (shipped in the same folder; the suite's shared tokenizer lacks ``are``, ``himself``,
...), trained on the three tasks by ``scripts/train_tiny_text.py --kind evidence``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..errors import BadInputError
from .base import check_generator_args
from .evidence_common import EvidencePool, EvidenceSample, collect_pool, render
from .registry import Option, register_dataset
from .synthetic_text import ASSET_DIR, SPECIAL_TOKENS, SYNTHETIC_SPLITS, build_tiny_tokenizer

#: The asset folder (``model.source``) of the evidence model.
EVIDENCE_KIND = "evidence"
EVIDENCE_DIR = ASSET_DIR / EVIDENCE_KIND
SYNTHETIC_EVIDENCE_TASKS: tuple[str, ...] = ("sva", "ra", "qa")
_TASK_CODES = {"sva": 2, "ra": 3, "qa": 4}  # 0 and 1 are the text suite's (data/synthetic_text.py)
DEFAULT_N = 128
#: mean real tokens per sample under the evidence model's tokenizer, counted from the generators; the qa prompts'
#: context tokens (2000 samples, the tiny T5's tokenizer)
MEAN_TOKENS = {"sva": 8.0, "ra": 6.8, "qa": 25.4}
MEAN_CONTEXT_TOKENS = {"qa": 11.7}

OPENERS: tuple[str, ...] = ("Today", "Yesterday", "Sometimes", "Again")
ADJECTIVES: tuple[str, ...] = ("old", "new", "small", "big", "red")
PREPOSITIONS: tuple[str, ...] = ("near", "by", "behind", "under", "beside", "above")
#: sva: (singular, plural) nouns and present-tense verbs.
SVA_NOUNS: tuple[tuple[str, str], ...] = (
    ("key", "keys"), ("dog", "dogs"), ("book", "books"), ("car", "cars"), ("bird", "birds"), ("tree", "trees"),
    ("door", "doors"), ("lamp", "lamps"), ("box", "boxes"), ("chair", "chairs"), ("cup", "cups"),
    ("coin", "coins"), ("child", "children"), ("window", "windows"), ("table", "tables"))
SVA_VERBS: tuple[tuple[str, str], ...] = (("is", "are"), ("was", "were"), ("seems", "seem"), ("looks", "look"),
                                          ("remains", "remain"))
#: ra: (singular, plural, gender) person nouns, names by gender, past-tense verbs, reflexives.
RA_NOUNS: tuple[tuple[str, str, str], ...] = (
    ("boy", "boys", "m"), ("man", "men", "m"), ("king", "kings", "m"), ("father", "fathers", "m"),
    ("brother", "brothers", "m"), ("girl", "girls", "f"), ("woman", "women", "f"), ("queen", "queens", "f"),
    ("mother", "mothers", "f"), ("sister", "sisters", "f"))
RA_NAMES: tuple[tuple[str, str], ...] = (("John", "m"), ("Peter", "m"), ("David", "m"), ("Mary", "f"),
                                         ("Susan", "f"), ("Julia", "f"))
RA_VERBS: tuple[str, ...] = ("hurt", "saw", "helped", "liked", "praised", "blamed", "washed", "trusted")
REFLEXIVES: dict[str, str] = {"m": "himself", "f": "herself", "plural": "themselves"}
#: qa: people, and per relation (fact template, question template, objects).
QA_NAMES: tuple[str, ...] = ("Tom", "Anna", "Ben", "Lisa", "Sam", "Emma", "Max", "Mia", "Leo", "Zoe")
QA_RELATIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("{name} lives in {x}.", "Where does {name} live?",
     ("Paris", "Rome", "Berlin", "Madrid", "Oslo", "Vienna", "Lisbon", "Prague")),
    ("{name} has a {x}.", "What does {name} have?",
     ("cat", "horse", "rabbit", "parrot", "hamster", "goat", "pony", "turtle")),
    ("{name} likes {x}.", "What does {name} like?",
     ("apples", "bread", "cheese", "rice", "soup", "pasta", "cake", "tea")),
)
QA_FACTS = (2, 3)
#: Words of the qa prompt and of the templates that are not in the lists above.
_OTHER_WORDS: tuple[str, ...] = ("Context", "Question", "Answer", "The", "the", "lives", "in", "Where", "does",
                                 "live", "has", "a", "What", "have", "likes", "like")
_SYMBOLS: tuple[str, ...] = ("\n", ".", ",", ":", "?")

__all__ = ["EVIDENCE_VOCAB", "EVIDENCE_KIND", "build_evidence_tokenizer", "load_evidence_tokenizer",
           "make_synthetic_sva", "make_synthetic_ra", "make_synthetic_qa", "make_synthetic_evidence",
           "causal_batch", "contrast_logits"]


def _build_vocab() -> dict[str, int]:
    words = [*SPECIAL_TOKENS, *_SYMBOLS, *_OTHER_WORDS, *OPENERS, *ADJECTIVES, *PREPOSITIONS,
             *(w for pair in SVA_NOUNS for w in pair), *(w for pair in SVA_VERBS for w in pair),
             *(w for n in RA_NOUNS for w in n[:2]), *(n for n, _ in RA_NAMES), *RA_VERBS, *REFLEXIVES.values(),
             *QA_NAMES, *(x for _, _, objects in QA_RELATIONS for x in objects)]
    vocab: dict[str, int] = {}
    for word in words:
        vocab.setdefault(word, len(vocab))
    return vocab


#: Token -> id of the evidence model's tokenizer (special tokens first, as the suite's: ``<unk>=0, <s>=1, </s>=2``).
EVIDENCE_VOCAB: dict[str, int] = _build_vocab()


def build_evidence_tokenizer():
    """The word-level fast tokenizer of the evidence model (offsets, BOS added; what ``assets/text/evidence``
    holds)."""
    return build_tiny_tokenizer(EVIDENCE_VOCAB)


def load_evidence_tokenizer():
    """The shipped tokenizer of the evidence model (offline)."""
    from .synthetic_text import load_tiny_tokenizer

    return load_tiny_tokenizer(kind=EVIDENCE_KIND)


# ----------------------------------------------------------------------------------------------- generators
def _rng(task: str, seed: int, split: str, i: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), SYNTHETIC_SPLITS[split], _TASK_CODES[task], int(i)])


def _pick(rng: np.random.Generator, items: Sequence):
    return items[int(rng.integers(0, len(items)))]


class _Builder:
    """Joins words into a sentence with the tokenizer's spacing (a space before words, none before punctuation),
    remembering the character span of chosen words."""

    def __init__(self):
        self.text = ""

    def add(self, word: str) -> tuple[int, int]:
        if self.text and word not in _SYMBOLS:
            self.text += " "
        start = len(self.text)
        self.text += word
        return start, len(self.text)


def _opener(rng: np.random.Generator, builder: _Builder) -> str:
    """An optional "Opener ," (probability 1/3); returns the determiner to use next ("The" or "the")."""
    if rng.random() < 1 / 3:
        builder.add(_pick(rng, OPENERS))
        builder.add(",")
        return "the"
    return "The"


def _sample_id(task: str, split: str, seed: int, i: int) -> str:
    return f"synth-{task}-{split}-s{int(seed)}-{i:05d}"


def make_synthetic_sva(n: int, seed: int = 0, split: str = "test") -> list[EvidenceSample]:
    """``n`` deterministic subject-verb agreement samples (module docstring)."""
    check_generator_args(n, seed, split, SYNTHETIC_SPLITS)
    samples = []
    for i in range(int(n)):
        rng = _rng("sva", seed, split, i)
        b = _Builder()
        b.add(_opener(rng, b))
        if rng.random() < 0.5:
            b.add(_pick(rng, ADJECTIVES))
        plural = bool(rng.integers(0, 2))
        subject = b.add(_pick(rng, SVA_NOUNS)[plural])
        n_pp = int(rng.choice(3, p=[0.2, 0.5, 0.3]))
        attractors = []
        for _ in range(n_pp):
            b.add(_pick(rng, PREPOSITIONS))
            b.add("the")
            if rng.random() < 0.3:
                b.add(_pick(rng, ADJECTIVES))
            number = bool(rng.integers(0, 2))
            attractors.append("plural" if number else "singular")
            b.add(_pick(rng, SVA_NOUNS)[number])
        verb = _pick(rng, SVA_VERBS)
        prefix = b.text
        samples.append(EvidenceSample(
            sample_id=_sample_id("sva", split, seed, i), task="sva", target=verb[plural], foil=verb[not plural],
            evidence=(subject,), prefix=prefix, suffix=f" {_pick(rng, ADJECTIVES)}.",
            meta={"source": "synthetic", "evidence_source": "template", "split": split, "seed": int(seed), "index": i,
                  "subject_number": "plural" if plural else "singular", "attractors": attractors,
                  "n_attractors": sum(a != ("plural" if plural else "singular") for a in attractors)}))
    return samples


def make_synthetic_ra(n: int, seed: int = 0, split: str = "test", evidence: str = "head") -> list[EvidenceSample]:
    """``n`` deterministic reflexive anaphora samples (module docstring); ``evidence``: ``head`` or ``phrase``."""
    check_generator_args(n, seed, split, SYNTHETIC_SPLITS)
    if evidence not in ("head", "phrase"):
        raise BadInputError(f"unknown ra evidence {evidence!r}", "set task.options.evidence to head or phrase")
    samples = []
    for i in range(int(n)):
        rng = _rng("ra", seed, split, i)
        b = _Builder()
        determiner = _opener(rng, b)
        if rng.random() < 0.3:
            name, gender = _pick(rng, RA_NAMES)
            subject, plural = b.add(name), False
            phrase_start = subject[0]
        else:
            phrase_start = b.add(determiner)[0]
            if rng.random() < 0.4:
                b.add(_pick(rng, ADJECTIVES))
            singular_form, plural_form, gender = _pick(rng, RA_NOUNS)
            plural = bool(rng.integers(0, 2))
            subject = b.add(plural_form if plural else singular_form)
        attractor = None
        if rng.random() < 0.6:
            b.add(_pick(rng, PREPOSITIONS))
            b.add("the")
            noun = _pick(rng, RA_NOUNS)
            attractor = noun[int(rng.integers(0, 2))]
            b.add(attractor)
        b.add(_pick(rng, RA_VERBS))
        target = REFLEXIVES["plural"] if plural else REFLEXIVES[gender]
        foil = REFLEXIVES[gender] if plural else REFLEXIVES["plural"]
        samples.append(EvidenceSample(
            sample_id=_sample_id("ra", split, seed, i), task="ra", target=target, foil=foil,
            evidence=(subject if evidence == "head" else (phrase_start, subject[1]),), prefix=b.text, suffix=".",
            meta={"source": "synthetic", "evidence_source": "template", "split": split, "seed": int(seed), "index": i,
                  "subject_number": "plural" if plural else "singular", "gender": gender, "attractor": attractor,
                  "evidence_unit": evidence}))
    return samples


def make_synthetic_qa(n: int, seed: int = 0, split: str = "test") -> list[EvidenceSample]:
    """``n`` deterministic one-word extractive qa samples (module docstring)."""
    check_generator_args(n, seed, split, SYNTHETIC_SPLITS)
    samples = []
    for i in range(int(n)):
        rng = _rng("qa", seed, split, i)
        k = int(rng.integers(QA_FACTS[0], QA_FACTS[1] + 1))
        relations = [QA_RELATIONS[int(j)] for j in rng.permutation(len(QA_RELATIONS))[:k]]
        names = [QA_NAMES[int(j)] for j in rng.permutation(len(QA_NAMES))[:k]]
        context, spans, things = "", [], []
        for name, (fact, _, objects) in zip(names, relations):
            thing = _pick(rng, objects)
            sentence = fact.format(name=name, x=thing)
            start = len(context) + (1 if context else 0) + len(fact[:fact.index("{x}")].format(name=name))
            context = f"{context} {sentence}" if context else sentence
            spans.append((start, start + len(thing)))
            things.append(thing)
        asked = int(rng.integers(0, k))
        _, question, objects = relations[asked]
        absent = [x for x in objects if x != things[asked]]
        samples.append(EvidenceSample(
            sample_id=_sample_id("qa", split, seed, i), task="qa", target=things[asked], foil=_pick(rng, absent),
            evidence=(spans[asked],), context=context, question=question.format(name=names[asked]),
            meta={"source": "synthetic", "evidence_source": "template", "split": split, "seed": int(seed), "index": i,
                  "n_facts": k, "answer": things[asked]}))
    return samples


_MAKERS = {"sva": make_synthetic_sva, "ra": make_synthetic_ra, "qa": make_synthetic_qa}


def make_synthetic_evidence(task: str, n: int, seed: int = 0, split: str = "test") -> list[EvidenceSample]:
    """:func:`make_synthetic_sva` / ``_ra`` / ``_qa`` by task name."""
    if task not in _MAKERS:
        raise BadInputError(f"unknown synthetic evidence task {task!r}", f"use one of {SYNTHETIC_EVIDENCE_TASKS}")
    return _MAKERS[task](n, seed, split)


# ----------------------------------------------------------------------------------------------- the model
def causal_batch(tokenizer: Any, samples: Sequence[EvidenceSample]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of the causal texts of ``samples`` (evidence_common.render), BOS first,
    right-padded with the tokenizer's pad id."""
    texts = [render(s, "causal").text for s in samples]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    return encoded["input_ids"], encoded["attention_mask"]


def _first_token(tokenizer: Any, word: str) -> int:
    ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
    if not ids or ids[0] == tokenizer.unk_token_id:
        raise BadInputError(f"the word {word!r} is not in the evidence tokenizer's vocabulary",
                            "use samples of the synthetic evidence tasks")
    return ids[0]


@torch.no_grad()
def contrast_logits(model: Any, tokenizer: Any, samples: Sequence[EvidenceSample],
                    batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logit of the target's first token, logit of the foil's first token)`` [N] at the position after each
    sample's causal text; a sample is answered correctly when the first exceeds the second."""
    targets, foils = [], []
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        ids, mask = causal_batch(tokenizer, chunk)
        logits = model(input_ids=ids, attention_mask=mask).logits
        last = logits[torch.arange(len(chunk)), mask.sum(-1) - 1]
        t = torch.tensor([_first_token(tokenizer, s.target) for s in chunk])
        f = torch.tensor([_first_token(tokenizer, s.foil) for s in chunk])
        targets.append(last.gather(1, t[:, None])[:, 0])
        foils.append(last.gather(1, f[:, None])[:, 0])
    return torch.cat(targets), torch.cat(foils)


def _register(task: str) -> None:
    @register_dataset(f"synthetic_{task}",
                      options=(Option("n", DEFAULT_N, "samples"), Option("seed", 0, "generator seed"),
                               Option("split", "test", "train | val | test"))
                      + ((Option("evidence", "head", "the subject's head word or its noun phrase: head | phrase"),)
                         if task == "ra" else ()),
                      pool_size=lambda options: options["n"], tokens=MEAN_TOKENS[task],
                      context_tokens=MEAN_CONTEXT_TOKENS.get(task))
    def _load(path, limit, options, tokenizer) -> EvidencePool:
        n = int(options["n"])
        if limit is not None:
            n = min(n, int(limit))
        extra = {"evidence": str(options["evidence"])} if task == "ra" else {}
        samples = _MAKERS[task](n, int(options["seed"]), str(options["split"]), **extra)
        return collect_pool(samples, None, what=f"synthetic_{task}", source="synthetic")

    _load.__doc__ = (f"``task.dataset=synthetic_{task}``: options ``n`` (default {DEFAULT_N}), ``seed`` (0), "
                     "``split`` (test | val | train)" + ("; ``evidence`` (head | phrase)." if task == "ra" else "."))


for _task in SYNTHETIC_EVIDENCE_TASKS:
    _register(_task)
