"""The AttnLRP paper's perturbation protocol (Achtibat et al. 2024, appendix B.2), batched: curves of the explained
logit while input features go to a zero baseline in most- and least-relevant-first order, and their areas.

Features and baseline (B.2: "baseline value of zero ... for LLMs ... flipped the entire embedding vector of input
tokens to the baseline value. For ViTs, we used the relevances of the input pixels and flipped input pixels"):

* language models: the real tokens of the input (BOS included, padding never), a token perturbed = its whole input
  embedding vector set to 0, relevance = the token's score;
* encoder-decoders (Flan-T5 on SQuAD v2): only the tokens of the context (B.1: "we only perturb the tokens inside
  the context"), each its whole encoder input embedding; the other encoder tokens and the decoder input stay as
  they are (:func:`seq2seq_token_logit_curves`);
* vision transformers: the pixels, a pixel perturbed = all its channels of the normalised model input set to 0 (the
  paper's zero baseline on the model input; the PA-LRP protocol blackens raw pixels instead), relevance = the signed
  pixel map (``Explanation.extras["scores_signed"]``; the ReLU'd ``scores`` would tie every negative pixel).

Order: a stable sort of the relevance, descending (MoRF; ties by feature index ascending); LeRF is exactly the
reversed MoRF order, so the two processes see the same ranking.

Processes over steps ``k = 0..S`` perturbing ``n_k`` features (:func:`step_counts`; ``n_k = k`` per feature, as the
paper, or a coarsened grid of ``S = max_steps`` steps for long inputs such as 50176 pixels):

* ``flipping``: start from the input, set the first ``n_k`` features of the order to the baseline;
* ``insertion``: start from the baseline, restore the first ``n_k`` features of the order.

The paper reports flipping for the ViT (its Table 5) and insertion for the language models (Tables 6-8); insertion
MoRF is flipping LeRF read backwards (same inputs), see ``tests/evaluation/test_attnlrp_perturbation.py``. The logit
read is the explained output's (the class or next token the explanation is for), raw. Every perturbed input of a
sample that appears twice (the shared endpoints) is evaluated once; ``batch_size`` rows go through one forward,
each chunk built only when it is evaluated, so memory is bounded by it.
Areas: :func:`palrp_bench.metrics.delta_a.curve_area`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import BadInputError, is_out_of_memory
from ...metrics.delta_a import PROCESSES, curve_area
from ...rundir import SCALAR
from ...stages import stage
from ..explained import PixelBatch, Seq2SeqBatch
from . import register_procedure
from .nlp_perturbation import TextReadout, check_right_padded
from .vision_perturbation import model_device_dtype, resolve_normalization

log = logging.getLogger(__name__)

#: the process the AttnLRP paper reports for language models (its Tables 6-8) and for the ViT (its Table 5)
TEXT_PROCESS = "insertion"
VISION_PROCESS = "flipping"

__all__ = ["PROCESSES", "TEXT_PROCESS", "VISION_PROCESS", "step_counts", "feature_order", "perturbed_keep",
           "LogitCurves", "ForwardChunk", "logit_curves", "token_logit_curves", "seq2seq_token_logit_curves", "pixel_logit_curves",
           "area_rows", "curve_forwards"]


def step_counts(n_features: int, max_steps: int | None = None) -> np.ndarray:
    """Features perturbed at each step, ``int64 [S + 1]`` from 0 to ``n_features``.

    ``max_steps=None`` (or ``>= n_features``): one step per feature, ``0, 1, ..., N``. Otherwise ``S = max_steps``
    steps, ``n_k = round(k N / S)`` (halves up) for ``k <= S / 2`` and ``N - n_{S-k}`` above, so the grid is
    symmetric (``n_{S-k} = N - n_k``) except for the middle point when ``S`` is even and ``N`` odd: reversing a curve
    then maps it onto the same grid, which keeps insertion and flipping exact mirrors of each other on coarsened
    grids too (per feature they always are).
    """
    if n_features < 1:
        raise BadInputError("a sample has no feature to perturb", "drop empty inputs before the evaluation")
    if max_steps is not None and max_steps < 1:
        raise BadInputError(f"max_steps must be >= 1, got {max_steps}", "set a positive number of steps or null")
    if max_steps is None or max_steps >= n_features:
        return np.arange(n_features + 1, dtype=np.int64)
    s = int(max_steps)
    k = np.arange(s + 1, dtype=np.int64)
    low = (2 * k * n_features + s) // (2 * s)  # round half up of k N / S
    return np.where(2 * k <= s, low, n_features - low[::-1])


def feature_order(scores) -> np.ndarray:
    """MoRF order of one sample's feature scores ``[N]``: descending, ties by index ascending (stable)."""
    s = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    return torch.sort(s, descending=True, stable=True).indices.numpy()


