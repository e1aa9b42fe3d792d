"""Vision pixel-perturbation protocol (docs/protocol.md section 3; paper Table 4), batched.

For every image and each step ``p = 0.1, ..., 0.9``, ``int(H * W * p)`` pixels chosen on the map
(:func:`palrp_bench.metrics.perturbation.perturbation_masks`: ReLU, per-image min-max, then the most / least
relevant pixels with the tie-break ``tie_break``) are set to 0 in all channels of the raw [0, 1] image, the
result is normalised and classified. The 9 perturbed copies of all images of a batch (plus the originals when the
reference is the model's own prediction) are stacked into one batch and run in as few forwards as
``batch_size`` allows; a chunk's images are built on the fly, so memory is bounded by ``batch_size``. A cell's
procedure stacks all four curves of its images (predicted- and target-class maps, positive and negative) and the
originals once (:func:`curves_logits`): 37 forwards per image in full chunks.

* ``labels=None`` ("predicted" / the official ``top`` curve): score 1 when the arg-max class of the
  perturbed image equals the arg-max class of the original image.
* ``labels`` given ("target" / the official ``target`` curve): score 1 when it equals the label.

The maps are whatever explanation the caller chose (map of the predicted class for "predicted", of the
ground-truth class for "target"; docs/protocol.md section 3). Curves feed
:func:`palrp_bench.metrics.perturbation.perturbation_auc`.

Tie-break (:mod:`palrp_bench.metrics.perturbation`): ``tie_break=None`` takes the default of ``protocol``
(``official`` -> ``topk``, the official ``torch.topk`` call on the same tensor; ``corrected`` -> ``random``).
``topk`` is called where the official code called it: on the model's device (the official code moved its maps to
the GPU), one ``[1, H * W]`` map per call (its default batch size); which tied pixels it removes is that device's
choice, and :func:`tie_order_device` names it (``cpu``, ``cuda/<GPU name>``) for the results. ``random`` seeds
each image's order with :func:`tie_break_seeds` from ``(seed, sample_id)``, so it needs the sample ids; the removed
pixels of an image then depend on neither the batch, the shard nor the device (:func:`tie_order_device`: ``any``).

Per-sample results do not depend on ``batch_size`` beyond float rounding of batched matmuls (an arg-max can
flip only when two logits are within ~1e-6).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from ...data.sample_ids import stable_hash
from ...errors import BadInputError
from ...metrics.maps import as_map_batch
from ...metrics.perturbation import VISION_FRACTIONS, perturbation_masks, resolve_tie_break, tied_pixel_share
from ...numerics import device_kind
from ...rundir import SCALAR
from ...stages import stage
from ..explained import PixelBatch
from . import register_procedure

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "resolve_normalization", "tie_break_seeds", "tie_order_device",
           "perturbed_logits", "curves_logits", "vision_perturbation_curves", "VISION_FORWARDS"]

#: what :func:`tie_order_device` says under ``tie_break="random"``: the order is the same on every device
ANY_DEVICE = "any"

#: timm's IMAGENET_DEFAULT_MEAN / _STD (what the official code normalises with).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: how far outside [0, 1] raw pixels may lie (e.g. bicubic resampling overshoot) before they count as a mistake
_RAW_TOLERANCE = 0.05

Normalization = Callable[[torch.Tensor], torch.Tensor] | tuple[Sequence[float], Sequence[float]] | None


def resolve_normalization(model: torch.nn.Module, normalize: Normalization = None
                          ) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function mapping raw ``[N, 3, H, W]`` pixels in [0, 1] to the model's input.

    ``normalize``: a callable (used as is), a ``(mean, std)`` pair, or None = the model's timm
    ``pretrained_cfg`` mean/std when it has them, else ImageNet mean/std.
    """
    if callable(normalize):
        return normalize
    if normalize is None:
        cfg = getattr(model, "pretrained_cfg", None) or {}
        mean, std = cfg.get("mean", IMAGENET_MEAN), cfg.get("std", IMAGENET_STD)
    else:
        try:
            mean, std = normalize
        except (TypeError, ValueError):
            raise BadInputError(f"normalize={normalize!r} is neither a callable nor a (mean, std) pair",
                                "pass e.g. ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)) or None") from None
    mean_t = torch.tensor([float(v) for v in mean], dtype=torch.float32)
    std_t = torch.tensor([float(v) for v in std], dtype=torch.float32)
    if mean_t.numel() != std_t.numel() or bool((std_t <= 0).any()):
        raise BadInputError(f"bad normalisation mean={tuple(mean)} std={tuple(std)}",
                            "pass one mean and one positive std per channel")

    def _normalize(x: torch.Tensor) -> torch.Tensor:
        m = mean_t.to(x.device, x.dtype).view(1, -1, 1, 1)
        s = std_t.to(x.device, x.dtype).view(1, -1, 1, 1)
        return (x - m) / s

    return _normalize


