"""Embedded synthetic text suite and its shipped tiny LLaMA models (offline stand-ins for IMDB, ARC and Wikipedia).

Two tasks over one word-level vocabulary, both decided by *which* tokens appear *and where* they appear, so
positional relevance (docs/protocol.md section 1, RoPE sinks) carries real signal:

* **classification** (stand-in for IMDB, :func:`make_synthetic_classification`): a "review" of 12-24 filler
  words containing some trigger words (``superb``, ``brilliant``, ...) and look-alike decoys (``decent``,
  ``okay``, ...). ``label = 1`` iff a trigger word occurs among the first :data:`TRIGGER_WINDOW` words;
  triggers later in the text and decoys anywhere do not count. ``meta["evidence_positions"]`` are the
  token positions that decide a positive label.
* **MCQA / next token** (stand-in for ARC-Easy and Wikipedia, :func:`make_synthetic_mcqa`): the official
  ARC prompt (:func:`palrp_bench.data.arc.format_mcqa_prompt`) for the question "Which option is an animal?"
  (or "a fruit?", "a tool?") with four options of which exactly one belongs to the asked category; the next
  token is the letter of that option's slot, so the answer depends on which word belongs to the category and
  on where it stands. ``label`` is the answer index, ``meta["answer_letter"]`` the letter, as for ARC.

Samples are deterministic: sample ``i`` of ``(task, seed, split)`` comes from its own generator seeded with
``(seed, split, task, i)``; its ``sample_id`` is ``synth-{cls|mcqa}-{split}-s{seed}-{i:05d}``.

The tokenizer (:func:`build_tiny_tokenizer`) is a ``tokenizers`` WordLevel model (words, punctuation and
newlines are tokens; LLaMA-2 style ids ``<unk>=0, <s>=1, </s>=2``; BOS added by its post-processor; pad = eos)
wrapped as a ``transformers`` fast tokenizer and shipped in ``assets/text/tokenizer``. The models, trained by
``scripts/train_tiny_text.py`` and shipped in ``assets/text/{cls,causal,qwen2_causal}`` with
``training_report.json``, are a ``LlamaForSequenceClassification``, a ``LlamaForCausalLM`` and a
``Qwen2ForCausalLM`` (a second decoder family in the embedded default; q/k/v biases), all RoPE, 2 layers, hidden 64,
4 heads / 2 KV heads (:data:`TINY_TEXT_MODELS`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..errors import BadInputError, MissingDataError
from .arc import ANSWER_LETTERS, format_mcqa_prompt
from .base import TextSample, check_generator_args
from .text_common import pad_right, real_token_count
from .registry import Option, register_dataset

ASSET_DIR = Path(__file__).resolve().parent.parent / "assets" / "text"
REPORT_NAME = "training_report.json"

SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
PAD_ID = EOS_ID
SYMBOLS: tuple[str, ...] = ("\n", ".", ",", ":", "?", "(", ")")
#: Words of the official MCQA prompt and of the synthetic question (besides the letters A-D).
PROMPT_WORDS: tuple[str, ...] = ("The", "following", "is", "multiple", "choice", "question", "with", "answers",
                                 "Please", "make", "sure", "to", "answer", "or", "Answer", "Which", "option", "a", "an")
FILLERS: tuple[str, ...] = (
    "the", "film", "plot", "actor", "scene", "story", "music", "camera", "movie", "director", "script", "cast",
    "ending", "role", "and", "was", "it", "this", "very", "quite", "but", "also", "just", "really", "some", "more",
    "time", "light", "set", "show", "dialogue", "pace", "effects", "score", "screen", "character", "moment",
    "series", "episode", "year")
#: Words that make a review positive when they occur early enough.
TRIGGERS: tuple[str, ...] = ("superb", "brilliant", "masterpiece", "gripping")
#: Look-alike words that never count.
DECOYS: tuple[str, ...] = ("decent", "okay", "fine", "average")
#: Option words of the MCQA task, by category; the question asks for one category (singular noun, article).
OPTION_CATEGORIES: dict[str, tuple[str, ...]] = {
    "animal": ("cat", "dog", "fish", "bird", "horse", "mouse", "lion", "bear"),
    "fruit": ("apple", "pear", "plum", "grape", "lemon", "peach", "mango", "cherry"),
    "tool": ("hammer", "saw", "drill", "wrench", "knife", "spade", "axe", "chisel"),
}
_ARTICLES = {"animal": "an", "fruit": "a", "tool": "a"}
OPTION_WORDS: tuple[str, ...] = tuple(w for words in OPTION_CATEGORIES.values() for w in words)

#: A trigger counts when it is one of the first TRIGGER_WINDOW words (token positions 1..TRIGGER_WINDOW).
TRIGGER_WINDOW = 8
REVIEW_LENGTHS = (12, 24)
SYNTHETIC_SPLITS: dict[str, int] = {"train": 0, "val": 1, "test": 2}
_TASK_CODES = {"cls": 0, "mcqa": 1}
#: The pre-tokenizer's rule: a word, one punctuation character, or a newline is a token.
TOKEN_PATTERN = r"\w+|[^\w\s]|\n"
#: Architecture of both tiny models (task brief: RoPE, 2 layers, hidden 64, GQA 4 heads / 2 KV heads).
TINY_LLAMA_ARCH: dict[str, Any] = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       max_position_embeddings=512, rope_theta=10000.0, rms_norm_eps=1e-6,
                                       hidden_act="silu", attention_dropout=0.0, tie_word_embeddings=False,
                                       initializer_range=0.1)
#: The tiny T5 (``t5_squad``): T5 v1.1 wiring (gated-GELU feed-forward, relative position bias in both stacks, no
#: ``d_model ** -0.5`` rescale before the head: ``tie_word_embeddings=False`` is how T5Config marks v1.1, though
#: transformers 5 ties the head to the shared embedding anyway), 2 encoder + 2 decoder layers, d_model 48, 4 heads
#: of 12, no dropout.
TINY_T5_ARCH: dict[str, Any] = dict(d_model=48, d_kv=12, d_ff=96, num_layers=2, num_decoder_layers=2, num_heads=4,
                                    relative_attention_num_buckets=16, relative_attention_max_distance=64,
                                    feed_forward_proj="gated-gelu", dropout_rate=0.0, layer_norm_epsilon=1e-6,
                                    tie_word_embeddings=False, initializer_factor=1.0)

ModelKind = Literal["cls", "causal", "qwen2_causal", "evidence", "t5_squad", "needle"]
#: asset folder (model kind) -> (config class, model class, task) of the shipped tiny text models; ``evidence`` is
#: the causal LLaMA of the evidence tasks with its own vocabulary and tokenizer (data/synthetic_evidence.py);
#: ``t5_squad`` the tiny T5 of ``synthetic_squad`` (the evidence tokenizer; the answer follows the decoder start);
#: ``needle`` the causal LLaMA of the needle in a haystack (data/needle.py: its own tokenizer, 4096 positions)
TINY_TEXT_MODELS: dict[str, tuple[str, str, str]] = {
    "cls": ("LlamaConfig", "LlamaForSequenceClassification", "cls"),
    "causal": ("LlamaConfig", "LlamaForCausalLM", "mcqa"),
    "qwen2_causal": ("Qwen2Config", "Qwen2ForCausalLM", "mcqa"),
    "evidence": ("LlamaConfig", "LlamaForCausalLM", "evidence"),
    "t5_squad": ("T5Config", "T5ForConditionalGeneration", "squad"),
    "needle": ("LlamaConfig", "LlamaForCausalLM", "needle"),
}
#: per kind, what differs from :data:`TINY_LLAMA_ARCH` (the needle model reads haystacks of up to a few thousand
#: tokens)
TINY_ARCH_OVERRIDES: dict[str, dict[str, Any]] = {"needle": {"max_position_embeddings": 4096}}

__all__ = ["VOCAB", "TRIGGER_WINDOW", "build_tiny_tokenizer", "tiny_tokenizer_dir", "load_tiny_tokenizer",
           "make_synthetic_classification", "make_synthetic_mcqa", "tiny_text_config", "load_tiny_text_model",
           "load_training_report", "batch_inputs", "classification_accuracy", "mcqa_accuracy", "words_to_ids",
           "save_tiny_text_checkpoint"]


def _build_vocab() -> dict[str, int]:
    tokens = [*SPECIAL_TOKENS, *SYMBOLS, *ANSWER_LETTERS, *PROMPT_WORDS, *FILLERS, *TRIGGERS, *DECOYS,
              *OPTION_CATEGORIES, *OPTION_WORDS]
    if len(set(tokens)) != len(tokens):  # pragma: no cover - guards edits of the word lists
        raise RuntimeError("synthetic vocabulary has duplicate tokens")
    return {token: i for i, token in enumerate(tokens)}


#: Token -> id of the synthetic vocabulary (the shipped tokenizer's vocabulary).
VOCAB: dict[str, int] = _build_vocab()


def words_to_ids(text: str) -> list[int]:
    """BOS + the ids of ``text`` split like the tokenizer does (unknown words -> ``<unk>``)."""
    return [BOS_ID] + [VOCAB.get(token, UNK_ID) for token in re.findall(TOKEN_PATTERN, text)]


# ----------------------------------------------------------------------------------------------- tokenizer
def build_tiny_tokenizer(vocab: dict[str, int] | None = None, pattern: str = TOKEN_PATTERN, max_length: int = 512):
    """The word-level fast tokenizer of the suite (what ``assets/text/tokenizer`` holds); ``vocab`` (token -> id,
    starting with :data:`SPECIAL_TOKENS`) builds the same kind of tokenizer over another vocabulary (the evidence
    model's, data/synthetic_evidence.py), ``pattern`` splits the text into tokens another way (the needle model's
    digits, data/needle.py) and ``max_length`` is its ``model_max_length``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=VOCAB if vocab is None else vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                           special_tokens=[("<s>", BOS_ID)])
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="</s>", padding_side="right", model_max_length=max_length)


