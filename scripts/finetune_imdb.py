"""Finetune a LLaMA IMDB classifier with the official PA-LRP recipe (docs/protocol.md section 2, Tables 1-2).

No finetuned weights were released, so Tables 1-2 need this step. The recipe (official ``NLP/main_imdb.py`` with
``--num-warmup-steps 5 --lr 5e-4``, README: "converge to 92% accuracy within ~10 epochs"):

* ``LlamaForSequenceClassification`` (2 labels, pad = eos, pooled at the last real token), loaded from the base
  checkpoint (LLaMA-2 7B or TinyLlama 1.1B) in float32; every parameter trains except the token embeddings.
* AdamW, lr 5e-4, betas (0.9, 0.999), eps 1e-6, no weight decay (the ``transformers.AdamW`` defaults the
  official code used), batch 32, gradient-norm clip 1.0, cross-entropy on the logits.
* Linear schedule: warm-up over 5 epochs, linear decay to zero at the end of ``--schedule-epochs`` (the official
  ``--num_epochs`` default, 200; the decay horizon, not the number of epochs anyone ran).
* Reviews tokenised with BOS, truncated to 512 tokens; the first 5000 rows of the training part of the official
  70/30 split, in that order, without shuffling (the official DataLoader does not shuffle).
* ``--quantized``: the official "baseline2" variant: 4-bit NF4 with double quantization (bitsandbytes), backbone
  frozen, only the classification head (``score.weight``) trains. Compute dtype bfloat16 here (the official
  training script asked for float16 compute; its evaluation loaded bfloat16).
* Model selection: the checkpoint with the best accuracy on the selection rows is exported to ``best/``.
  Default: a clean validation split (the 1000 training-part rows after the 5000 training rows, never evaluated
  in the tables). ``--official-selection``: the first 5000 test rows, as the official script did (these are the
  rows Tables 1-2 evaluate on). The official script divided the correct count by the size of the whole test part
  (15000) although it evaluated 5000 rows; we report correct / evaluated (the arg-max selection is the same).

Output folder::

    run_config.json     the recipe and data choices (checked on --resume)
    history.json        per epoch: train loss/accuracy, selection loss/accuracy, learning rate
    checkpoint_<e>/     training state after epoch e (trainable parameters, optimizer, scheduler); only the
                        latest is kept; written atomically, so a killed run never leaves a torn checkpoint
    best/               save_pretrained folder of the best epoch (loads with from_pretrained / load_hf_model)

Usage::

    python scripts/finetune_imdb.py --model meta-llama/Llama-2-7b-hf --output-dir checkpoints/train_llama2_7b_imdb \\
        --imdb-path "IMDB Dataset.csv"
    ln -s train_llama2_7b_imdb/best checkpoints/llama2_7b_imdb   # where configs/model/llama2_7b.yaml looks
    python scripts/finetune_imdb.py ... --resume          # continue after an interruption
    python scripts/finetune_imdb.py --smoke --output-dir /tmp/imdb_smoke   # tiny random model, seconds on CPU
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from palrp_bench.atomic_io import write_json_atomic  # noqa: E402
from palrp_bench.errors import BadInputError, MissingDataError, PalrpError  # noqa: E402

#: One training example: token ids (BOS first, unpadded, at most ``max_length``) and the label (0 pos, 1 neg).
Example = tuple[list[int], int]

CHECKPOINT_PREFIX = "checkpoint_"
STATE_FILE = "training_state.pt"


@dataclass(frozen=True)
class Recipe:
    """The official finetuning hyper-parameters (docs/protocol.md section 2)."""

    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.0
    batch_size: int = 32
    warmup_epochs: int = 5
    schedule_epochs: int = 200
    grad_clip: float = 1.0
    max_length: int = 512
    train_rows: int = 5000
    epochs: int = 10


OFFICIAL = Recipe()
#: Smoke mode: a tiny random classifier on synthetic data; only the run length and data sizes shrink.
SMOKE_EPOCHS = 3
SMOKE_TRAIN_ROWS = 64
SMOKE_VAL_ROWS = 32
SMOKE_VOCAB = 64
#: Fields of run_config.json that must match on --resume (``epochs`` may grow; the rest define the run).
RESUME_KEYS = ("model", "smoke", "quantized", "dtype", "lr", "batch_size", "warmup_epochs", "schedule_epochs",
               "grad_clip", "max_length", "train_rows", "val_rows", "official_selection", "imdb_source",
               "imdb_path", "seed")


# --------------------------------------------------------------------------------------------------- data


def imdb_examples(tokenizer, *, source: str, path: str | None, train_rows: int, val_rows: int | None,
                  official_selection: bool, max_length: int) -> tuple[list[Example], list[Example], str]:
    """Training and selection rows from :func:`palrp_bench.data.imdb.imdb_splits` (imported lazily)."""
    try:
        from palrp_bench.data.imdb import imdb_splits
    except ImportError as err:
        raise MissingDataError(f"the IMDB loader palrp_bench.data.imdb is not available ({err})",
                               "update palrp-bench (it ships palrp_bench/data/imdb.py)") from None
    splits = imdb_splits(tokenizer, source=source, path=path, train_size=train_rows,
                         validation="official_test" if official_selection else "train_holdout",
                         validation_size=val_rows, max_length=max_length, pad_to_max=False)

    def as_examples(samples) -> list[Example]:
        return [(list(s.input_ids), int(s.label)) for s in samples]

    kind = ("official: first test rows (also the evaluation rows)" if official_selection
            else f"validation: training-part rows {train_rows}.. (held out)")
    return as_examples(splits.train), as_examples(splits.validation), kind


def smoke_examples(n: int, seed: int) -> list[Example]:
    """Synthetic reviews: BOS + 6-20 random tokens; label 0 iff token 5 occurs, label 1 iff token 6 occurs."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for index in range(n):
        length = int(torch.randint(6, 21, (1,), generator=generator))
        ids = torch.randint(7, SMOKE_VOCAB, (length,), generator=generator)
        label = index % 2
        where = torch.randint(0, length, (2,), generator=generator)
        ids[where] = 5 + label
        examples.append(([1] + ids.tolist(), label))
    return examples


