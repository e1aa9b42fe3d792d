"""Loading models as the user would, with one-line errors: Hugging Face decoders (optionally bitsandbytes 4-bit
NF4), timm vision transformers (DeiT: docs/protocol.md section 5), and the registry of model loaders the runner uses.

* :func:`load_hf_model`: a ``*ForCausalLM`` / ``*ForSequenceClassification`` from the hub or a local folder.
* :func:`keep_4bit_differentiable`: stops bitsandbytes repacking 4-bit weights into a format without gradients.
* :func:`load_timm_vit`: a timm ViT / DeiT from a local checkpoint, the timm cache or the hub;
  :func:`load_timm_checkpoint`: a timm model saved in the hub's format (a folder or a hub id; ``model=hf``).
* :func:`load_model`: ``model.loader`` of a model config -> ``(model, tokenizer)`` (:data:`LOADERS`); ``torchvision``
  loads torchvision ViTs as timm models (:mod:`palrp_bench.models.torchvision_vit`).
* :func:`tokenizer_source`: which tokenizer a model config loads; :func:`weights_description`: what is read.
* :func:`hf_config_json`: a Hugging Face model config's ``config.json`` without loading anything;
  :func:`positional_kind_of_config`: the positional encoding of the twin a model config will get (run settings that
  depend on it are fixed before the model loads).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ..discovery import Registry
from ..errors import BadInputError, MissingDataError, UnsupportedModelError
from ..findings import Findings
from ..fingerprints import path_fingerprint, source_fingerprint
from ..hub import (TOKENIZER_FILES, WEIGHT_FILES, cached_hub_file, hub_model_cached, hub_offline, hub_reachable,
                   hub_tokenizer_cached, is_local_path)
from .architecture import (Architecture, hf_architecture, timm_architecture, timm_skeleton, torchvision_architecture,
                           torchvision_skeleton, vit_architecture)
from .heads import auto_class

__all__ = ["load_hf_model", "keep_4bit_differentiable", "load_tokenizer", "load_processor", "load_timm_vit", "LOADERS", "LoaderSpec",
           "register_loader", "loader_spec", "load_model", "DTYPES", "tokenizer_source", "holds_tokenizer",
           "local_tokenizer", "weights_description", "BNB_KERNELS_NOTE", "hf_config_json", "positional_kind_of_config",
           "local_checkpoint_problem", "random_model", "load_timm_checkpoint"]

log = logging.getLogger(__name__)

#: dtype names of the model configs (torch attribute names)
DTYPES = ("float32", "bfloat16", "float16", "float64")


def load_hf_model(name_or_path: str, *, kind: str = "causal", dtype: str = "bfloat16",
                  quantization: str | None = None, num_labels: int = 2, device_map: str | None = None, **kwargs):
    """Load a Hugging Face model with an LM or classification head from the hub or a local folder.

    ``kind``: ``causal`` (``AutoModelForCausalLM``), ``classifier`` (``AutoModelForSequenceClassification``, pad =
    eos when the model has no pad token, as the official IMDB setup), ``masked_lm`` (``AutoModelForMaskedLM``),
    ``seq2seq`` (``AutoModelForSeq2SeqLM``: T5, Flan-T5) or ``vlm`` (``AutoModelForImageTextToText``: Qwen2-VL,
    LLaVA, Gemma 3). ``quantization="nf4"``: bitsandbytes 4-bit NF4 with double quantization (Table 1 row "LLaMA-2
    7B quantized"). Errors (offline hub, missing folder) become one-line :class:`MissingDataError`.
    """
    import torch
    import transformers

    if dtype not in DTYPES:
        raise BadInputError(f"unknown dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")
    torch_dtype = getattr(torch, dtype)
    cls = auto_class(kind)
    if kind == "classifier":
        kwargs.setdefault("num_labels", num_labels)
    if quantization == "nf4":
        kwargs["quantization_config"] = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch_dtype)
        device_map = device_map or ("auto" if torch.cuda.is_available() else "cpu")
        _replace_bnb_kernels_warning()
    elif quantization not in (None, "none"):
        raise BadInputError(f"unknown quantization {quantization!r}", "use nf4 or none")
    try:
        model = cls.from_pretrained(name_or_path, dtype=torch_dtype, device_map=device_map, **kwargs)
    except OSError as err:
        raise MissingDataError(f"cannot load model {name_or_path!r}: {str(err).splitlines()[0]}",
                               "check the name/path, log in with `hf auth login` for gated LLaMA weights, or "
                               "pre-download the checkpoint and pass its local folder") from None
    if kind == "classifier" and model.config.pad_token_id is None:
        model.config.pad_token_id = model.config.eos_token_id
    model.eval()
    keep_4bit_differentiable(model)
    return model


#: what replaces bitsandbytes' warning that the ``kernels`` package is missing (see
#: :func:`_replace_bnb_kernels_warning`)
BNB_KERNELS_NOTE = ("bitsandbytes: its optional fused 4-bit CPU kernel (package `kernels`, fetched from the hub at run "
                    "time) is not available; this costs palrp-bench no speed, because that kernel serves only "
                    "inference on repacked weights, which explanations need to avoid (docs/engine.md, 4-bit NF4 on "
                    "CPU)")
_BNB_KERNELS_LOGGER = "bitsandbytes.backends.cpu.ops"
_BNB_KERNELS_MESSAGE = "Failed to load CPU gemm_4bit_forward from kernels-community"


class _BnbKernelsNote(logging.Filter):
    """Drops bitsandbytes' "pip install kernels" warning and logs :data:`BNB_KERNELS_NOTE` once instead."""

    noted = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_BNB_KERNELS_MESSAGE):
            return True
        if not _BnbKernelsNote.noted:
            _BnbKernelsNote.noted = True
            log.info(BNB_KERNELS_NOTE)
        return False