def tiny_tokenizer_dir(kind: str | None = None, asset_dir: str | Path | None = None) -> Path:
    """The tokenizer folder of the embedded model ``kind`` (an asset folder name, ``model.source`` of an
    ``embedded_text`` config): the model's own folder when it holds a ``tokenizer.json`` (the evidence model), else
    the suite's shared ``tokenizer/``."""
    base = Path(asset_dir) if asset_dir is not None else ASSET_DIR
    if kind is not None and (base / kind / "tokenizer.json").is_file():
        return base / kind
    return base / "tokenizer"


def load_tiny_tokenizer(asset_dir: str | Path | None = None, kind: str | None = None):
    """The shipped tokenizer of the embedded model ``kind`` (:func:`tiny_tokenizer_dir`; None: the suite's shared
    one), via ``AutoTokenizer.from_pretrained`` (offline)."""
    from transformers import AutoTokenizer

    folder = tiny_tokenizer_dir(kind, asset_dir)
    if not (folder / "tokenizer.json").is_file():
        raise MissingDataError(f"tiny tokenizer missing at {folder}",
                               "run `python scripts/train_tiny_text.py` to (re)create the text assets")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


# ----------------------------------------------------------------------------------------------- generators
def _check_args(n: int, seed: int, split: str) -> None:
    check_generator_args(n, seed, split, SYNTHETIC_SPLITS)