# -------------------------------------------------------------------------------------------------- model


def _local_files_only(name_or_path: str) -> bool:
    """Never hang on the hub: local folders, offline mode and an unreachable hub read only local files."""
    if Path(name_or_path).expanduser().exists():
        return True
    from palrp_bench.hub import hub_offline, hub_reachable

    return hub_offline() or not hub_reachable()


def load_tokenizer(name_or_path: str):
    """The base model's tokenizer with pad = eos and right padding (as the official loader)."""
    from transformers import AutoTokenizer
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=_local_files_only(name_or_path))
    except (OSError, ValueError) as err:
        raise MissingDataError(f"cannot load the tokenizer of {name_or_path!r}: {str(err).splitlines()[0]}",
                               "pass a local model folder, or download it first (`hf download <name>`)") from None
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def build_smoke_model(folder: Path, seed: int) -> Path:
    """A tiny random LLaMA classifier saved to ``folder`` (reused when present), loaded like a real checkpoint."""
    if (folder / "config.json").is_file():
        return folder
    import transformers
    config = transformers.LlamaConfig(vocab_size=SMOKE_VOCAB, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                                      num_labels=2, initializer_range=0.05)
    torch.manual_seed(seed)
    model = transformers.LlamaForSequenceClassification(config)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    os.replace(tmp, folder)
    return folder


def load_classifier(name_or_path: str, *, quantized: bool, dtype: str, seed: int, device: str):
    """Base checkpoint as a 2-label classifier (pad = eos); the new head is initialised under ``seed``."""
    from palrp_bench.models.loading import load_hf_model
    torch.manual_seed(seed)
    model = load_hf_model(name_or_path, kind="classifier", dtype=dtype, quantization="nf4" if quantized else None,
                       num_labels=2, local_files_only=_local_files_only(name_or_path))
    if not quantized:
        model.to(device)
    return model


def select_trainable(model, quantized: bool) -> dict[str, torch.nn.Parameter]:
    """Official choice: everything except the embeddings (full), or only ``score.weight`` (quantized)."""
    trainable = {}
    for name, param in model.named_parameters():
        wanted = name == "score.weight" if quantized else "embed" not in name
        wanted = wanted and param.dtype.is_floating_point
        param.requires_grad_(wanted)
        if wanted:
            trainable[name] = param
    if not trainable:
        raise BadInputError("no trainable parameter found", "the model must have a 'score' classification head")
    return trainable


