"""NLP token-perturbation protocol of Tables 1-3: generation and pruning curves (docs/protocol.md section 2).

For every sample, fractions ``f = 0.0, 0.1, ..., 1.0`` (11 steps) of the ``N`` replaceable tokens are perturbed,
``n = ceil(f * N)``:

* **generation**: start from all-UNK and restore the ``n`` most relevant tokens (signed relevance, descending);
* **pruning**: replace the ``n`` least relevant tokens by UNK (IMDB: ascending ``|relevance|``; MCQA / Wikipedia:
  ascending signed relevance).

Per step the tracked class gives AC = softmax probability and MSE = squared change of the logits against the
unperturbed forward. :data:`TASKS` holds the per-task rules as data (tracked class, pruning key, MSE rule, which
head the model has).

Every perturbed copy of every sample (11 steps x 2 variants x B samples, plus the unperturbed input; identical
rows evaluated once) goes through batched forwards of the Hugging Face model, ``batch_size`` rows at a time. A
causal LM's rows are read on its device: each sample's unperturbed row first (its arg-max is the tracked token),
then the perturbed rows, each reduced there to its tracked logit and log-sum-exp, so no vocabulary-wide logits
reach the host (:func:`readout_logits` with ``tracked``).

Official-code facts reproduced under ``protocol="official"`` (github.com/YardenBakish/PE-AWARE-LRP, NLP/utils.py
``flip`` / ``flip_arc`` / ``flip_wiki``), each correction being a named switch that ``protocol="corrected"`` turns on:

* ``exclude_padding`` (IMDB): the official reviews are right-padded to 512 and the pads count in ``N``; they are
  replaced by UNK like any token (generation starts with them as UNK; pruning replaces them first, their
  relevance being ~0). The official classifier pools at ``attention_mask.sum(1) - 1`` and the pads stay masked,
  so a replaced pad changes nothing: pads only consume the step budget (flat early pruning steps, wasted
  generation steps). Corrected: ``N`` counts the non-pad tokens only and pads keep their id. For MCQA / Wikipedia
  the official code ran unpadded sequences, so positions with ``attention_mask == 0`` are batch padding here and
  are never counted nor replaced under either protocol.
* ``keep_bos``: the official code may replace BOS (position 0) like any token. Corrected: BOS stays.
* ``causal`` (MCQA / Wikipedia): the official ARC and Wikipedia runs reached the attention without a causal mask,
  i.e. the model attended bidirectionally. This defect is reproduced only when asked for: ``causal=True`` is the
  default under both protocols (the CLI's ``*_noncausal`` tasks pass ``causal=False``), so a switch never turns a
  model bidirectional behind the user's back. ``causal=False`` passes a 4D additive float mask that
  allows every (query, key) pair among real tokens (verified against the official
  ``nlp_causal_official_noncausal.npz`` logits); IMDB is always causal.
* ``restore_id0_tokens``: in generation the official code keeps every position whose original id is 0 (a
  "set pad tokens" line that assumed pad id 0). A no-op for LLaMA-2 (id 0 is UNK); for LLaMA-3 id 0 is "!".

Kept in both protocols because they define the protocol's numbers rather than being defects:

* ``n = ceil(f * N)`` with ``f`` taken from ``numpy.linspace(0, 1, 11)`` in float64: a product ``f * N`` can
  land just above an integer (``0.3 * 10 = 3.0000000000000004``), and ``n`` is then one larger than the exact
  ``ceil(k * N / 10)`` (``N = 10`` gives 0, 1, 2, 4, 4, 5, 7, 8, 8, 9, 10). At most one token per step.
* Orders come from ``numpy.argsort`` (default kind) on the scores, descending = reversed ascending order; this
  decides which of several tied tokens goes first.

ARC (``flip_arc``) versus Wikipedia (``flip_wiki``): with the published flags (``--pe --single-norm``; neither
``--should-keep`` nor ``--correct-subset``) both compute the same AC and MSE curves: tracked class = arg-max
token of the unperturbed last position, pruning by ascending signed relevance, MSE on the tracked logit only,
``N`` = full length. The differences are confined to paths the published tables did not use: ``should_keep``
(an immutable LLaMA-2 prompt prefix of 11 and suffix of 19 tokens, ``N`` reduced accordingly),
``correct_subset`` (softmax over the four answer-letter ids only), the ordering of the LERF side curve, and a
prompt-format sanity check. ``task="mcqa"`` therefore shares the Wikipedia rules; selecting correctly answered
questions is the data loader's job.

Results are per-sample numpy float64 curves (see :func:`nlp_perturbation_curves`); AUAC / AU-MSE are the
trapezoid areas of their sample means (:func:`palrp_bench.metrics.nlp.auac`, :func:`~palrp_bench.metrics.nlp.au_mse`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from ...errors import BadInputError, UnsupportedModelError
from ...metrics.auc import NLP_FRACTIONS
from ...protocol import check_protocol
from ...stages import stage
from ..explained import TokenBatch
from . import register_procedure

__all__ = [
    "PerturbationTask",
    "TextReadout",
    "check_right_padded",
    "PerturbationSettings",
    "TASKS",
    "VARIANTS",
    "NLP_FRACTIONS",
    "nlp_perturbation_curves",
    "resolve_settings",
    "resolve_unk_id",
    "tokens_per_step",
    "perturbation_orders",
    "readout_logits",
]

#: Curve variants in the returned dictionary.
VARIANTS: tuple[str, str] = ("generation", "pruning")


@dataclass(frozen=True)
class PerturbationTask:
    """Per-task rules of docs/protocol.md section 2.

    * ``head``: ``"classifier"`` (``LlamaForSequenceClassification``: logits ``[B, C]``) or ``"causal_lm"``
      (``LlamaForCausalLM``: next-token logits read at the last real position).
    * ``tracked``: ``"label"`` (ground truth, IMDB) or ``"prediction"`` (arg-max of the unperturbed logits).
    * ``pruning_key``: ``"abs"`` (ascending ``|relevance|``) or ``"signed"`` (ascending relevance).
    * ``mse_over``: ``"all_logits"`` (sum over every class logit) or ``"tracked_logit"``.
    """

    name: str
    head: Literal["classifier", "causal_lm"]
    tracked: Literal["label", "prediction"]
    pruning_key: Literal["abs", "signed"]
    mse_over: Literal["all_logits", "tracked_logit"]
    paper_table: str


TASKS: dict[str, PerturbationTask] = {
    "imdb": PerturbationTask("imdb", "classifier", "label", "abs", "all_logits", "Tables 1-2"),
    "mcqa": PerturbationTask("mcqa", "causal_lm", "prediction", "signed", "tracked_logit", "Table 3 (left, ARC-Easy)"),
    "wikipedia": PerturbationTask("wikipedia", "causal_lm", "prediction", "signed", "tracked_logit",
                                  "Table 3 (right)"),
}


@dataclass(frozen=True)
class PerturbationSettings:
    """The resolved switches of one run (every correction named; all off under ``protocol="official"``)."""

    protocol: str
    causal: bool
    exclude_padding: bool
    keep_bos: bool
    restore_id0_tokens: bool


def _task(name: str) -> PerturbationTask:
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise BadInputError(f"unknown perturbation task {name!r}", f"use one of: {', '.join(TASKS)}") from None


def resolve_settings(task: PerturbationTask, protocol: str, *, causal: bool = True,
                     exclude_padding: bool | None = None, keep_bos: bool | None = None,
                     restore_id0_tokens: bool | None = None) -> PerturbationSettings:
    """Fill unset switches from ``protocol`` (official: as the official code ran; corrected: all fixes on).
    ``causal`` is not one of them: causal attention unless ``causal=False`` is asked for (module docstring)."""
    protocol = check_protocol(protocol)
    official = protocol == "official"
    if task.head == "classifier" and not causal:
        raise BadInputError(f"causal=False is not defined for task {task.name!r}",
                            "the sequence classifier always runs causally; drop causal=False")
    return PerturbationSettings(
        protocol=protocol,
        causal=bool(causal),
        exclude_padding=(not official) if exclude_padding is None else bool(exclude_padding),
        keep_bos=(not official) if keep_bos is None else bool(keep_bos),
        restore_id0_tokens=official if restore_id0_tokens is None else bool(restore_id0_tokens),
    )


def resolve_unk_id(unk_id: int | None = None, tokenizer=None) -> int:
    """The UNK id used for perturbed tokens (docs/protocol.md section 2).

    ``unk_id`` wins when given; otherwise ``tokenizer.unk_token_id``; a tokenizer without one (LLaMA-3) uses the id
    of the token ``"#"`` via ``tokenizer.convert_tokens_to_ids("#")``, exactly as the official ARC / Wikipedia
    scripts set it.
    """
    if unk_id is not None:
        if isinstance(unk_id, bool) or not isinstance(unk_id, (int, np.integer)) or unk_id < 0:
            raise BadInputError(f"unk_id must be a non-negative token id, got {unk_id!r}",
                                "pass the tokenizer's unk id (or tokenizer=...)")
        return int(unk_id)
    if tokenizer is None:
        raise BadInputError("no UNK token id: neither unk_id nor tokenizer was given",
                            "pass unk_id=<id> or tokenizer=<the model's tokenizer>")
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None:
        return int(unk)
    hash_id = tokenizer.convert_tokens_to_ids("#")
    if hash_id is None or (isinstance(hash_id, list)):
        raise BadInputError("the tokenizer has no unk token and no '#' token",
                            "pass unk_id=<id> explicitly")
    return int(hash_id)


def tokens_per_step(n_replaceable: int) -> np.ndarray:
    """``n = ceil(f * N)`` for the 11 official fractions (int64 array of length 11)."""
    return np.array([int(np.ceil(f * n_replaceable)) for f in NLP_FRACTIONS.grid], dtype=np.int64)


def perturbation_orders(scores: np.ndarray, task: PerturbationTask) -> tuple[np.ndarray, np.ndarray]:
    """Orders over the replaceable positions of one sample: ``(generation, pruning)``.

    Generation restores in ``argsort(scores)[::-1]`` order (most relevant first, signed); pruning replaces in
    ``argsort(|scores|)`` (IMDB) or ``argsort(scores)`` (MCQA / Wikipedia) order, least relevant first.
    """
    generation = np.argsort(scores)[::-1].copy()
    key = np.abs(scores) if task.pruning_key == "abs" else scores
    pruning = np.argsort(key)
    return generation, pruning


# ----------------------------------------------------------------------------------------------- input checks


def _as_2d(name: str, value, shape: tuple[int, int] | None = None) -> torch.Tensor:
    tensor = torch.as_tensor(value)
    if tensor.dim() == 1:
        tensor = tensor.unsqueeze(0)
    if tensor.dim() != 2:
        raise BadInputError(f"{name} must be [batch, tokens], got shape {tuple(tensor.shape)}",
                            f"pass {name} as a 2D tensor")
    if shape is not None and tuple(tensor.shape) != shape:
        raise BadInputError(f"{name} has shape {tuple(tensor.shape)} but input_ids has {shape}",
                            f"give {name} one entry per input token")
    return tensor


def _per_sample_ints(name: str, value, batch: int) -> torch.Tensor:
    tensor = torch.as_tensor(value).reshape(-1).long().cpu()
    if tensor.numel() != batch:
        raise BadInputError(f"{name} has {tensor.numel()} entries for {batch} samples",
                            f"pass one {name[:-1] if name.endswith('s') else name} per sample")
    return tensor


def _model_device_and_dtype(model) -> tuple[torch.device, torch.dtype]:
    embeddings = model.get_input_embeddings()
    weight = embeddings.weight
    return weight.device, (weight.dtype if weight.dtype.is_floating_point else torch.float32)


def _check_model(model, task: PerturbationTask) -> None:
    if not callable(getattr(model, "get_input_embeddings", None)) or not hasattr(model, "base_model"):
        raise UnsupportedModelError(f"{type(model).__name__} is not a Hugging Face model",
                                    "pass a LlamaForSequenceClassification (imdb) or LlamaForCausalLM (mcqa, wikipedia)")
    _output_head(model, task)
    if model.training:
        raise BadInputError("the model is in training mode (dropout would make the curves random)",
                            "call model.eval() first")


# ------------------------------------------------------------------------------------------- perturbed inputs


@dataclass
class _SamplePlan:
    """Which rows of the forward batch belong to one sample."""

    original_row: int
    generation_rows: list[int]
    pruning_rows: list[int]
    tracked: int | None


def _replaceable_positions(ids: torch.Tensor, real: torch.Tensor, task: PerturbationTask,
                           settings: PerturbationSettings, index: int, bos_id: int | None) -> np.ndarray:
    if task.head == "causal_lm" or settings.exclude_padding:
        keep = real.clone()
    else:
        keep = torch.ones_like(real)
    if settings.keep_bos:
        if bos_id is not None and int(ids[0]) != bos_id:
            raise BadInputError(f"keep_bos=True but sample {index} does not start with BOS id {bos_id}",
                                "tokenize with the BOS token first (as the paper's protocol does)")
        keep[0] = False
    positions = torch.nonzero(keep, as_tuple=False).reshape(-1).numpy()
    if positions.size == 0:
        raise BadInputError(f"sample {index} has no token that can be perturbed",
                            "drop empty texts (BOS-only or all-padding rows) before evaluation")
    return positions


def _perturbed_copies(ids: torch.Tensor, positions: np.ndarray, scores: np.ndarray, unk_id: int,
                      task: PerturbationTask, settings: PerturbationSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """``[11, T]`` generation inputs and ``[11, T]`` pruning inputs of one sample."""
    if not np.isfinite(scores[positions]).all():
        raise BadInputError("scores contain NaN or inf at perturbable tokens",
                            "check the explainer output before the perturbation")
    counts = tokens_per_step(len(positions))
    generation_order, pruning_order = perturbation_orders(scores[positions], task)
    positions_t = torch.as_tensor(positions, dtype=torch.long)
    steps = len(counts)

    generation = ids.unsqueeze(0).repeat(steps, 1)
    generation[:, positions_t] = unk_id
    if settings.restore_id0_tokens:
        generation[:, ids == 0] = 0
    pruning = ids.unsqueeze(0).repeat(steps, 1)
    for step, n in enumerate(counts):
        restored = positions_t[torch.as_tensor(generation_order[:n], dtype=torch.long)]
        generation[step, restored] = ids[restored]
        replaced = positions_t[torch.as_tensor(pruning_order[:n], dtype=torch.long)]
        pruning[step, replaced] = unk_id
    return generation, pruning


# ----------------------------------------------------------------------------------------------- forwards


def _output_head(model, task: PerturbationTask) -> torch.nn.Module | None:
    """The module that maps the last hidden state to the tracked logits (``score`` or the LM head); None for a
    sequence classifier that pools by itself (BERT / RoBERTa: the first token), which is run whole."""
    if task.head == "classifier":
        head = getattr(model, "score", None)
        if head is None and type(model).__name__.endswith("ForSequenceClassification"):
            return None
        if not isinstance(head, torch.nn.Module):
            raise UnsupportedModelError(f"task 'imdb' needs a sequence classifier, got {type(model).__name__}",
                                        "load the finetuned LlamaForSequenceClassification")
        return head
    head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
    if not isinstance(head, torch.nn.Module):
        raise UnsupportedModelError(f"task {task.name!r} needs a causal LM, got {type(model).__name__}",
                                    "load the model with AutoModelForCausalLM / LlamaForCausalLM")
    return head


class TextReadout:
    """The logits the perturbation protocols read from a Hugging Face text model at each row's last real position
    (docs/protocol.md section 2): the head applied to the hidden state there, soft-capped as the model caps its own
    output (Gemma), or the whole model for a sequence classifier that pools by itself (BERT, RoBERTa). Built once
    per model; checks that the model fits ``task`` and is in eval mode. Shared by this module and the AttnLRP
    paper's protocol (:mod:`palrp_bench.evaluation.procedures.attnlrp_perturbation`)."""

    def __init__(self, model, task: PerturbationTask):
        _check_model(model, task)
        self.model, self.head, self.cap = model, _output_head(model, task), _final_softcap(model, task)

    @classmethod
    def of(cls, model) -> "TextReadout":
        """The read-out of ``model`` by its head: a sequence classifier's classes, else the next-token logits."""
        classifier = type(model).__name__.endswith("ForSequenceClassification")
        return cls(model, TASKS["imdb" if classifier else "wikipedia"])

    def __call__(self, attention_mask: torch.Tensor, last: torch.Tensor, **inputs) -> torch.Tensor:
        """``[R, C]`` logits of rows given by ``inputs`` (``input_ids=`` or ``inputs_embeds=``) and
        ``attention_mask`` (2D, or the 4D non-causal mask), read at the positions ``last`` ``[R]``."""
        if self.head is None:  # a classifier with its own pooling
            return self.model(attention_mask=attention_mask, **inputs).logits
        hidden = self.model.base_model(attention_mask=attention_mask, use_cache=False, **inputs).last_hidden_state
        logits = self.head(hidden[torch.arange(hidden.shape[0], device=hidden.device), last.to(hidden.device)])
        return logits if self.cap is None else torch.tanh(logits / self.cap) * self.cap