def _rng(task: str, seed: int, split: str, i: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), SYNTHETIC_SPLITS[split], _TASK_CODES[task], int(i)])


def _draw_review(rng: np.random.Generator) -> tuple[list[str], int, list[int], list[int]]:
    """Words, label, trigger word indices and decoy word indices (0-based over words) of one review."""
    length = int(rng.integers(REVIEW_LENGTHS[0], REVIEW_LENGTHS[1] + 1))
    words = [FILLERS[k] for k in rng.integers(0, len(FILLERS), size=length)]
    label = int(rng.integers(0, 2))
    if label == 1:
        triggers = [int(rng.integers(0, TRIGGER_WINDOW))]
        if rng.integers(0, 2):  # sometimes a second trigger, anywhere else
            other = int(rng.integers(0, length - 1))
            triggers.append(other + (other >= triggers[0]))
    else:
        # two thirds: 1-2 triggers, all after the window (hard negatives); one third: none
        n_late = int(rng.integers(0, 3))
        triggers = [TRIGGER_WINDOW + int(p) for p in rng.permutation(length - TRIGGER_WINDOW)[:n_late]]
    free = [p for p in range(length) if p not in triggers]
    n_decoys = int(rng.integers(0, 3))
    decoys = sorted(free[int(k)] for k in rng.permutation(len(free))[:n_decoys])
    for p in triggers:
        words[p] = TRIGGERS[int(rng.integers(0, len(TRIGGERS)))]
    for p in decoys:
        words[p] = DECOYS[int(rng.integers(0, len(DECOYS)))]
    return words, label, sorted(triggers), decoys


