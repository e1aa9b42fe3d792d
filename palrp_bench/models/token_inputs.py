"""A model's inputs, shared by every twin: what a tokenizer or image processor returns, taken apart by name
(:func:`model_inputs`); checks of token ids, attention masks and other per-token tensors (each bad input a one-line
:class:`~palrp_bench.errors.BadInputError` naming the fix), and the key-padding mask the attention rule takes.

The inputs may sit on any device (CPU ids for a model on a GPU, as inseq takes them): each is checked where the
caller keeps it and then moved once to the model's device (the device of the ids :func:`token_batch` returns)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import torch

from ..errors import BadInputError

__all__ = ["model_inputs", "token_batch", "per_token", "attention_mask_of", "key_padding_mask", "last_real_index",
           "TOKENIZER_BOOKKEEPING"]

#: what a tokenizer may return besides the model's inputs (its own bookkeeping, never read by a forward); ignored
TOKENIZER_BOOKKEEPING = ("offset_mapping", "special_tokens_mask", "length", "overflow_to_sample_mapping",
                         "num_truncated_tokens")


def model_inputs(inputs, attention_mask, *, takes: tuple[str, ...], model: str,
                 zero_token_types: bool = False) -> dict:
    """The inputs of one explanation by name: ``inputs`` is the main tensor (``takes[0]``: ``input_ids`` or
    ``pixel_values``) or what a tokenizer / image processor returns (a mapping, e.g. ``BatchEncoding``), whose
    entries named in ``takes`` are used; ``attention_mask`` comes from the mapping or the argument (not both).

    Refused in one line naming what to pass: a mapping without ``takes[0]``, an entry the model does not take
    (``position_ids``, ``inputs_embeds``, ``labels``, ``token_type_ids`` of a family without token types, ...).
    ``zero_token_types``: a family whose library forward takes no token types ignores an all-zero
    ``token_type_ids`` (what some tokenizers return by default; nothing to explain there). The tokenizer's own
    bookkeeping (:data:`TOKENIZER_BOOKKEEPING`) is ignored. Returns a dict with every name of ``takes`` (None where
    absent)."""
    main = takes[0]
    if not isinstance(inputs, Mapping):
        found = {main: inputs}
        if "attention_mask" in takes:
            found["attention_mask"] = attention_mask
        elif attention_mask is not None:
            found["attention_mask"] = attention_mask  # the caller refuses it (e.g. a vision transformer)
        return {**dict.fromkeys(takes), **found}
    what = "pass " + ", ".join(takes) + (" (what the tokenizer returns: tokenizer(texts, return_tensors='pt'))"
                                         if main == "input_ids" else " (what the image processor returns)")
    if main not in inputs:
        raise BadInputError(f"the inputs mapping has no {main!r} (it holds {', '.join(map(str, inputs)) or 'nothing'})",
                            what)
    if attention_mask is not None and inputs.get("attention_mask") is not None:
        raise BadInputError("attention_mask was given twice: in the inputs mapping and as an argument",
                            "pass it once (the tokenizer's output holds it)")
    found = dict.fromkeys(takes)
    for key, value in inputs.items():
        if key in takes:
            found[key] = value
        elif key == "token_type_ids" and zero_token_types and not bool(torch.as_tensor(value).any()):
            continue
        elif key not in TOKENIZER_BOOKKEEPING:
            hint = {"token_type_ids": f"{model} has no token types: drop token_type_ids "
                                      "(tokenizer(..., return_token_type_ids=False))",
                    "labels": "the explained output is chosen with target= (and foil=), not labels"}.get(key, what)
            raise BadInputError(f"{model} does not take {key!r} from the inputs mapping", hint)
    if found.get("attention_mask") is None and attention_mask is not None:
        found["attention_mask"] = attention_mask
    return found


def token_batch(input_ids, *, vocab_size: int, max_positions: int | None, device, name: str = "input_ids"
                ) -> torch.Tensor:
    """``input_ids`` (``[B, T]`` or ``[T]``, any integer tensor-like, on any device) as a long tensor ``[B, T]`` on
    ``device`` (the model's); refuses other shapes and dtypes, empty inputs, sequences longer than ``max_positions``
    and ids outside the vocabulary. ``name``: how the messages call the ids (``decoder_input_ids`` of an
    encoder-decoder)."""
    if isinstance(input_ids, Mapping):
        raise BadInputError(f"{name} is a mapping", "pass the tokenizer's output as the inputs (explain takes it "
                                                    "whole) or its input_ids tensor")
    if not isinstance(input_ids, torch.Tensor):
        input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
        raise BadInputError(f"{name} must be an integer tensor [batch, tokens], got {tuple(input_ids.shape)} "
                            f"{input_ids.dtype}", "tokenize the text first (tokenizer(text, return_tensors='pt'))")
    if input_ids.shape[1] == 0 or input_ids.shape[0] == 0:
        raise BadInputError(f"empty input (no tokens in {name})", "pass at least one token (a non-empty text)")
    if max_positions is not None and input_ids.shape[1] > max_positions:
        raise BadInputError(f"sequence of {input_ids.shape[1]} tokens is longer than the model context "
                            f"({max_positions})", f"truncate to at most {max_positions} tokens")
    if int(input_ids.max()) >= vocab_size or int(input_ids.min()) < 0:
        raise BadInputError(f"token id out of range for a vocabulary of {vocab_size}"
                            + ("" if name == "input_ids" else f" in {name}"),
                            "use the tokenizer that belongs to this model")
    return input_ids.to(device=device, dtype=torch.long)


def per_token(values, ids: torch.Tensor, name: str, check: Callable[[torch.Tensor], None] | None = None
              ) -> torch.Tensor:
    """A per-token tensor (``token_type_ids``, ...) shaped like ``ids``, as long on ``ids``' device; ``check``
    (raising :class:`BadInputError`) sees it as long where the caller keeps it, before the move."""
    values = torch.as_tensor(values)
    if values.dim() == 1:
        values = values[None]
    if values.shape != ids.shape:
        raise BadInputError(f"{name} shape {tuple(values.shape)} differs from input_ids {tuple(ids.shape)}",
                            "pass what the tokenizer returned")
    values = values.long()
    if check is not None:
        check(values)
    return values.to(device=ids.device)


def _mask_check(name: str) -> Callable[[torch.Tensor], None]:
    def check(mask: torch.Tensor) -> None:
        if bool(((mask != 0) & (mask != 1)).any()):
            raise BadInputError(f"{name} must contain only 0 and 1", f"pass the tokenizer's {name}")
        if bool((mask.sum(-1) == 0).any()):
            raise BadInputError(f"a sample has no real token ({name} all zero)", "drop empty texts")
    return check


def attention_mask_of(attention_mask, ids: torch.Tensor, name: str = "attention_mask") -> torch.Tensor | None:
    """The attention mask (``None`` stays ``None``) on ``ids``' device: shaped like ``ids``, only 0 and 1, at least
    one real token per sample. ``name``: how the messages call it (``decoder_attention_mask``)."""
    if attention_mask is None:
        return None
    return per_token(attention_mask, ids, name, _mask_check(name))


def key_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor | None:
    """Boolean ``[B, 1, T, T]`` mask (True = attend) hiding padded keys, or None when nothing is padded.

    Every query row keeps its own position, so a padding row is never empty (no NaN); padding rows never reach a
    real token because their keys are hidden."""
    if bool(attention_mask.all()):
        return None
    keys = attention_mask.bool()[:, None, None, :]
    eye = torch.eye(attention_mask.shape[1], dtype=torch.bool, device=attention_mask.device)[None, None]
    return keys | eye


def last_real_index(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, *, pad_token_id: int | None,
                    pool_by_pad: bool) -> torch.Tensor:
    """``[B]`` index of each sample's last real token: the last position where the attention mask is 1 (left or
    right padding); without a mask, with ``pool_by_pad`` (a decoder classifier, pooling as Hugging Face does) the last
    token that is not ``pad_token_id``, else the last position."""
    b, t = input_ids.shape
    idx = torch.arange(t, device=input_ids.device)
    if attention_mask is not None:
        return (idx * attention_mask.long()).argmax(-1)
    if pool_by_pad and pad_token_id is not None:
        return (idx * (input_ids != pad_token_id).long()).argmax(-1)
    return torch.full((b,), t - 1, device=input_ids.device, dtype=torch.long)