def readout_logits(model, input_ids, attention_mask=None, *, task: str, causal: bool = True,
                   batch_size: int | None = None, show_progress: bool = False,
                   tracked: torch.Tensor | None = None) -> torch.Tensor:
    """Logits the perturbation protocol reads for each row: ``[R, C]`` (classifier) or ``[R, V]`` (causal LM); with
    ``tracked`` (one class per row, ``-1`` = the row's arg-max) only what the curves need of each row, reduced on the
    model's device: ``[R, 3]`` float64 (the tracked class, its logit, the row's log-sum-exp), so a causal LM's
    vocabulary-wide logits never leave the device (:func:`_tracked_stats`).

    The head reads the hidden state at the last real position (last ``attention_mask == 1``; right padding).
    A sequence classifier without ``score`` (BERT, RoBERTa: they pool the first token) runs whole with the mask.
    For the decoder classifier this is the official code's pooling (``attention_mask.sum(1) - 1``); the Hugging Face
    class would instead pool at the last token whose id differs from the pad id, which moves as soon as the
    official protocol turns pads into UNK. Causal runs pass the 2D mask (the library adds the causal part);
    non-causal runs (``causal=False``, the official ARC / Wikipedia defect) pass a 4D additive float mask
    ``[R, 1, T, T]`` that allows every real key. Columns after the last real position of every row in a chunk are
    dropped: they cannot reach the read-out position. Returns float32 (``tracked``: float64) on the CPU, computed
    without gradients.
    """
    spec = _task(task)
    readout = TextReadout(model, spec)
    ids = _as_2d("input_ids", input_ids).long().cpu()
    mask = (torch.ones_like(ids) if attention_mask is None
            else _as_2d("attention_mask", attention_mask, tuple(ids.shape)).long().cpu())
    for index in range(ids.shape[0]):
        check_right_padded(mask[index], index)
    if spec.head == "classifier" and not causal:
        raise BadInputError("causal=False is not defined for task 'imdb'", "drop causal=False")
    track = None if tracked is None else _per_sample_ints("tracked", tracked, ids.shape[0])
    device, dtype = _model_device_and_dtype(model)
    chunk = batch_size or ids.shape[0]
    outputs = []
    starts = range(0, ids.shape[0], chunk)
    with torch.no_grad():
        for start in tqdm(starts, desc=f"{spec.name} perturbation forwards", leave=False,
                          disable=not show_progress or len(starts) <= 1):
            rows, real = ids[start:start + chunk], mask[start:start + chunk]
            last = real.sum(dim=1) - 1
            width = int(last.max()) + 1
            rows, real = rows[:, :width], real[:, :width]
            if causal:
                attention = real.to(device)
            else:
                allowed = real.bool()[:, None, None, :].expand(-1, 1, width, width).to(device)
                attention = torch.zeros(allowed.shape, dtype=dtype, device=device)
                attention.masked_fill_(~allowed, torch.finfo(dtype).min)
            try:
                logits = readout(attention, last, input_ids=rows.to(device))
            except (ValueError, IndexError, RuntimeError) as err:
                if causal:
                    raise
                # OPT and BLOOM derive positions / ALiBi from a 2D mask and cannot take the non-causal 4D one
                raise UnsupportedModelError(f"causal=False (the official non-causal runs) needs a model whose forward "
                                            f"takes a 4D attention mask; {type(model).__name__} does not "
                                            f"({type(err).__name__})", "use the causal task") from None
            if track is None:
                outputs.append(logits.float().cpu())
            else:
                outputs.append(_tracked_stats(logits, track[start:start + chunk].to(logits.device)).cpu())
    return torch.cat(outputs, dim=0)