def tie_break_seeds(seed: int, sample_ids: Sequence[str]) -> list[int]:
    """Per-image seeds of ``tie_break="random"``: the stable hash (:mod:`palrp_bench.data.sample_ids`) of
    ``"tie_break|<seed>|<sample_id>"``, the same on every machine, batch and shard."""
    return [stable_hash(f"tie_break|{int(seed)}|{sample_id}") for sample_id in sample_ids]


def _removal_masks(maps: torch.Tensor, positive: bool, fractions, protocol, tie_break, sample_ids, seed
                   ) -> torch.Tensor:
    tie_break = resolve_tie_break(tie_break, protocol)
    seeds = None
    if tie_break == "random":
        if sample_ids is None or isinstance(sample_ids, str) or len(sample_ids) != maps.shape[0]:
            got = "none" if sample_ids is None else f"{1 if isinstance(sample_ids, str) else len(sample_ids)}"
            raise BadInputError(f"tie_break='random' needs one sample id per image ({maps.shape[0]}), got {got}",
                                "pass sample_ids= (they seed each image's order among equal values)")
        seeds = tie_break_seeds(seed, [str(i) for i in sample_ids])
    return perturbation_masks(maps, positive, fractions, tie_break=tie_break, seeds=seeds)


def model_device_dtype(model: torch.nn.Module, fallback: torch.Tensor) -> tuple[torch.device, torch.dtype]:
    """Device and dtype of the model's first floating parameter (``fallback``'s device and float32 without one)."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.device, p.dtype
    return fallback.device, torch.float32


def tie_order_device(model: torch.nn.Module, protocol: str = "official", tie_break: str | None = None) -> str:
    """Which device kind chooses among tied pixels when ``model`` is evaluated: under ``topk`` the kind of the
    model's device, where the call runs (:func:`palrp_bench.numerics.device_kind`: ``cpu``, ``cuda/<GPU name>``);
    under ``random`` :data:`ANY_DEVICE` (the seeded order is the same everywhere)."""
    if resolve_tie_break(tie_break, protocol) == "random":
        return ANY_DEVICE
    device, _ = model_device_dtype(model, torch.empty(0))
    return device_kind(device)


def _check_inputs(model, images, maps) -> tuple[torch.Tensor, torch.Tensor]:
    if getattr(model, "training", False):
        raise BadInputError("the model is in training mode (dropout would make the curves random)",
                            "call model.eval() before evaluating")
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1] != 3:
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise BadInputError(f"images have shape {shape}, expected [B, 3, H, W]",
                            "pass raw RGB pixels in [0, 1] (before normalisation)")
    if images.shape[0] == 0:
        raise BadInputError("images is an empty batch", "pass at least one image")
    # a small tolerance lets resampling overshoot through; normalised images (about -2..2.6) are caught
    if bool((images.min() < -_RAW_TOLERANCE) | (images.max() > 1 + _RAW_TOLERANCE)):
        raise BadInputError(f"images hold values in [{float(images.min()):.3g}, {float(images.max()):.3g}],"
                            " expected raw pixels in [0, 1]",
                            "pass un-normalised images; the model's normalisation is applied here")
    maps = as_map_batch(maps)
    if maps.shape[0] != images.shape[0] or maps.shape[1:] != images.shape[2:]:
        raise BadInputError(f"maps have shape {tuple(maps.shape)} but images {tuple(images.shape)}",
                            "pass one [H, W] map per image at the image resolution")
    return images, maps


@torch.inference_mode()
def _forward(model, normalize, images: torch.Tensor, device, dtype) -> torch.Tensor:
    out = model(normalize(images.to(device=device, dtype=torch.float32)).to(dtype))
    if isinstance(out, (tuple, list)):  # e.g. distilled heads
        out = out[0]
    if out.dim() != 2:
        raise BadInputError(f"the model returned shape {tuple(out.shape)}, expected logits [N, classes]",
                            "pass a classifier whose forward returns logits")
    return out.float()


def perturbed_logits(model: torch.nn.Module, images: torch.Tensor, maps: torch.Tensor, positive: bool = True, *,
                     normalize: Normalization = None, batch_size: int | None = None,
                     include_original: bool = False, fractions: tuple[float, ...] = VISION_FRACTIONS,
                     progress: bool = False, protocol: str = "official", tie_break: str | None = None,
                     sample_ids: Sequence[str] | None = None, seed: int = 0) -> torch.Tensor:
    """Logits of the perturbed images, float32 ``[B, S, C]`` for the ``S`` steps (9 by default).

    With ``include_original=True`` the unperturbed image is step 0 of ``S + 1``, evaluated in the same
    stacked forwards. ``batch_size``: the most images per forward (None = all in one forward).
    ``protocol``, ``tie_break``, ``sample_ids``, ``seed``: which tied pixels are removed, chosen on the model's
    device (module docstring).
    """
    return curves_logits(model, images, [(maps, positive)], normalize=normalize, batch_size=batch_size,
                         include_original=include_original, fractions=fractions, progress=progress,
                         protocol=protocol, tie_break=tie_break, sample_ids=sample_ids, seed=seed)


def curves_logits(model: torch.nn.Module, images: torch.Tensor, curves: Sequence[tuple[torch.Tensor, bool]], *,
                  normalize: Normalization = None, batch_size: int | None = None, include_original: bool = False,
                  fractions: tuple[float, ...] = VISION_FRACTIONS, progress: bool = False, protocol: str = "official",
                  tie_break: str | None = None, sample_ids: Sequence[str] | None = None, seed: int = 0
                  ) -> torch.Tensor:
    """Logits of the perturbed images of several curves at once, float32 ``[B, O + K * S, C]``: ``O`` = 1 with
    ``include_original`` (the unperturbed image first), then for each of the ``K`` curves ``(maps [B, H, W],
    positive)`` its ``S`` steps. Every image of every curve goes through the same stacked forwards,
    ``batch_size`` images each (None = one forward), image by image, so a batch of a few images fills the
    device's forwards as well as a large one; per image the logits are those of :func:`perturbed_logits` on each
    curve alone, up to the float rounding of differently batched forwards (the arg-max of a perturbed image can
    change only where two logits lie within rounding of each other)."""
    if not curves:
        raise BadInputError("no perturbation curve asked for", "pass at least one (maps, positive) pair")
    checked = [_check_inputs(model, images, maps) for maps, _ in curves]
    images = checked[0][0]
    if batch_size is not None and batch_size < 1:
        raise BadInputError(f"batch_size={batch_size}", "pass a positive number of images per forward, or None")
    norm = resolve_normalization(model, normalize)
    device, dtype = model_device_dtype(model, images)
    # everything happens on the model's device: the removed pixels are chosen there (the tie order is the device's,
    # module docstring) and the perturbed copies are built there
    images = images.to(device)
    removed = [_removal_masks(maps.to(device), positive, fractions, protocol, tie_break, sample_ids, seed)
               for (_, maps), (_, positive) in zip(checked, curves)]  # each [B, S, H, W]
    if include_original:
        removed.insert(0, torch.zeros_like(removed[0][:, :1]))
    removed = torch.cat(removed, dim=1) if len(removed) > 1 else removed[0]
    n_images, n_steps = removed.shape[:2]
    total = n_images * n_steps
    chunk = total if batch_size is None else batch_size
    outputs = []
    starts = range(0, total, chunk)
    if progress:
        from tqdm.auto import tqdm
        starts = tqdm(starts, desc="perturbation forwards", unit="chunk")
    for start in starts:
        idx = torch.arange(start, min(start + chunk, total), device=removed.device)
        img_idx, step_idx = idx // n_steps, idx % n_steps
        keep = (~removed[img_idx, step_idx]).unsqueeze(1).to(images.dtype)  # [n, 1, H, W]
        outputs.append(_forward(model, norm, images[img_idx] * keep, device, dtype))
    logits = torch.cat(outputs, dim=0)
    return logits.reshape(n_images, n_steps, -1).cpu()


def vision_perturbation_curves(model, images, maps, labels=None, positive=True, *, normalize=None,
                               batch_size=None, protocol="official", tie_break=None, sample_ids=None,
                               seed=0) -> torch.Tensor:
    """Per-sample 0/1 perturbation curves ``[B, 9]`` at ``p = 0.1, ..., 0.9`` (docs/protocol.md section 3).

    ``model``: a classifier (timm / torch module) taking normalised images, in eval mode. ``images``:
    ``[B, 3, H, W]`` raw pixels in [0, 1]. ``maps``: ``[B, H, W]`` relevance (ReLU'd and min-max normalised
    here). ``labels``: None -> agreement with the model's original prediction ("predicted"), else ``[B]``
    class indices -> top-1 accuracy ("target"). ``positive``: remove the most (True) or least (False)
    relevant pixels first. ``normalize``: callable or ``(mean, std)``; default = the model's
    ``pretrained_cfg`` mean/std, else ImageNet. ``batch_size``: most images per forward (None = one forward
    for all ``B * 9`` (+ ``B`` originals) images). ``tie_break``: ``"topk"`` | ``"random"`` | None = the
    default of ``protocol`` (``official`` -> ``topk``, ``corrected`` -> ``random``); ``random`` needs
    ``sample_ids`` (one per image) and uses the run ``seed`` (module docstring).
    """
    if labels is not None:
        labels = torch.as_tensor(labels).reshape(-1).cpu()
        n = images.shape[0] if isinstance(images, torch.Tensor) else -1
        if labels.numel() != n or labels.is_floating_point() or labels.dtype == torch.bool:
            raise BadInputError(f"labels must be {n} integer class indices, got {labels.dtype} "
                                f"{tuple(labels.shape)}", "pass one class index per image, or None")
    logits = perturbed_logits(model, images, maps, positive, normalize=normalize, batch_size=batch_size,
                              include_original=labels is None, protocol=protocol, tie_break=tie_break,
                              sample_ids=sample_ids, seed=seed)
    n_classes = logits.shape[-1]
    if labels is None:
        reference = logits[:, 0].argmax(dim=-1)
        logits = logits[:, 1:]
    else:
        if bool((labels < 0).any() | (labels >= n_classes).any()):
            raise BadInputError(f"labels {labels.tolist()[:8]} out of range for {n_classes} classes",
                                "pass class indices of the model's output")
        reference = labels.long()
    return (logits.argmax(dim=-1) == reference[:, None]).float()


# ------------------------------------------------------------------------------------- the procedure of a cell
#: pixel perturbation forwards per image: the original (for its prediction), then 9 steps of the predicted-class map
#: and 9 of the target-class map, each positive and negative (docs/protocol.md section 3), all in one set of
#: stacked forwards (:func:`curves_logits`)
VISION_FORWARDS = 37


@register_procedure(
    "vision_perturbation", applies_to=("image_classification",), forwards=lambda kind, shape, task: VISION_FORWARDS,
    explanations=1, needs=("scores_target",),
    description="blacken the most (positive) / least (negative) relevant pixels; AUC x100 of agreement / accuracy")
def run_vision_perturbation(batch: PixelBatch, ctx) -> None:
    """Rows ``agreement`` (predicted-class map, agreement with the original prediction) and, where every sample is
    labelled (the batch then holds the labelled class's maps), ``accuracy`` (top-1 accuracy), variants
    ``positive`` / ``negative``, steps ``p = 0.1..0.9`` (:func:`vision_perturbation_curves`' rules, tie-break
    ``ctx.tie_break`` seeded from ``ctx.seed`` and the sample id; the perturbed images of all curves and samples go
    through one set of stacked forwards, :func:`curves_logits`), and ``tied_pixel_share`` of each map (variants
    ``predicted`` / ``target``; :func:`palrp_bench.metrics.perturbation.tied_pixel_share`); each sample's info records
    ``tie_device``, the device kind that ordered tied pixels (:func:`tie_order_device`)."""
    ok, model = batch.ok, batch.model
    with_target = batch.scores_target is not None
    ties = dict(protocol=ctx.protocol, tie_break=ctx.tie_break, seed=ctx.seed,
                sample_ids=[batch.samples[i].sample_id for i in ok], batch_size=ctx.forward_batch_size)
    tie_device = tie_order_device(model, ctx.protocol, ctx.tie_break)
    for i in ok:
        batch.infos[i]["tie_device"] = tie_device
    maps = {"predicted": batch.scores[ok]} | ({"target": batch.scores_target[ok]} if with_target else {})
    device, _ = model_device_dtype(model, batch.scores)
    for kind, kind_maps in maps.items():
        share = tied_pixel_share(kind_maps.to(device)).cpu()  # on a GPU there: the same exact comparisons, faster
        for k, i in enumerate(ok):
            batch.rows[i].append(("tied_pixel_share", kind, SCALAR, float(share[k])))
    # (metric, map, positive, reference) of each curve; the original images' arg-max is the predicted reference
    curves = [(metric, kind, positive) for positive in (True, False)
              for metric, kind in (("agreement", "predicted"), ("accuracy", "target")) if kind in maps]
    with stage("forwards"):
        logits = curves_logits(model, batch.images[ok], [(maps[m], positive) for _, m, positive in curves],
                               include_original=True, **ties)
    steps = len(VISION_FRACTIONS)
    predicted = logits[:, 0].argmax(dim=-1)
    labels = torch.tensor([batch.labels[i] for i in ok]) if with_target else None
    for c, (metric, _, positive) in enumerate(curves):
        reference = predicted if metric == "agreement" else labels
        if metric == "accuracy" and bool((labels < 0).any() | (labels >= logits.shape[-1]).any()):
            raise BadInputError(f"labels {labels.tolist()[:8]} out of range for {logits.shape[-1]} classes",
                                "pass class indices of the model's output")
        hits = (logits[:, 1 + c * steps:1 + (c + 1) * steps].argmax(dim=-1) == reference[:, None]).float()
        variant = "positive" if positive else "negative"
        for k, i in enumerate(ok):
            batch.rows[i] += [(metric, variant, p, float(v)) for p, v in zip(VISION_FRACTIONS, hits[k])]