# ----------------------------------------------------------------------------------------------- training


def batches(examples: Sequence[Example], batch_size: int, pad_id: int, max_length: int,
            device) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """In order, right-padded with ``pad_id`` to the longest row of the batch (pads are masked, so this equals
    the official padding to 512 for a causal classifier pooled at the last real token)."""
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        width = max(len(ids) for ids, _ in chunk)
        if width > max_length:
            raise BadInputError(f"an example has {width} tokens, more than max_length={max_length}",
                                "truncate when tokenising (the IMDB loader does)")
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, (tokens, _) in enumerate(chunk):
            ids[row, :len(tokens)] = torch.tensor(tokens)
            mask[row, :len(tokens)] = 1
        labels = torch.tensor([label for _, label in chunk])
        yield ids.to(device), mask.to(device), labels.to(device)


def _input_device(model) -> torch.device:
    return model.get_input_embeddings().weight.device


def train_one_epoch(model, examples, trainable, optimizer, scheduler, batch_size: int, grad_clip: float,
                    pad_id: int, max_length: int, desc: str) -> dict:
    model.train()
    losses, correct = [], 0
    steps = math.ceil(len(examples) / batch_size)
    bar = tqdm(batches(examples, batch_size, pad_id, max_length, _input_device(model)), total=steps, desc=desc,
               leave=False)
    for ids, mask, labels in bar:
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(trainable.values()), max_norm=grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        correct += int((logits.argmax(-1) == labels).sum())
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    return {"train_loss": float(sum(losses) / len(losses)), "train_accuracy": correct / len(examples)}


def evaluate(model, examples, batch_size: int, pad_id: int, max_length: int, desc: str) -> dict:
    """Accuracy = correct / evaluated rows, and the mean cross-entropy over batches."""
    model.eval()
    losses, correct = [], 0
    steps = math.ceil(len(examples) / batch_size)
    with torch.no_grad():
        for ids, mask, labels in tqdm(batches(examples, batch_size, pad_id, max_length, _input_device(model)),
                                      total=steps, desc=desc, leave=False):
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
            losses.append(F.cross_entropy(logits, labels).item())
            correct += int((logits.argmax(-1) == labels).sum())
    return {"selection_loss": float(sum(losses) / len(losses)), "selection_accuracy": correct / len(examples)}


# ------------------------------------------------------------------------------------------ checkpointing