def _ranks(order: np.ndarray) -> dict[str, np.ndarray]:
    """Position of every feature in the MoRF and the LeRF ranking."""
    out = {}
    for name, ranking in (("morf", order), ("lerf", order[::-1])):
        rank = np.empty(order.size, dtype=np.int64)
        rank[ranking] = np.arange(order.size)
        out[name] = rank
    return out


def _keep(rank: np.ndarray, counts: np.ndarray, process: str) -> torch.Tensor:
    """``[len(counts), N]`` bool: the features that keep their input value after perturbing the first ``n_k``."""
    touched = rank[None, :] < counts[:, None]
    return torch.from_numpy(~touched if process == "flipping" else touched)


def perturbed_keep(order: np.ndarray, counts: np.ndarray, process: str) -> dict[str, torch.Tensor]:
    """Which features keep their input value at each step, ``{"morf": [S+1, N], "lerf": [S+1, N]}`` bool."""
    if process not in PROCESSES:
        raise BadInputError(f"unknown perturbation process {process!r}", f"use one of: {', '.join(PROCESSES)}")
    return {name: _keep(rank, counts, process) for name, rank in _ranks(order).items()}


@dataclass
class LogitCurves:
    """One sample: the explained logit at each step of the MoRF and LeRF processes (``[S + 1]`` float64) and the
    fractions ``n_k / N`` of perturbed features."""

    morf: np.ndarray
    lerf: np.ndarray
    fractions: np.ndarray

    def areas(self) -> tuple[float, float]:
        """``(A_MoRF, A_LeRF)`` (:func:`~palrp_bench.metrics.delta_a.curve_area`)."""
        return curve_area(self.morf, self.fractions), curve_area(self.lerf, self.fractions)


@dataclass
class ForwardChunk:
    """Rows per perturbation forward (None: all of a sample's rows at once), shared by the samples of one batch so
    that a size halved on one sample's out-of-memory error stays halved for the next."""

    rows: int | None