def make_synthetic_classification(n: int, seed: int = 0, split: str = "test",
                                  pad_to: int | None = None) -> list[TextSample]:
    """``n`` deterministic reviews of the trigger-window task (module docstring).

    ``input_ids`` = BOS + one id per word. ``pad_to`` right-pads every sample with EOS to that length (the
    IMDB setup: pad = eos, pads included in the input); ``meta["n_tokens"]`` / ``meta["n_pad"]`` as for IMDB.
    Token positions in ``meta`` (``trigger_positions``, ``decoy_positions``, ``evidence_positions`` = triggers
    inside the window) count BOS as position 0.
    """
    _check_args(n, seed, split)
    if pad_to is not None and (isinstance(pad_to, bool) or not isinstance(pad_to, int)
                               or pad_to < REVIEW_LENGTHS[1] + 1):
        raise BadInputError(f"pad_to must be an int >= {REVIEW_LENGTHS[1] + 1} (the longest review), got {pad_to!r}",
                            f"use e.g. pad_to={REVIEW_LENGTHS[1] + 1} or None")
    samples = []
    for i in range(int(n)):
        words, label, triggers, decoys = _draw_review(_rng("cls", seed, split, i))
        ids = [BOS_ID] + [VOCAB[w] for w in words]
        n_tokens = len(ids)
        ids, n_pad = pad_right(ids, pad_to, PAD_ID) if pad_to is not None else (ids, 0)
        meta = {"task": "cls", "split": split, "seed": int(seed), "index": i, "text": " ".join(words),
                "n_tokens": n_tokens, "n_pad": n_pad,
                "trigger_positions": [p + 1 for p in triggers], "decoy_positions": [p + 1 for p in decoys],
                "evidence_positions": [p + 1 for p in triggers if p < TRIGGER_WINDOW]}
        samples.append(TextSample(sample_id=f"synth-cls-{split}-s{int(seed)}-{i:05d}", input_ids=ids, label=label,
                                  meta=meta))
    return samples


def make_synthetic_mcqa(n: int, seed: int = 0, split: str = "test") -> list[TextSample]:
    """``n`` deterministic "Which option is a(n) {category}?" prompts in the official ARC format (module docstring).

    ``label`` = index of the answer letter, ``meta["answer_letter"]`` / ``meta["answer_token_id"]`` the letter
    and its token id (the correct next token), ``meta["evidence_positions"]`` the positions of the category word
    in the question, of the answer option's letter and of its word. All prompts have the same length.
    """
    _check_args(n, seed, split)
    samples = []
    for i in range(int(n)):
        rng = _rng("mcqa", seed, split, i)
        categories = list(OPTION_CATEGORIES)
        asked = categories[int(rng.integers(0, len(categories)))]
        others = [w for c in categories if c != asked for w in OPTION_CATEGORIES[c]]
        distractors = [others[int(k)] for k in rng.permutation(len(others))[:len(ANSWER_LETTERS) - 1]]
        answer = int(rng.integers(0, len(ANSWER_LETTERS)))
        correct = OPTION_CATEGORIES[asked][int(rng.integers(0, len(OPTION_CATEGORIES[asked])))]
        choices = distractors[:answer] + [correct] + distractors[answer:]
        question = f"Which option is {_ARTICLES[asked]} {asked}?"
        prompt = format_mcqa_prompt(question, choices)
        ids = words_to_ids(prompt)
        letter = ANSWER_LETTERS[answer]
        word_position = ids.index(VOCAB[correct])
        evidence = [ids.index(VOCAB[asked]), word_position - 2, word_position]  # category; "{letter} . {word}"
        samples.append(TextSample(
            sample_id=f"synth-mcqa-{split}-s{int(seed)}-{i:05d}", input_ids=ids, label=answer,
            meta={"task": "mcqa", "split": split, "seed": int(seed), "index": i, "prompt": prompt,
                  "question": question, "choices": choices, "n_choices": len(choices), "answer_letter": letter,
                  "answer_token_id": VOCAB[letter], "n_tokens": len(ids), "n_pad": 0,
                  "evidence_positions": evidence}))
    return samples