def _replace_dir(tmp: Path, final: Path) -> None:
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The complete checkpoint of the highest epoch (``*.tmp`` folders of an interrupted write are ignored)."""
    found = []
    for path in output_dir.glob(f"{CHECKPOINT_PREFIX}*"):
        suffix = path.name[len(CHECKPOINT_PREFIX):]
        if suffix.isdigit() and (path / STATE_FILE).is_file():
            found.append((int(suffix), path))
    return max(found)[1] if found else None


def save_checkpoint(output_dir: Path, epoch: int, trainable, optimizer, scheduler, history: list,
                    best: dict) -> Path:
    final = output_dir / f"{CHECKPOINT_PREFIX}{epoch}"
    tmp = output_dir / f"{CHECKPOINT_PREFIX}{epoch}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"epoch": epoch, "trainable": {k: v.detach().cpu() for k, v in trainable.items()},
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "history": history,
                "best": best, "torch_rng": torch.get_rng_state()}, tmp / STATE_FILE)
    _replace_dir(tmp, final)
    for path in output_dir.glob(f"{CHECKPOINT_PREFIX}*"):
        if path != final:
            shutil.rmtree(path, ignore_errors=True)
    return final


def load_checkpoint(path: Path, trainable, optimizer, scheduler) -> dict:
    try:
        state = torch.load(path / STATE_FILE, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as err:
        raise MissingDataError(f"cannot read checkpoint {path}: {str(err).splitlines()[0]}",
                               "delete that folder to resume from the one before, or start a new --output-dir"
                               ) from None
    missing = set(trainable) ^ set(state["trainable"])
    if missing:
        raise BadInputError(f"checkpoint {path} does not match the model (parameters {sorted(missing)[:3]})",
                            "resume with the same --model / --quantized as the original run")
    with torch.no_grad():
        for name, param in trainable.items():
            param.copy_(state["trainable"][name])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    return state


def export_best(model, tokenizer, output_dir: Path) -> None:
    tmp = output_dir / "best.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    _replace_dir(tmp, output_dir / "best")


# ---------------------------------------------------------------------------------------------------- run


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="base checkpoint (hub id or local folder), e.g. meta-llama/Llama-2-7b-hf")
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--imdb-source", default="kaggle_csv", choices=["kaggle_csv", "hf"],
                   help="IMDB source (official: the Kaggle CSV)")
    p.add_argument("--imdb-path", help="the Kaggle CSV / a local copy of the HF dataset")
    p.add_argument("--quantized", action="store_true", help="4-bit NF4 (double quant), train only the head")
    p.add_argument("--official-selection", action="store_true",
                   help="select the checkpoint on the first test rows, as the official script (default: held-out "
                        "validation rows)")
    p.add_argument("--val-rows", type=int, help="selection rows (default 1000 validation / 5000 official)")
    p.add_argument("--epochs", type=int, help=f"epochs to run (default {OFFICIAL.epochs}; smoke {SMOKE_EPOCHS})")
    p.add_argument("--stop-after", type=int,
                   help="stop after this many epochs in this invocation (time-limited jobs; continue with --resume)")
    p.add_argument("--schedule-epochs", type=int, default=OFFICIAL.schedule_epochs,
                   help="epochs of the linear decay horizon (official: 200)")
    p.add_argument("--warmup-epochs", type=int, default=OFFICIAL.warmup_epochs)
    p.add_argument("--lr", type=float, default=OFFICIAL.lr)
    p.add_argument("--batch-size", type=int, default=OFFICIAL.batch_size)
    p.add_argument("--grad-clip", type=float, default=OFFICIAL.grad_clip)
    p.add_argument("--max-length", type=int, default=OFFICIAL.max_length)
    p.add_argument("--train-rows", type=int, help=f"training rows (default {OFFICIAL.train_rows}; smoke "
                                                  f"{SMOKE_TRAIN_ROWS})")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"],
                   help="weights dtype (default float32 as the official full finetuning; bfloat16 with --quantized)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="trade compute for memory (the official script enabled it; results are unchanged)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    p.add_argument("--smoke", action="store_true", help="tiny random LLaMA classifier on synthetic data (CPU, seconds)")
    args = p.parse_args(argv)
    if not args.smoke and not args.model:
        p.error("--model is required (or use --smoke)")
    if args.smoke and args.model:
        p.error("--smoke builds its own tiny model; drop --model")
    args.epochs = args.epochs if args.epochs is not None else (SMOKE_EPOCHS if args.smoke else OFFICIAL.epochs)
    args.train_rows = args.train_rows if args.train_rows is not None else (
        SMOKE_TRAIN_ROWS if args.smoke else OFFICIAL.train_rows)
    if args.smoke and args.val_rows is None:
        args.val_rows = SMOKE_VAL_ROWS
    args.dtype = args.dtype or ("bfloat16" if args.quantized else "float32")
    for name in ("epochs", "schedule_epochs", "batch_size", "max_length", "train_rows"):
        if getattr(args, name) < 1:
            raise BadInputError(f"--{name.replace('_', '-')} must be at least 1", "pass a positive value")
    if args.warmup_epochs < 0 or args.warmup_epochs > args.schedule_epochs:
        raise BadInputError(f"--warmup-epochs {args.warmup_epochs} is outside 0..--schedule-epochs",
                            "keep warm-up within the schedule")
    if args.epochs > args.schedule_epochs:
        raise BadInputError(f"--epochs {args.epochs} exceeds --schedule-epochs {args.schedule_epochs} (lr would be 0)",
                            "raise --schedule-epochs or lower --epochs")
    if args.stop_after is not None and args.stop_after < 1:
        raise BadInputError("--stop-after must be at least 1", "pass a positive number of epochs")
    return args


def _run_config(args) -> dict:
    config = {key: getattr(args, key) for key in RESUME_KEYS}
    config["model"] = args.model or "smoke"
    config["recipe"] = asdict(OFFICIAL)
    return config


def _check_resume_config(output_dir: Path, current: dict) -> None:
    path = output_dir / "run_config.json"
    if not path.is_file():
        return
    saved = json.loads(path.read_text())
    for key in RESUME_KEYS:
        if saved.get(key) != current.get(key):
            raise BadInputError(f"--resume with {key}={current.get(key)!r} but the run used {saved.get(key)!r}",
                                f"resume with the original settings (see {path})")


def run(args: argparse.Namespace) -> dict:
    """Train (or continue training) and return ``{"history": [...], "best": {...}, "output_dir": ...}``."""
    output_dir: Path = args.output_dir
    output_dir.mkdir(parents=True, exist_ok=True)
    existing = latest_checkpoint(output_dir)
    if existing is not None and not args.resume:
        raise BadInputError(f"{output_dir} already holds {existing.name}",
                            "pass --resume to continue it, or choose a new --output-dir")
    config = _run_config(args)
    if args.resume:
        _check_resume_config(output_dir, config)
    write_json_atomic(output_dir / "run_config.json", config)

    if args.smoke:
        model_path = str(build_smoke_model(output_dir / "smoke_base_model", args.seed))
        tokenizer = None
        train = smoke_examples(args.train_rows, args.seed)
        selection = smoke_examples(args.val_rows, args.seed + 1)
        selection_kind = "smoke: synthetic held-out rows"
        pad_id = 2
    else:
        model_path = args.model
        tokenizer = load_tokenizer(args.model)
        train, selection, selection_kind = imdb_examples(
            tokenizer, source=args.imdb_source, path=args.imdb_path, train_rows=args.train_rows,
            val_rows=args.val_rows, official_selection=args.official_selection, max_length=args.max_length)
        pad_id = tokenizer.pad_token_id

    model = load_classifier(model_path, quantized=args.quantized, dtype=args.dtype, seed=args.seed,
                            device=args.device)
    model.config.pad_token_id = pad_id
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    trainable = select_trainable(model, args.quantized)

    from transformers import get_linear_schedule_with_warmup
    steps_per_epoch = math.ceil(len(train) / args.batch_size)
    optimizer = torch.optim.AdamW(list(trainable.values()), lr=args.lr, betas=OFFICIAL.betas, eps=OFFICIAL.eps,
                                  weight_decay=OFFICIAL.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.warmup_epochs * steps_per_epoch,
                                                num_training_steps=args.schedule_epochs * steps_per_epoch)
    history: list[dict] = []
    best = {"epoch": None, "selection_accuracy": -1.0}
    start_epoch = 0
    if args.resume and existing is not None:
        state = load_checkpoint(existing, trainable, optimizer, scheduler)
        history, best, start_epoch = state["history"], state["best"], state["epoch"] + 1
        print(f"resuming after epoch {state['epoch']} from {existing}", file=sys.stderr)

    print(f"training {len(train)} rows, selecting on {len(selection)} ({selection_kind}); "
          f"{sum(p.numel() for p in trainable.values()):,} trainable parameters", file=sys.stderr)
    stop_at = args.epochs if args.stop_after is None else min(args.epochs, start_epoch + args.stop_after)
    for epoch in tqdm(range(start_epoch, stop_at), desc="epochs", initial=start_epoch, total=args.epochs):
        lr = scheduler.get_last_lr()[0]
        row = {"epoch": epoch, "lr_at_start": lr}
        row.update(train_one_epoch(model, train, trainable, optimizer, scheduler, args.batch_size, args.grad_clip,
                                   pad_id, args.max_length, f"epoch {epoch} train"))
        row.update(evaluate(model, selection, args.batch_size, pad_id, args.max_length, f"epoch {epoch} select"))
        history.append(row)
        if row["selection_accuracy"] > best["selection_accuracy"]:
            best = {"epoch": epoch, "selection_accuracy": row["selection_accuracy"], "selection": selection_kind}
            export_best(model, tokenizer, output_dir)
        save_checkpoint(output_dir, epoch, trainable, optimizer, scheduler, history, best)
        write_json_atomic(output_dir / "history.json", {"history": history, "best": best})
        print(f"epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f} | selection "
              f"loss {row['selection_loss']:.4f} acc {row['selection_accuracy']:.4f}", file=sys.stderr)
    return {"history": history, "best": best, "output_dir": str(output_dir)}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        run(args)
    except PalrpError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