def logit_curves(forward, scores, process: str, max_steps: int | None,
                 batch_size: int | None | ForwardChunk) -> LogitCurves:
    """Curves of one sample: ``forward(keep [R, N] bool) -> [R]`` explained logits of the inputs keeping the
    ``True`` features, ``scores`` ``[N]`` the features' relevance (module docstring). The rows go to ``forward``
    ``batch_size`` at a time; a chunk the device has no memory for is retried in halves (logged), down to one row,
    so the longest inputs of a task (SQuAD v2's longest prompts) do not stop a run sized for its mean; pass a
    :class:`ForwardChunk` to keep the halved size for the next sample."""
    chunk = batch_size if isinstance(batch_size, ForwardChunk) else ForwardChunk(batch_size)
    scores = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(scores).all():
        raise BadInputError("relevance scores contain NaN or inf", "check the explainer output before the protocol")
    if process not in PROCESSES:
        raise BadInputError(f"unknown perturbation process {process!r}", f"use one of: {', '.join(PROCESSES)}")
    counts = step_counts(scores.size, max_steps)
    ranks = _ranks(feature_order(scores))
    # rows: every MoRF step, then the inner LeRF steps (both curves share their endpoints: nothing / everything
    # perturbed); each chunk of rows is built only when it is evaluated
    rows = [("morf", k) for k in range(counts.size)] + [("lerf", k) for k in range(1, counts.size - 1)]
    values, start = [], 0
    while start < len(rows):
        part = rows[start:start + (chunk.rows or len(rows))]
        keep = torch.cat([_keep(ranks[name], counts[[k for n, k in part if n == name]], process)
                          for name in ("morf", "lerf") if any(n == name for n, _ in part)])
        try:
            values.append(forward(keep).double().cpu())
        except Exception as err:  # noqa: BLE001 - only out-of-memory is handled, everything else re-raised
            if len(part) == 1 or not is_out_of_memory(err):
                raise
            del keep
            chunk.rows = max(1, len(part) // 2)
            log.warning("out of memory in a perturbation forward of %d rows: retrying %d rows at a time",
                        len(part), chunk.rows)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            continue
        start += len(part)
    values = torch.cat(values).numpy()
    morf = values[:counts.size]
    lerf = np.concatenate([morf[:1], values[counts.size:], morf[-1:]])
    return LogitCurves(morf, lerf, counts / scores.size)


# --------------------------------------------------------------------------------------------------- models
def _gated(embeds: torch.Tensor, keep: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    """``[R, n, D]`` input embeddings of one sample ``embeds`` ``[1, n, D]`` with the features that ``keep``
    ``[R, F]`` marks False set to 0; features = the tokens at ``positions`` ``[F]`` (None: all ``n`` tokens)."""
    gate = keep.to(device=embeds.device, dtype=embeds.dtype)
    if positions is not None:
        full = torch.ones((keep.shape[0], embeds.shape[1]), device=embeds.device, dtype=embeds.dtype)
        full[:, positions.to(embeds.device)] = gate
        gate = full
    return embeds * gate[:, :, None]


def token_logit_curves(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, scores: torch.Tensor,
                       targets, *, process: str = "insertion", max_steps: int | None = None,
                       batch_size: int | None = None) -> list[LogitCurves]:
    """Curves of every sample of a right-padded batch of a Hugging Face text model (``*ForSequenceClassification``
    or ``*ForCausalLM``, logits read as the PA-LRP protocol reads them: :class:`TextReadout`, e.g. at the last real
    token, soft-capped where the model caps): features = real tokens, a perturbed token's input embedding is zero. ``scores`` ``[B, T]``, ``targets`` ``[B]`` explained class / token ids."""
    readout = TextReadout.of(model)
    ids = torch.as_tensor(input_ids).long()
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask).long()
    device = model.get_input_embeddings().weight.device
    curves, chunk = [], ForwardChunk(batch_size)
    for b in range(ids.shape[0]):
        check_right_padded(mask[b], b)
        n = int(mask[b].sum())
        with torch.no_grad():
            embeds = model.get_input_embeddings()(ids[b:b + 1, :n].to(device))  # [1, n, D]
        target = int(targets[b])

        @torch.no_grad()
        def forward(keep: torch.Tensor, embeds=embeds, target=target, n=n) -> torch.Tensor:
            x = _gated(embeds, keep, None)
            rows = torch.ones(keep.shape, dtype=torch.long, device=device)
            return readout(rows, torch.full((keep.shape[0],), n - 1), inputs_embeds=x)[:, target].double()

        curves.append(logit_curves(forward, scores[b, :n].detach().double().cpu().numpy(), process, max_steps,
                                   chunk))
    return curves


def seq2seq_token_logit_curves(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                               features: torch.Tensor, scores: torch.Tensor, targets, decoder_input_ids: torch.Tensor,
                               *, process: str = "insertion", max_steps: int | None = None,
                               batch_size: int | None = None) -> list[LogitCurves]:
    """Curves of every sample of a right-padded encoder batch of a Hugging Face encoder-decoder
    (``*ForConditionalGeneration``): features = the real encoder tokens that ``features`` ``[B, T]`` marks (the
    context of a QA prompt), a perturbed token's encoder input embedding is zero, every other token keeps its own;
    the logit read is ``targets`` ``[B]`` at the last position of ``decoder_input_ids`` ``[B, Td]`` (unpadded).
    ``scores`` ``[B, T]``: the encoder tokens' relevance (only the features' is read)."""
    ids = torch.as_tensor(input_ids).long()
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask).long()
    feats = torch.as_tensor(features).bool()
    if tuple(feats.shape) != tuple(ids.shape):
        raise BadInputError(f"features {tuple(feats.shape)} do not match input_ids {tuple(ids.shape)}",
                            "pass one bool per encoder token")
    if getattr(model, "training", False):
        raise BadInputError("the model is in training mode", "call model.eval() before evaluating")
    device = model.get_input_embeddings().weight.device
    decoder = torch.as_tensor(decoder_input_ids).long()
    curves, chunk = [], ForwardChunk(batch_size)
    for b in range(ids.shape[0]):
        check_right_padded(mask[b], b)
        n = int(mask[b].sum())
        positions = torch.nonzero(feats[b, :n]).flatten()
        if positions.numel() == 0:
            raise BadInputError(f"sample row {b} has no token to perturb", "mark its context tokens in features")
        with torch.no_grad():
            embeds = model.get_input_embeddings()(ids[b:b + 1, :n].to(device))  # [1, n, D]
        target, start = int(targets[b]), decoder[b:b + 1].to(device)

        @torch.no_grad()
        def forward(keep: torch.Tensor, embeds=embeds, target=target, start=start, positions=positions) -> torch.Tensor:
            x = _gated(embeds, keep, positions)
            rows = torch.ones(x.shape[:2], dtype=torch.long, device=device)
            out = model(inputs_embeds=x, attention_mask=rows, decoder_input_ids=start.expand(x.shape[0], -1),
                        use_cache=False)
            return out.logits[:, -1, target].double()

        curves.append(logit_curves(forward, scores[b, positions].detach().double().cpu().numpy(), process,
                                   max_steps, chunk))
    return curves