def _replace_bnb_kernels_warning() -> None:
    """Install :class:`_BnbKernelsNote` on the bitsandbytes logger that warns, at its import on CPUs with
    AVX512-BF16, that the ``kernels`` package is missing. That kernel would replace the packed-weight inference
    path only (``gemv_4bit`` on ``packing_format_for_cpu`` weights), which :func:`keep_4bit_differentiable`
    switches off so that gradients flow; installing ``kernels`` would not help offline either (it downloads its
    code from the hub). Idempotent."""
    logger = logging.getLogger(_BNB_KERNELS_LOGGER)
    if not any(isinstance(f, _BnbKernelsNote) for f in logger.filters):
        logger.addFilter(_BnbKernelsNote())


def keep_4bit_differentiable(model) -> None:
    """Stop bitsandbytes from repacking 4-bit weights for CPU inference, or fail clearly if it already did.

    On CPUs with AVX512-BF16, bitsandbytes (0.50) converts a ``Linear4bit`` weight to a packed CPU format at the
    first forward that runs without gradients in eval mode (e.g. a perturbation step). The packed path computes
    different numbers and returns no input gradient, which would silently zero the relevance of every later
    explanation. The switch is a per-module attribute, so this touches only the given model object.
    """
    for module in model.modules():
        if hasattr(module, "support_avx512bf16_for_cpu"):
            state = getattr(getattr(module, "weight", None), "quant_state", None)
            if state is not None and getattr(state, "packing_format_for_cpu", False):
                raise BadInputError(
                    "this 4-bit model already ran an inference forward on the CPU and bitsandbytes repacked its "
                    "weights (no gradients through them any more)",
                    "load it with palrp_bench.models.loading.load_hf_model, or explain before any torch.no_grad() forward")
            module.support_avx512bf16_for_cpu = False


# ------------------------------------------------------------------------------------------------ timm ViTs
def load_timm_vit(name: str = "deit_tiny_patch16_224", checkpoint: str | Path | None = None, pretrained: bool = True,
              **model_kwargs):
    """Load a DeiT / ViT as a timm model in eval mode (docs/protocol.md section 5).

    * ``checkpoint``: a local file, e.g. an official facebookresearch/deit ``.pth`` (``{'model': state_dict}``;
      ``{'state_dict': ...}`` and bare state dicts work too), loaded strictly into ``timm.create_model(name)``
      (timm's ViT checkpoint filter adapts legacy layouts and resamples a position embedding of another size).
    * else ``pretrained=True``: timm's ``{name}.fb_in1k`` weights (= the official DeiT checkpoints) from the local
      Hugging Face cache, or downloaded when the hub is reachable (never waits on an unreachable hub).
    * else a randomly initialised model.

    ``model_kwargs`` go to ``timm.create_model`` (e.g. ``num_classes``, ``embed_dim``, ``depth`` for custom
    checkpoints; with pretrained weights a different ``num_classes`` gets a freshly initialised head, as in timm). Problems raise one-line :class:`UnsupportedModelError` (unknown name),
    :class:`MissingDataError` (file missing / unreadable, weights unavailable offline) or :class:`BadInputError`
    (checkpoint does not fit the architecture).
    """
    import timm

    base = str(name).partition(".")[0]
    if not timm.is_model(base):
        raise UnsupportedModelError(f"unknown timm model {name!r}",
                                    "use e.g. deit_tiny_patch16_224, deit_small_patch16_224 or deit_base_patch16_224")
    if checkpoint is not None:
        state = _read_checkpoint(Path(checkpoint))
        model = _create(timm, base, False, model_kwargs)
        _load_state(model, state, Path(checkpoint).name, base)
    elif pretrained:
        model = _create_pretrained(timm, timm_tagged(name), model_kwargs)
    else:
        model = _create(timm, base, False, model_kwargs)
    return model.eval()