def _tracked_stats(logits: torch.Tensor, tracked: torch.Tensor) -> torch.Tensor:
    """``[R, 3]`` float64 of ``[R, C]`` logits on their device: the tracked class (the row's arg-max where
    ``tracked`` is negative), its logit, and the row's log-sum-exp, so that the protocol's softmax probability is
    ``exp(logit - logsumexp)`` (the softmax over every class, as on the whole row, in float64)."""
    wide = logits.double()
    index = torch.where(tracked < 0, wide.argmax(dim=-1), tracked)
    if bool((index >= wide.shape[1]).any()):
        raise BadInputError(f"tracked class {int(index.max())} is outside the {wide.shape[1]} logits",
                            "check labels / predicted against the model's output size")
    picked = wide.gather(1, index[:, None])[:, 0]
    return torch.stack([index.double(), picked, torch.logsumexp(wide, dim=-1)], dim=1)


def _final_softcap(model, task: PerturbationTask) -> float | None:
    """``c`` of the soft-capping ``c * tanh(z / c)`` a causal LM applies to its logits (Gemma 2; Gemma 3 when set),
    so the read-out sees the model's own output; None for classifiers and uncapped models."""
    if task.head == "classifier" or not type(model).__name__.endswith("ForCausalLM"):
        return None
    return getattr(model.config, "final_logit_softcapping", None)