def pixel_logit_curves(model, pixels: torch.Tensor, maps: torch.Tensor, targets, *, process: str = "flipping",
                       max_steps: int | None = None, batch_size: int | None = None) -> list[LogitCurves]:
    """Curves of every image of a batch of a vision classifier: ``pixels`` ``[B, C, H, W]`` the normalised model
    input, features = the ``H x W`` pixels (all channels set to 0 together), ``maps`` ``[B, H, W]`` signed pixel
    relevance, ``targets`` ``[B]`` explained classes."""
    if getattr(model, "training", False):
        raise BadInputError("the model is in training mode", "call model.eval() before evaluating")
    if pixels.dim() != 4 or tuple(maps.shape) != (pixels.shape[0], *pixels.shape[-2:]):
        raise BadInputError(f"maps {tuple(maps.shape)} do not match images {tuple(pixels.shape)}",
                            "pass one [H, W] map per image at the image resolution")
    device, dtype = model_device_dtype(model, pixels)
    curves, chunk = [], ForwardChunk(batch_size)
    for b in range(pixels.shape[0]):
        image, target = pixels[b:b + 1].to(device=device, dtype=dtype), int(targets[b])

        @torch.no_grad()
        def forward(keep: torch.Tensor, image=image, target=target) -> torch.Tensor:
            mask = keep.to(device=device, dtype=dtype).reshape(-1, 1, *image.shape[-2:])
            out = model(image * mask)
            out = out[0] if isinstance(out, (tuple, list)) else out
            return out[:, target].double()

        curves.append(logit_curves(forward, maps[b].detach().double().cpu().reshape(-1).numpy(), process,
                                   max_steps, chunk))
    return curves


def area_rows(curves: LogitCurves, process: str) -> list[tuple[str, str, float | None, float]]:
    """The result rows of one sample: ``a_morf`` and ``a_lerf`` (variant = the process; table metrics in
    :mod:`palrp_bench.metrics.delta_a`)."""
    a_morf, a_lerf = curves.areas()
    return [("a_morf", process, SCALAR, a_morf), ("a_lerf", process, SCALAR, a_lerf)]


# ------------------------------------------------------------------------------------- the procedure of a cell
def curve_forwards(n_features: float, steps: int | None) -> float:
    """Forwards of one sample: most- and least-relevant-first curves over ``min(N, steps) + 1`` steps each, sharing
    the empty and the full input."""
    return 2.0 * (n_features if steps is None else min(n_features, int(steps)))


@register_procedure(
    "attnlrp_perturbation", applies_to=("text_classification", "next_token", "image_classification", "seq2seq_qa"),
    forwards=lambda kind, shape, task: curve_forwards(shape.perturbed_features, task.perturbation_steps),
    needs=("scores_signed",),
    description="area between the least- and most-relevant-first curves of the explained logit (zero baseline)")
def run_attnlrp_perturbation(batch, ctx) -> None:
    """Per-sample areas ``a_morf`` / ``a_lerf`` of the explained logit while features go to the zero baseline (module
    docstring): tokens inserted into an all-zero embedding input (text; an encoder-decoder's context tokens only),
    pixels of the normalised input flipped to 0 in the order of the signed map (images)."""
    ok, model = batch.ok, batch.model
    steps, rows = ctx.task.perturbation_steps, ctx.forward_batch_size
    targets = [batch.explained[j] for j in ok]
    with stage("forwards"):
        if isinstance(batch, PixelBatch):
            process = VISION_PROCESS
            pixels = resolve_normalization(model)(batch.images[ok]).to(batch.bundle.device)
            curves = pixel_logit_curves(model, pixels, batch.scores_signed[ok].to(batch.bundle.device), targets,
                                        process=process, max_steps=steps, batch_size=rows)
        elif isinstance(batch, Seq2SeqBatch):
            process = TEXT_PROCESS
            curves = seq2seq_token_logit_curves(model, batch.input_ids[ok], batch.attention_mask[ok],
                                                batch.context[ok], batch.scores[ok], targets,
                                                batch.decoder_input_ids[ok], process=process, max_steps=steps,
                                                batch_size=rows)
        else:
            process = TEXT_PROCESS
            curves = token_logit_curves(model, batch.input_ids[ok], batch.attention_mask[ok], batch.scores[ok],
                                        targets, process=process, max_steps=steps, batch_size=rows)
    for k, j in enumerate(ok):
        batch.rows[j] += area_rows(curves[k], process)
