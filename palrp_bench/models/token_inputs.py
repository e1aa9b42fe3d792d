"""A language model's inputs, shared by every text twin: checks of token ids, attention masks and other per-token
tensors (each bad input a one-line :class:`~palrp_bench.errors.BadInputError` naming the fix), and the key-padding
mask the attention rule takes.

The inputs may sit on any device (CPU ids for a model on a GPU, as inseq takes them): each is checked where the
caller keeps it and then moved once to the model's device (the device of the ids :func:`token_batch` returns)."""
from __future__ import annotations

from typing import Callable

import torch

from ..errors import BadInputError

__all__ = ["token_batch", "per_token", "attention_mask_of", "key_padding_mask", "last_real_index"]


def token_batch(input_ids, *, vocab_size: int, max_positions: int | None, device, name: str = "input_ids"
                ) -> torch.Tensor:
    """``input_ids`` (``[B, T]`` or ``[T]``, any integer tensor-like, on any device) as a long tensor ``[B, T]`` on
    ``device`` (the model's); refuses other shapes and dtypes, empty inputs, sequences longer than ``max_positions``
    and ids outside the vocabulary. ``name``: how the messages call the ids (``decoder_input_ids`` of an
    encoder-decoder)."""
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