def check_right_padded(real: torch.Tensor, index: int) -> None:
    """A one-line error unless row ``index`` of an attention mask is real tokens followed by padding."""
    if int(real.sum()) == 0:
        raise BadInputError(f"sample {index} is all padding", "drop empty texts before evaluation")
    if bool((real[1:] > real[:-1]).any()):
        raise BadInputError(f"sample {index} is not right-padded (attention_mask has a 0 before a 1)",
                            "pad on the right (tokenizer.padding_side = 'right')")


# ----------------------------------------------------------------------------------------------- public API


def nlp_perturbation_curves(model, input_ids, scores, task="imdb", attention_mask=None, labels=None,
                            unk_id=None, protocol="official", *, predicted=None, causal=True,
                            exclude_padding=None, keep_bos=None, batch_size=None, tokenizer=None,
                            restore_id0_tokens=None, show_progress: bool = True) -> dict:
    """Per-sample generation and pruning curves of docs/protocol.md section 2 (Tables 1-3).

    Args:
        model: Hugging Face model in eval mode: ``LlamaForSequenceClassification`` for ``task="imdb"``,
            ``LlamaForCausalLM`` for ``"mcqa"`` / ``"wikipedia"``.
        input_ids: ``[B, T]`` token ids (BOS first). IMDB under ``protocol="official"``: padded as the official
            run (right-padded to 512 with pad = eos), every column counts. MCQA / Wikipedia: right-padded.
        scores: ``[B, T]`` per-token scores as an explainer returns them (signed; values at padding unused when
            padding is excluded).
        task: ``"imdb"``, ``"mcqa"`` or ``"wikipedia"`` (:data:`TASKS`).
        attention_mask: ``[B, T]`` with 1 for real tokens, 0 for padding (``None``: all real).
        labels: ``[B]`` gold labels, required for IMDB (the tracked class).
        unk_id / tokenizer: the UNK id, or a tokenizer to read it from (:func:`resolve_unk_id`).
        protocol: ``"official"`` or ``"corrected"``: defaults of the switches below.
        predicted: ``[B]`` tracked token ids for MCQA / Wikipedia (default: arg-max of the unperturbed forward
            under the same attention, as the official code does). Not allowed for IMDB.
        causal: causal attention (default); ``False`` reproduces the official non-causal ARC / Wikipedia runs.
        exclude_padding, keep_bos, restore_id0_tokens: the corrections (module docstring); ``None`` = the
            protocol's choice.
        batch_size: rows (perturbed sequences) per forward; ``None`` = every row of the call in one forward.
        show_progress: tqdm bar over the forward chunks.

    Returns:
        ``{"generation": {"ac": A, "mse": M}, "pruning": {"ac": A, "mse": M}}`` with numpy float64 arrays of
        shape ``[B, 11]``: step ``k`` is fraction ``k / 10`` (:data:`~palrp_bench.metrics.auc.NLP_FRACTIONS`). Generation step 0 is
        the all-UNK input and step 10 the original; pruning step 0 is the original.
    """
    spec = _task(task)
    settings = resolve_settings(spec, protocol, causal=causal, exclude_padding=exclude_padding,
                                keep_bos=keep_bos, restore_id0_tokens=restore_id0_tokens)
    unk = resolve_unk_id(unk_id, tokenizer)
    _check_model(model, spec)

    ids = _as_2d("input_ids", input_ids).long().cpu()
    batch, length = ids.shape
    if batch == 0 or length == 0:
        raise BadInputError(f"input_ids is empty (shape {tuple(ids.shape)})", "pass at least one non-empty sample")
    score_t = _as_2d("scores", scores, (batch, length)).detach().cpu()
    if not score_t.dtype.is_floating_point:
        raise BadInputError(f"scores must be floating point, got {score_t.dtype}", "pass the explainer's scores")
    if score_t.dtype in (torch.float16, torch.bfloat16):
        score_t = score_t.float()
    score_np = score_t.numpy()
    real = (torch.ones_like(ids, dtype=torch.long) if attention_mask is None
            else _as_2d("attention_mask", attention_mask, (batch, length)).long().cpu())
    if bool(((real != 0) & (real != 1)).any()):
        raise BadInputError("attention_mask must contain only 0 and 1", "pass the tokenizer's attention_mask")
    if spec.tracked == "label":
        if labels is None:
            raise BadInputError("task 'imdb' tracks the gold label but labels=None", "pass labels=[...] per sample")
        if predicted is not None:
            raise BadInputError("predicted= is not used by task 'imdb' (it tracks the gold label)",
                                "drop predicted= or pass labels=")
        tracked = _per_sample_ints("labels", labels, batch)
    else:
        tracked = None if predicted is None else _per_sample_ints("predicted", predicted, batch)
        if tracked is not None and bool((tracked < 0).any()):
            b = int(torch.nonzero(tracked < 0)[0, 0])
            raise BadInputError(f"tracked class {int(tracked[b])} of sample {b} is outside the logits",
                                "check labels / predicted against the model's output size")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise BadInputError(f"batch_size must be a positive int or None, got {batch_size!r}", "e.g. batch_size=32")
    bos_id = getattr(model.config, "bos_token_id", None)

    # Build every perturbed row; identical (ids, mask) rows are evaluated once.
    rows: list[torch.Tensor] = []
    row_masks: list[torch.Tensor] = []
    plans: list[_SamplePlan] = []
    for b in range(batch):
        check_right_padded(real[b], b)
        positions = _replaceable_positions(ids[b], real[b].bool(), spec, settings, b, bos_id)
        generation, pruning = _perturbed_copies(ids[b], positions, score_np[b], unk, spec, settings)
        first = len(rows)
        sample_rows = [ids[b].unsqueeze(0), generation, pruning]
        rows.extend(torch.cat(sample_rows, dim=0))
        row_masks.extend(real[b].unsqueeze(0).expand(1 + 2 * len(NLP_FRACTIONS.x), -1))
        steps = len(NLP_FRACTIONS.x)
        plans.append(_SamplePlan(first, list(range(first + 1, first + 1 + steps)),
                                 list(range(first + 1 + steps, first + 1 + 2 * steps)),
                                 None if tracked is None else int(tracked[b])))
    all_rows = torch.stack(rows)
    all_masks = torch.stack(row_masks)
    read = dict(task=spec.name, causal=settings.causal, batch_size=batch_size, show_progress=show_progress)
    curves = {variant: {"ac": np.empty((batch, len(NLP_FRACTIONS.x))),
                        "mse": np.empty((batch, len(NLP_FRACTIONS.x)))} for variant in VARIANTS}
    if spec.mse_over == "all_logits":  # a classifier: every logit counts, and there are few
        logits = _read_unique(model, all_rows, all_masks, None, read).double()
        num_classes = logits.shape[1]
        for b, plan in enumerate(plans):
            y0 = logits[plan.original_row]
            target = int(torch.argmax(y0)) if plan.tracked is None else plan.tracked
            if not 0 <= target < num_classes:
                raise BadInputError(f"tracked class {target} of sample {b} is outside the {num_classes} logits",
                                    "check labels / predicted against the model's output size")
            for variant, row_ids in (("generation", plan.generation_rows), ("pruning", plan.pruning_rows)):
                y = logits[row_ids]
                curves[variant]["ac"][b] = torch.softmax(y, dim=-1)[:, target].numpy()
                curves[variant]["mse"][b] = ((y0 - y) ** 2).sum(dim=-1).numpy()
        return curves
    # the tracked logit of a causal LM: each sample's original row first (its tracked token is its arg-max unless
    # given), then the perturbed rows, each read at its sample's token on the device (_tracked_stats)
    originals = torch.tensor([plan.original_row for plan in plans])
    wanted = torch.tensor([-1 if plan.tracked is None else plan.tracked for plan in plans])
    first = _read_unique(model, all_rows[originals], all_masks[originals], wanted, read)
    sample_of_row = torch.repeat_interleave(torch.arange(batch), 1 + 2 * len(NLP_FRACTIONS.x))
    stats = first[sample_of_row].clone()
    rest = ~(all_rows == all_rows[originals[sample_of_row]]).all(dim=1)  # rows equal to the original are read
    stats[rest] = _read_unique(model, all_rows[rest], all_masks[rest], first[sample_of_row[rest], 0].long(), read)
    probability = torch.exp(stats[:, 1] - stats[:, 2])
    for b, plan in enumerate(plans):
        y0 = first[b, 1]
        for variant, row_ids in (("generation", plan.generation_rows), ("pruning", plan.pruning_rows)):
            curves[variant]["ac"][b] = probability[row_ids].numpy()
            curves[variant]["mse"][b] = ((y0 - stats[row_ids, 1]) ** 2).numpy()
    return curves