def _create(timm, name: str, pretrained: bool, kwargs: dict, **extra):
    try:
        return timm.create_model(name, pretrained=pretrained, **kwargs, **extra)
    except TypeError as err:
        raise BadInputError(f"bad model arguments for {name}: {err}", "pass only timm VisionTransformer "
                                                                       "arguments (e.g. num_classes)") from None


def _read_checkpoint(path: Path) -> dict:
    import torch

    if not path.is_file():
        raise MissingDataError(f"checkpoint {path} does not exist",
                               "download the official DeiT weights from https://github.com/facebookresearch/deit "
                               "(e.g. deit_tiny_patch16_224-a1311bcf.pth) or fix the path")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user problem
        raise MissingDataError(f"cannot read checkpoint {path} ({type(err).__name__})",
                               "pass a PyTorch .pth/.pt file holding a state dict") from None
    if not isinstance(state, dict):
        raise MissingDataError(f"checkpoint {path} holds a {type(state).__name__}, not a state dict",
                               "save model.state_dict() (or {'model': state_dict})")
    return state


def _load_state(model, state: dict, filename: str, name: str) -> None:
    import importlib

    # the checkpoint filter of the model's own timm module (ViT / DeiT, Eva: RoPE ViTs, EVA-02)
    checkpoint_filter_fn = importlib.import_module(type(model).__module__).checkpoint_filter_fn
    try:
        state = checkpoint_filter_fn(state, model)
        model.load_state_dict(state, strict=True)
    except (RuntimeError, KeyError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise BadInputError(f"checkpoint {filename} does not fit {name}: {first}",
                            "pass the architecture it was trained with (name, and e.g. num_classes / embed_dim / "
                            "depth as keyword arguments)") from None


def timm_tagged(source: str) -> str:
    """``name.tag`` of a timm model source; the default tag is ``fb_in1k`` (the official DeiT weights)."""
    base, _, tag = str(source).partition(".")
    return f"{base}.{tag or 'fb_in1k'}"


def timm_weights_repo(source: str) -> str | None:
    """The hub repository timm downloads the pretrained weights of ``source`` from (None: timm has none)."""
    from timm.models import get_pretrained_cfg

    try:
        cfg = get_pretrained_cfg(timm_tagged(source))
    except RuntimeError:  # timm: "Invalid pretrained tag"
        return None
    return cfg.hf_hub_id if cfg is not None and cfg.hf_hub_id else None


def _create_pretrained(timm, tagged: str, kwargs: dict):
    from timm.models import get_pretrained_cfg

    fix = (f"download {tagged} once with network access (timm.create_model('{tagged}', pretrained=True)) or pass "
           "checkpoint=<official .pth from https://github.com/facebookresearch/deit>")
    if get_pretrained_cfg(tagged) is None:
        raise UnsupportedModelError(f"timm has no pretrained weights {tagged!r}", "check the tag (e.g. .fb_in1k)")
    repo = timm_weights_repo(tagged)
    cached = cached_hub_file(repo) if repo else None
    if cached is not None:
        return _create(timm, tagged, True, kwargs, pretrained_cfg_overlay={"file": cached})
    if hub_offline() or not hub_reachable(timeout=3.0):
        raise MissingDataError(f"pretrained weights {tagged} are not in the local cache and the hub is unreachable",
                               fix)
    try:
        return _create(timm, tagged, True, kwargs)
    except (OSError, ConnectionError, RuntimeError) as err:
        raise MissingDataError(f"cannot download {tagged} ({type(err).__name__})", fix) from None


def holds_tokenizer(folder: str | Path) -> bool:
    """Whether a local folder holds tokenizer files (:data:`palrp_bench.hub.TOKENIZER_FILES`)."""
    folder = Path(folder).expanduser()
    return folder.is_dir() and any((folder / name).is_file() for name in TOKENIZER_FILES)


def tokenizer_source(cfg) -> str:
    """The tokenizer a model config loads, in this order: ``model.tokenizer`` when set; ``model.source`` when it
    is a hub id or a local folder holding tokenizer files (a finetuned folder saved with its tokenizer is its own
    tokenizer, so ``model.source=/ckpt/x`` works offline); else ``model.base_model``; else ``model.source``
    (which then fails with a one-line error naming ``model.tokenizer``)."""
    if getattr(cfg, "tokenizer", None):
        return str(cfg.tokenizer)
    source = str(cfg.source)
    if not is_local_path(source) or holds_tokenizer(source):
        return source
    return str(getattr(cfg, "base_model", None) or source)


def weights_description(cfg) -> str:
    """What a model config's loader reads, for log lines: the checkpoint file when ``model.checkpoint`` is set
    (the DeiT ``.pth``, with the architecture it is loaded into), else ``model.source``."""
    checkpoint = getattr(cfg, "checkpoint", None)
    if checkpoint:
        return f"checkpoint {Path(str(checkpoint)).expanduser()} into {cfg.source}"
    return str(cfg.source)


def hf_config_json(cfg, known: dict | None = None) -> tuple[dict, str] | None:
    """``(config.json fields, where they were read)`` of a Hugging Face model config, looked up for ``source``, then
    ``base_model``, then ``tokenizer``: a local folder's file, the hub cache's, else ``known`` (a table of hub id ->
    fields); None when none of them describes it. Nothing is downloaded."""
    for candidate in (cfg.source, getattr(cfg, "base_model", None), getattr(cfg, "tokenizer", None)):
        if not candidate:
            continue
        candidate = str(candidate)
        if is_local_path(candidate):
            path = Path(candidate).expanduser() / "config.json"
            if path.is_file():
                return json.loads(path.read_text()), f"{path}"
            continue
        cached = cached_hub_file(candidate, ("config.json",))
        if cached is not None:
            return json.loads(Path(cached).read_text()), f"config.json of {candidate} (hub cache)"
        if known and candidate in known:
            return dict(known[candidate]), f"known architecture {candidate}"
    return None


def _downloaded_config(repo_id: str) -> dict | None:
    """``config.json`` of a hub repository, fetched into the hub cache (None offline or on any hub error)."""
    if hub_offline() or is_local_path(repo_id):
        return None
    try:
        from huggingface_hub import hf_hub_download

        return json.loads(Path(hf_hub_download(repo_id, "config.json")).read_text())
    except Exception:  # noqa: BLE001 - unreachable, gated, missing: the caller says what it could not find
        return None


@lru_cache(maxsize=64)
def _positional_kind(loader: str, source: str, base_model: str | None, tokenizer: str | None,
                     download: bool = True) -> str | None:
    from types import SimpleNamespace

    from .registry import positional_kind_of

    cfg = SimpleNamespace(loader=loader, source=source, base_model=base_model, tokenizer=tokenizer)
    fields = loader_spec(loader).text_config(cfg, download)
    if fields is None:
        raise MissingDataError(f"cannot tell the architecture of model source {source!r}: no config.json found "
                               "(local folder, hub cache or hub)",
                               "download the model first, or set model.base_model to the hub id it was finetuned from")
    return positional_kind_of(str(fields.get("model_type", "")))


def positional_kind_of_config(cfg, *, download: bool = True) -> str | None:
    """The positional kind (a name of :mod:`palrp_bench.lrp.positional`, e.g. ``learned_absolute``, ``rope``) of
    the twin a model config will be explained with, before any weight loads: a text model's from its
    ``config.json`` (its loader's :attr:`~LoaderSpec.text_config`; for a hub model not in the cache the file alone
    is fetched when the hub may be asked, unless ``download`` is False), a vision model's from the class of the model
    its loader builds on the meta device (:attr:`~LoaderSpec.skeleton`); None for loaders of neither (the self-test,
    random weights) or a model no twin covers. A text model whose ``config.json`` is nowhere is a one-line
    :class:`~palrp_bench.errors.MissingDataError`."""
    loader = str(getattr(cfg.loader, "value", cfg.loader))
    spec = loader_spec(loader)
    if spec.text_config is not None:
        return _positional_kind(loader, str(cfg.source), getattr(cfg, "base_model", None),
                                getattr(cfg, "tokenizer", None), download)
    if spec.skeleton is not None:
        from .registry import twin_class_for

        twin = twin_class_for(spec.skeleton(cfg))
        return None if twin is None else twin.positional.name
    return None


def local_tokenizer(cfg):
    """The tokenizer a model config loads (:func:`tokenizer_source`) when this machine has it without a download:
    the embedded models' shipped tokenizers, a local folder, or the hub cache; None otherwise (a plan reads it to
    size its inputs, and never fetches one)."""
    from ..hub import hub_tokenizer_cached

    if _value(cfg.loader) == "embedded_text":
        from ..data import synthetic_text

        return synthetic_text.load_tiny_tokenizer(kind=cfg.source)
    if _value(cfg.loader) != "hf":
        return None
    source = tokenizer_source(cfg)
    local = is_local_path(source)
    if (local and not holds_tokenizer(source)) or (not local and not hub_tokenizer_cached(source)):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError):
        return None