# ----------------------------------------------------------------------------------------------- models
def tiny_text_config(kind: ModelKind, vocab_size: int | None = None):
    """The config of a tiny model (its family's class, :data:`TINY_TEXT_MODELS`): :data:`TINY_LLAMA_ARCH` (the T5:
    :data:`TINY_T5_ARCH`), the suite's vocabulary (or ``vocab_size`` tokens: the evidence model's own vocabulary),
    pad = eos."""
    import transformers

    _check_kind(kind)
    if TINY_TEXT_MODELS[kind][0] == "T5Config":  # decoder start = BOS, pad = EOS, as the evidence tokenizer
        return transformers.T5Config(vocab_size=len(VOCAB) if vocab_size is None else vocab_size, pad_token_id=PAD_ID,
                                     eos_token_id=EOS_ID, decoder_start_token_id=BOS_ID, **TINY_T5_ARCH)
    extra = {"num_labels": 2, "id2label": {0: "no_early_trigger", 1: "early_trigger"},
             "label2id": {"no_early_trigger": 0, "early_trigger": 1}} if kind == "cls" else {}
    config_class = getattr(transformers, TINY_TEXT_MODELS[kind][0])
    arch = {**TINY_LLAMA_ARCH, **TINY_ARCH_OVERRIDES.get(kind, {})}
    return config_class(vocab_size=len(VOCAB) if vocab_size is None else vocab_size, bos_token_id=BOS_ID,
                        eos_token_id=EOS_ID, pad_token_id=PAD_ID, **arch, **extra)


def _check_kind(kind: str) -> None:
    if kind not in TINY_TEXT_MODELS:
        raise BadInputError(f"unknown tiny text model kind {kind!r}", f"use one of: {', '.join(TINY_TEXT_MODELS)}")


def load_tiny_text_model(kind: ModelKind = "cls", asset_dir: str | Path | None = None):
    """The shipped tiny model (eval mode, float32, CPU), loaded offline from ``assets/text/{kind}``.

    ``cls``: ``LlamaForSequenceClassification`` for :func:`make_synthetic_classification`;
    ``causal`` / ``qwen2_causal``: ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` for :func:`make_synthetic_mcqa`;
    ``evidence``: ``LlamaForCausalLM`` for the synthetic evidence tasks (data/synthetic_evidence.py);
    ``t5_squad``: ``T5ForConditionalGeneration`` for ``synthetic_squad`` (the synthetic qa samples);
    ``needle``: ``LlamaForCausalLM`` for ``synthetic_needle`` (data/needle.py).
    """
    import transformers

    _check_kind(kind)
    folder = (Path(asset_dir) if asset_dir is not None else ASSET_DIR) / kind
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise MissingDataError(f"tiny text model {kind!r} missing at {folder}",
                               "run `python scripts/train_tiny_text.py` to (re)create the text assets")
    cls = getattr(transformers, TINY_TEXT_MODELS[kind][1])
    try:
        model = cls.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError, RuntimeError) as exc:
        raise MissingDataError(f"tiny text model {kind!r} at {folder} is unreadable ({type(exc).__name__})",
                               "run `python scripts/train_tiny_text.py` to recreate it") from None
    return model.eval()