def _read_unique(model, rows: torch.Tensor, masks: torch.Tensor, tracked: torch.Tensor | None, read: dict
                 ) -> torch.Tensor:
    """:func:`readout_logits` of ``rows``, each distinct (ids, mask, tracked class) row forwarded once, rows of
    similar length sharing a forward (so each is cut to a short width); results in the order of ``rows``."""
    if rows.shape[0] == 0:
        return torch.empty((0, 3), dtype=torch.float64)
    length = rows.shape[1]
    key = torch.cat([rows, masks] + ([] if tracked is None else [tracked[:, None]]), dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    by_length = torch.argsort(unique[:, length:2 * length].sum(dim=1), stable=True)
    ordered = unique[by_length]
    out = readout_logits(model, ordered[:, :length], ordered[:, length:2 * length],
                         tracked=None if tracked is None else ordered[:, 2 * length], **read)
    unsorted = torch.empty_like(out)
    unsorted[by_length] = out
    return unsorted[inverse]


# ------------------------------------------------------------------------------------- the procedure of a cell
#: perturbed rows per NLP sample actually forwarded: original + 11 generation + 11 pruning steps, minus the three
#: duplicates (generation 100% = pruning 0% = original; generation 0% = pruning 100% = all UNK), docs/protocol.md
#: section 2
NLP_FORWARDS = 20
#: next-token tasks prune by signed relevance, so with an even number N of perturbable tokens generation 50% and
#: pruning 50% keep the same N/2 tokens: one more duplicate for half the samples
NEXT_TOKEN_FORWARDS = 19.5
#: the task kinds it evaluates and the forwards it adds to one of their samples
FORWARDS = {"text_classification": float(NLP_FORWARDS), "next_token": NEXT_TOKEN_FORWARDS}


@register_procedure("nlp_perturbation", applies_to=tuple(FORWARDS), forwards=lambda kind, shape, task: FORWARDS[kind],
                    description="token generation / pruning with UNK; AUAC (higher better) and AU-MSE (lower better)")
def run_nlp_perturbation(batch: TokenBatch, ctx) -> None:
    """Generation and pruning curves of every sample (:func:`nlp_perturbation_curves` under the batch's rules): rows
    ``ac`` / ``mse`` x ``generation`` / ``pruning`` x the 11 fractions."""
    ok = batch.ok
    kwargs = dict(task=batch.perturbation_task, attention_mask=batch.attention_mask[ok], protocol=ctx.protocol,
                  tokenizer=batch.bundle.tokenizer, batch_size=ctx.forward_batch_size, show_progress=False)
    if batch.labels is not None:
        kwargs["labels"] = [batch.labels[j] for j in ok]
    else:
        kwargs["causal"] = batch.causal
    with stage("forwards"):
        curves = nlp_perturbation_curves(batch.model, batch.input_ids[ok], batch.scores[ok], **kwargs)
    for k, j in enumerate(ok):
        for variant in ("generation", "pruning"):
            for metric in ("ac", "mse"):
                batch.rows[j] += [(metric, variant, step, float(v))
                                  for step, v in zip(NLP_FRACTIONS.labels, curves[variant][metric][k])]