def load_processor(name_or_path: str):
    """``AutoProcessor.from_pretrained`` (a vision-language model's image processor, tokenizer and chat template)
    with a one-line :class:`MissingDataError`."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(name_or_path)
    except (OSError, ValueError, TypeError) as err:
        raise MissingDataError(f"cannot load the processor {name_or_path!r}: {str(err).splitlines()[0]}",
                               "check model.tokenizer / model.source (a vision-language checkpoint's folder holds its "
                               "processor), log in with `hf auth login` for gated repos, or pre-download it") from None


def load_tokenizer(name_or_path: str):
    """``AutoTokenizer.from_pretrained`` with a one-line :class:`MissingDataError`."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as err:
        raise MissingDataError(f"cannot load tokenizer {name_or_path!r}: {str(err).splitlines()[0]}",
                               "check model.tokenizer / model.source, log in with `hf auth login` for gated "
                               "LLaMA repos, or pre-download it and pass the local folder") from None


# ---------------------------------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class LoaderSpec:
    """One ``model.loader``: the function loading a model config on a device, ``(config, device) -> (model,
    tokenizer)`` (``config`` has the fields of a model config: ``source``, ``kind``, ``dtype``, ``quantization``,
    ``checkpoint``, ``tokenizer``), and what planning reads of it before anything loads:

    * ``offline``: it never touches the network (the embedded default runs with the hub switched off);
      ``loads_model``: it loads a model at all (the self-test's does not);
    * ``architecture(config, known)``: the :class:`~palrp_bench.models.architecture.Architecture` the cost model
      prices (``known``: hub id -> config.json fields of public base models), None when nothing describes it;
    * ``text_config(config, download)``: the ``config.json`` fields of the text model it will load (None: a loader
      of no text model; ``download``: the hub may be asked), what fixes the twin's positional kind before the
      weights load; ``skeleton(config)``: the model it builds, on the meta device (vision loaders: the twin, and its
      positional kind, follow from its class);
    * ``identity(config)``: what identifies its weights and tokenizer, by content where they are files
      (:mod:`palrp_bench.fingerprints`), the key of the user cache;
    * ``check(config, findings)``: the preflight of its weights, assets and tokenizer
      (:class:`~palrp_bench.findings.Findings`: problems with fixes, hub needs);
    * ``missing_weights(config)``: what a local checkpoint lacks (None: nothing, or not a local checkpoint).
    """

    name: str
    load: Callable[[Any, str], tuple[Any, Any]]
    architecture: Callable[[Any, dict | None], Architecture | None]
    identity: Callable[[Any], dict]
    offline: bool = False
    loads_model: bool = True
    text_config: Callable[[Any, bool], dict | None] | None = None
    skeleton: Callable[[Any], Any] | None = None
    check: Callable[[Any, Findings], None] | None = None
    missing_weights: Callable[[Any], str | None] = lambda cfg: None