def save_tiny_text_checkpoint(kind: ModelKind, folder: str | Path) -> Path:
    """The shipped tiny model ``kind`` and its tokenizer saved with ``save_pretrained`` into ``folder``: an
    ordinary Hugging Face checkpoint, as a user's own model would be (README "Your own model and data")."""
    folder = Path(folder)
    load_tiny_text_model(kind).save_pretrained(folder)
    load_tiny_tokenizer(kind=kind).save_pretrained(folder)
    return folder


def load_training_report(kind: ModelKind = "cls", asset_dir: str | Path | None = None) -> dict:
    """The JSON written next to a tiny model by the training script (held-out accuracy, seeds, timings)."""
    _check_kind(kind)
    path = (Path(asset_dir) if asset_dir is not None else ASSET_DIR) / kind / REPORT_NAME
    if not path.is_file():
        raise MissingDataError(f"training report missing at {path}", "run `python scripts/train_tiny_text.py`")
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------------------------- evaluation
def batch_inputs(samples: Sequence[TextSample], pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``samples`` right-padded with ``pad_id`` to the longest one."""
    if not samples:
        raise BadInputError("no samples to batch", "pass at least one sample")
    length = max(len(s.input_ids) for s in samples)
    ids, mask = [], []
    for s in samples:
        n_tokens = real_token_count(s)
        padded, _ = pad_right(s.input_ids[:n_tokens], length, pad_id)
        ids.append(padded)
        mask.append([1] * n_tokens + [0] * (length - n_tokens))
    return torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.long)


@torch.no_grad()
def classification_accuracy(model: Any, samples: Sequence[TextSample], batch_size: int = 256) -> float:
    """Fraction of ``samples`` whose arg-max class equals ``label`` (pooled at the last non-pad token)."""
    correct = 0
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        ids, mask = batch_inputs(chunk)
        pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
        correct += int((pred == torch.tensor([s.label for s in chunk])).sum())
    return correct / len(samples)


@torch.no_grad()
def mcqa_accuracy(model: Any, tokenizer: Any, samples: Sequence[TextSample], batch_size: int = 256) -> float:
    """Fraction of ``samples`` whose arg-max next token reads (the official way) as ``meta["answer_letter"]``."""
    from .arc import predicted_letter

    correct = 0
    for start in range(0, len(samples), batch_size):
        chunk = samples[start:start + batch_size]
        ids, mask = batch_inputs(chunk)
        logits = model(input_ids=ids, attention_mask=mask).logits
        last = mask.sum(-1) - 1
        pred = logits[torch.arange(len(chunk)), last].argmax(-1)
        correct += sum(predicted_letter(tokenizer, int(p)) == s.meta["answer_letter"] for p, s in zip(pred, chunk))
    return correct / len(samples)


#: mean real tokens per sample, counted from the generators: sentiment 18.3 real of 25 padded, MCQA 57
MEAN_TOKENS = {"cls": 18.3, "mcqa": 57.0}


@register_dataset(
    "synthetic_text",
    options=(Option("kind", "cls", "cls (trigger-word sentiment) or mcqa"), Option("n", 64, "samples"),
             Option("seed", 0, "generator seed"), Option("split", "test", "train | val | test"),
             Option("pad_to", None, "right-pad classification samples with EOS to this length", (int,))),
    pool_size=lambda options: options["n"], tokens=lambda options: MEAN_TOKENS.get(options["kind"]),
    padded_length=lambda options: options["pad_to"])
def _synthetic_text_dataset(path, limit, options, tokenizer) -> list[TextSample]:
    """``task.dataset=synthetic_text``: options ``kind`` (cls | mcqa), ``n``, ``seed``, ``split``, ``pad_to``."""
    kind, n, seed, split = options["kind"], int(options["n"]), int(options["seed"]), options["split"]
    if kind == "cls":
        return make_synthetic_classification(n, seed, split, pad_to=options["pad_to"])
    if kind == "mcqa":
        return make_synthetic_mcqa(n, seed, split)
    raise BadInputError(f"unknown synthetic text kind {kind!r}", "set task.options.kind to cls or mcqa")