#: ``model.loader`` -> :class:`LoaderSpec`
LOADERS = Registry("model loader", "model.loader")


def register_loader(name: str, **spec):
    """Decorator: the function loading models of ``model.loader == name`` and the rest of its :class:`LoaderSpec`."""
    def deco(load):
        LOADERS.register(name)(LoaderSpec(name, load, **spec))
        return load
    return deco


def loader_spec(name: str, context: str = "") -> LoaderSpec:
    """The registered :class:`LoaderSpec` of ``name`` (one-line error naming the loaders otherwise)."""
    return LOADERS.lookup(str(getattr(name, "value", name)), context)


def _value(x):
    return getattr(x, "value", x)


# ------------------------------------------------------------------------------------ what the loaders share
NO_SUCH_FOLDER = "no such folder"
DEIT_WEIGHTS_URL = "https://github.com/facebookresearch/deit"


def local_checkpoint_problem(source: str | Path) -> str | None:
    """What a local checkpoint folder lacks (``no such folder``, no ``config.json``, no weights), or None when it
    holds a saved Hugging Face model."""
    folder = Path(source).expanduser()
    if not folder.exists():
        return NO_SUCH_FOLDER
    if not (folder / "config.json").is_file():
        return "no config.json in it (not a saved Hugging Face model)"
    if not any((folder / w).is_file() for w in WEIGHT_FILES):
        return f"no weights in it ({', '.join(WEIGHT_FILES[:2])}, ...)"
    return None


def _config_architecture(cfg, known: dict | None) -> Architecture | None:
    """A Hugging Face model's architecture from the first ``config.json`` that describes it (:func:`hf_config_json`)."""
    found = hf_config_json(cfg, known)
    if found is not None and _value(cfg.kind) == "vit":  # a timm checkpoint in the hub's format (model=hf)
        return timm_architecture(str(found[0]["architecture"]), found[0].get("model_args") or {})
    return None if found is None else hf_architecture(found[0], _value(cfg.kind), found[1])


def _checkpoint_config(cfg, download: bool = True) -> dict | None:
    """``config.json`` of a Hugging Face checkpoint: local, cached, else fetched alone when the hub may be asked
    (``download``)."""
    found = hf_config_json(cfg)
    fields = found[0] if found is not None else None
    for candidate in (cfg.source, getattr(cfg, "base_model", None)):
        if fields is None and candidate and download:
            fields = _downloaded_config(str(candidate))
    return fields


def _source_identity(cfg) -> dict:
    """Weights (and a named tokenizer) by the content of their source: a local folder or a cached hub snapshot."""
    identity = {"weights": source_fingerprint(cfg.source)}
    if getattr(cfg, "tokenizer", None):
        identity["tokenizer"] = source_fingerprint(cfg.tokenizer)
    return identity


def _tokenizer_checks(cfg, findings: Findings) -> None:
    tokenizer = tokenizer_source(cfg)
    tok_fix = findings.fix("model.tokenizer=<tokenizer>") + " (a hub id or folder)"
    if is_local_path(tokenizer):
        if Path(tokenizer).expanduser().exists() and not holds_tokenizer(tokenizer):
            findings.add(f"tokenizer of {cfg.name}: {tokenizer} holds no tokenizer files "
                         "(tokenizer.json, tokenizer_config.json, tokenizer.model)", tok_fix)
        elif not Path(tokenizer).expanduser().exists() and tokenizer != str(cfg.source):
            findings.add(f"tokenizer folder {tokenizer} ({cfg.name}): no such folder", tok_fix)
        return
    if tokenizer == str(cfg.source):
        return  # the hub model's own repository: checked with the model
    findings.need(tokenizer, "model", f"hub tokenizer {tokenizer} ({cfg.name})", hub_tokenizer_cached(tokenizer),
                  tok_fix, check_access=True)


def _missing_local_weights(cfg) -> str | None:
    source = str(cfg.source)
    return local_checkpoint_problem(source) if is_local_path(source) else None


# ------------------------------------------------------------------------------------------------ the loaders
def _check_hf(cfg, findings: Findings) -> None:
    """A local checkpoint folder holds a saved model (its fix says how to train a missing classifier:
    ``findings.weights_hint``), a hub model is a need; then its tokenizer."""
    source = str(cfg.source)
    what = "finetuned weights" if _value(cfg.kind) == "classifier" else "checkpoint"
    if is_local_path(source):
        problem = local_checkpoint_problem(source)
        if problem is not None:
            findings.add(f"{what} {source} ({cfg.name}): {problem}",
                         findings.fix("model.source=<folder>") + findings.weights_hint)
        if problem == NO_SUCH_FOLDER:
            return  # its tokenizer depends on what the folder will hold
    else:
        findings.need(source, "model", f"hub model {source} ({cfg.name})", hub_model_cached(source),
                      findings.fix("model.source=<folder>"), check_access=True)
    if _value(cfg.kind) != "vit":  # a timm checkpoint (model=hf) has no tokenizer
        _tokenizer_checks(cfg, findings)


def load_timm_checkpoint(source: str):
    """A timm model saved in the hub's format (``config.json`` with ``architecture`` and ``pretrained_cfg``, weights
    beside it: ``timm.models.push_to_hf_hub`` / ``save_for_hf``) from a local folder (timm's ``local-dir:``) or a hub
    id (``hf-hub:``), in eval mode; one-line errors."""
    import timm

    prefix = "local-dir:" if is_local_path(source) else "hf-hub:"
    where = str(Path(source).expanduser()) if prefix == "local-dir:" else source
    try:
        return timm.create_model(prefix + where, pretrained=True).eval()
    except (OSError, RuntimeError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise MissingDataError(f"cannot load the timm checkpoint {source}: {first}",
                               "point model.source at a folder written by timm's save_for_hf (config.json and "
                               "model.safetensors) or a timm hub id") from None


@register_loader("hf", architecture=_config_architecture, identity=_source_identity, text_config=_checkpoint_config,
                 check=_check_hf, missing_weights=_missing_local_weights)
def _load_hf(cfg, device: str):
    """Hugging Face checkpoints (hub id or folder); ``kind=vit``: a timm checkpoint in the hub's format
    (:func:`load_timm_checkpoint`, ``model=hf`` with a timm folder)."""
    if _value(cfg.kind) == "vit":
        return load_timm_checkpoint(str(cfg.source)).to(device), None
    quant = None if _value(cfg.quantization) == "none" else _value(cfg.quantization)
    device_map = {"": device} if quant is not None else None
    model = load_hf_model(cfg.source, kind=_value(cfg.kind), dtype=_value(cfg.dtype), quantization=quant,
                          device_map=device_map)
    if quant is None:
        model = model.to(device)
    if _value(cfg.kind) == "vlm":  # the processor reads the images and the text
        return model, load_processor(tokenizer_source(cfg))
    return model, load_tokenizer(tokenizer_source(cfg))


def _check_timm(cfg, findings: Findings) -> None:
    """The ``model.checkpoint`` file, or timm's pretrained weights from the hub (cache)."""
    fix = findings.fix("model.checkpoint=<deit.pth>") + f" (the official weights: {DEIT_WEIGHTS_URL})"
    if cfg.checkpoint is not None:
        if not Path(cfg.checkpoint).expanduser().is_file():
            findings.add(f"DeiT checkpoint file {cfg.checkpoint} ({cfg.name})", fix)
        return
    repo = timm_weights_repo(cfg.source) or f"timm/{timm_tagged(cfg.source)}"
    findings.need(repo, "model", f"pretrained weights {repo} ({cfg.name})", cached_hub_file(repo) is not None, fix)


def _timm_identity(cfg) -> dict:
    """A timm name with its pretrained tag identifies published, immutable weights by name; a checkpoint file by
    content."""
    return {"weights": source_fingerprint(cfg.checkpoint) if cfg.checkpoint else {"name": cfg.source},
            "architecture": cfg.source}


@register_loader("timm", identity=_timm_identity, check=_check_timm,
                 architecture=lambda cfg, known: timm_architecture(str(cfg.source), getattr(cfg, "options", None)),
                 skeleton=lambda cfg: timm_skeleton(str(cfg.source), getattr(cfg, "options", None)))
def _load_timm(cfg, device: str):
    return load_timm_vit(cfg.source, checkpoint=cfg.checkpoint, **dict(cfg.options or {})).to(device).eval(), None


def _check_torchvision(cfg, findings: Findings) -> None:
    """The weights file: ``model.checkpoint``, else torchvision's cache (downloaded unless the network is off)."""
    from .torchvision_vit import weights_file

    path = Path(cfg.checkpoint).expanduser() if cfg.checkpoint else weights_file(cfg.source)
    if not path.is_file() and (cfg.checkpoint or hub_offline()):
        findings.add(f"torchvision weights {path} ({cfg.name}): no such file"
                     + ("" if cfg.checkpoint else " and the network is switched off (HF_HUB_OFFLINE=1)"),
                     findings.fix("model.checkpoint=<weights.pth>") + " (or run once with network: torchvision "
                                                                       "downloads them)")


@register_loader("torchvision", architecture=lambda cfg, known: torchvision_architecture(str(cfg.source)),
                 skeleton=lambda cfg: torchvision_skeleton(str(cfg.source)), identity=_source_identity,
                 check=_check_torchvision)
def _load_torchvision(cfg, device: str):
    """torchvision ViTs (the AttnLRP paper's ViT-B-16) as timm models: ``source`` = ``<builder>.<weights>``."""
    from .torchvision_vit import load_torchvision_vit

    return load_torchvision_vit(cfg.source, checkpoint=cfg.checkpoint).to(device).eval(), None


def _embedded_text_config(cfg, download: bool = False) -> dict | None:
    from ..data.synthetic_text import ASSET_DIR

    path = ASSET_DIR / str(cfg.source) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _embedded_text_architecture(cfg, known) -> Architecture:
    return hf_architecture(_embedded_text_config(cfg), _value(cfg.kind), f"embedded {cfg.source}")


def _embedded_text_identity(cfg) -> dict:
    from ..data.synthetic_text import ASSET_DIR, tiny_tokenizer_dir

    return {"weights": {"content": path_fingerprint(ASSET_DIR / str(cfg.source))},
            "tokenizer": {"content": path_fingerprint(tiny_tokenizer_dir(str(cfg.source)))}}


def _missing_assets(cfg, findings: Findings, paths, script: str) -> None:
    for path in paths:
        if not path.is_file():
            findings.add(f"embedded asset {path} ({cfg.name})", f"recreate it: python scripts/{script}")


def _check_embedded_text(cfg, findings: Findings) -> None:
    from ..data.synthetic_text import ASSET_DIR, tiny_tokenizer_dir

    _missing_assets(cfg, findings, [ASSET_DIR / cfg.source / "model.safetensors",
                                    tiny_tokenizer_dir(cfg.source) / "tokenizer.json"], "train_tiny_text.py")


@register_loader("embedded_text", architecture=_embedded_text_architecture, identity=_embedded_text_identity,
                 text_config=_embedded_text_config, check=_check_embedded_text, offline=True)
def _load_embedded_text(cfg, device: str):
    from ..data import synthetic_text

    model = synthetic_text.load_tiny_text_model(cfg.source)
    return model.to(device).eval(), synthetic_text.load_tiny_tokenizer(kind=cfg.source)


def _embedded_vit_skeleton(cfg):
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from ..data.synthetic_vision import tiny_vit_paths

    config = json.loads(tiny_vit_paths()[1].read_text())
    with torch.device("meta"):
        return VisionTransformer(**config["timm_kwargs"])


def _embedded_vit_architecture(cfg, known) -> Architecture:
    return vit_architecture(_embedded_vit_skeleton(cfg), "embedded tiny ViT")


def _embedded_vit_identity(cfg) -> dict:
    from ..data.synthetic_vision import tiny_vit_paths

    return {"weights": {"content": [path_fingerprint(p) for p in tiny_vit_paths()]}}


def _check_embedded_vit(cfg, findings: Findings) -> None:
    from ..data.synthetic_vision import tiny_vit_paths

    _missing_assets(cfg, findings, tiny_vit_paths(), "train_tiny_vit.py")


@register_loader("embedded_vit", architecture=_embedded_vit_architecture, skeleton=_embedded_vit_skeleton,
                 identity=_embedded_vit_identity, check=_check_embedded_vit, offline=True)
def _load_embedded_vit(cfg, device: str):
    from ..data import synthetic_vision

    return synthetic_vision.load_tiny_vit().to(device).eval(), None


def _embedded_vlm_config(cfg, download: bool = False) -> dict | None:
    from ..data.synthetic_vqa import tiny_vlm_dir

    path = tiny_vlm_dir() / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _embedded_vlm_architecture(cfg, known) -> Architecture | None:
    fields = _embedded_vlm_config(cfg)
    return None if fields is None else hf_architecture(fields, "vlm", "embedded tiny vision-language model")


def _embedded_vlm_identity(cfg) -> dict:
    from ..data.synthetic_vqa import tiny_vlm_dir

    return {"weights": {"content": path_fingerprint(tiny_vlm_dir())}}


def _check_embedded_vlm(cfg, findings: Findings) -> None:
    from ..data.synthetic_vqa import tiny_vlm_dir

    _missing_assets(cfg, findings, [tiny_vlm_dir() / "model.safetensors", tiny_vlm_dir() / "config.json"],
                    "train_tiny_vlm.py")


@register_loader("embedded_vlm", architecture=_embedded_vlm_architecture, identity=_embedded_vlm_identity,
                 text_config=_embedded_vlm_config, check=_check_embedded_vlm, offline=True)
def _load_embedded_vlm(cfg, device: str):
    """The tiny vision-language model of the embedded VQA suite and its processor (data/synthetic_vqa.py)."""
    from ..data import synthetic_vqa

    model, processor = synthetic_vqa.load_tiny_vlm()
    return model.to(device).eval(), processor


@register_loader("random", architecture=_config_architecture, identity=_source_identity, offline=True)
def _load_random(cfg, device: str):
    """A model with random weights built from a Hugging Face config (tests, benchmarks, offline checks; no
    download): ``model.options`` holds the config's fields (``model_type`` first), ``options.seed`` (default 0) the
    seed of the initialisation, ``kind`` the head (:func:`random_model`). Tokenizer: ``model.tokenizer`` when set
    (a hub id or folder), else the suite's embedded word-level tokenizer (:mod:`palrp_bench.data.synthetic_text`),
    whose vocabulary fits the tiny configs."""
    model = random_model(dict(cfg.options or {}), kind=_value(cfg.kind), dtype=_value(cfg.dtype))
    if cfg.tokenizer:
        tokenizer = load_tokenizer(cfg.tokenizer)
    else:
        from ..data import synthetic_text

        tokenizer = synthetic_text.load_tiny_tokenizer()
    return model.to(device), tokenizer


def random_model(options: dict, *, kind: str = "causal", dtype: str = "float32"):
    """A Hugging Face model of head ``kind`` (:func:`load_hf_model`'s kinds) with random weights from the config
    fields ``options`` (``model_type`` names the config class; ``seed``, default 0, seeds the initialisation), in
    eval mode and ``dtype``."""
    import torch
    import transformers

    options = dict(options)
    seed = int(options.pop("seed", 0))
    model_type = options.pop("model_type", None)
    if model_type is None:
        raise BadInputError("a random model's options name no model_type", "add model.options.model_type (e.g. t5)")
    if dtype not in DTYPES:
        raise BadInputError(f"unknown dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")
    config = transformers.AutoConfig.for_model(model_type, **options)
    cls = auto_class(kind)
    torch.manual_seed(seed)
    return cls.from_config(config).to(getattr(torch, dtype)).eval()


@register_loader("selftest", architecture=lambda cfg, known: Architecture("none", source="no model"),
                 identity=lambda cfg: {"weights": {"name": "selftest"}}, offline=True, loads_model=False)
def _load_nothing(cfg, device: str):
    """The harness self-test has no model."""
    return None, None


def load_model(cfg, device: str):
    """``(model, tokenizer)`` of a model config on ``device`` via its ``loader`` (:data:`LOADERS`)."""
    return loader_spec(cfg.loader, f" (model {cfg.name})").load(cfg, device)
