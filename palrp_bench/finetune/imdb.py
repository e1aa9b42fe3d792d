"""Finetune a LLaMA IMDB classifier with the official PA-LRP recipe (docs/protocol.md section 2, Tables 1-2): the
command ``palrp-bench-finetune`` (also ``python -m palrp_bench.finetune``).

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
* Several GPUs: ``accelerate launch --num_processes N`` (or ``torchrun --nproc_per_node N``) runs one process per
  GPU; accelerate's process state sets up the process group and each process's device, and the model is sharded
  with FSDP (``fully_shard`` per transformer block: weights, gradients and AdamW states split over the
  processes). Every batch of 32 is split between the processes and the loss is scaled so that the averaged
  gradient is the batch's mean gradient: the run equals the single-process one up to float rounding.
  Checkpoints and ``best/`` are gathered in full on the first process, so either kind of run resumes the other.
  The 4-bit row trains only the head and runs in one process.
* Memory: before loading anything, the run's peak memory per device is estimated
  (:mod:`palrp_bench.planning.training`, docs/planning.md "Finetuning the classifiers"); a run that cannot fit
  stops with one line naming the cheapest setting that fits (``--gradient-checkpointing``, N GPUs with FSDP, or
  ``--quantized``); ``--ignore-memory-check`` tries anyway.
* Model selection: the checkpoint with the best accuracy on the selection rows is exported to ``best/``.
  Default: a clean validation split (the 1000 training-part rows after the 5000 training rows, never evaluated
  in the tables). ``--official-selection``: the first 5000 test rows, as the official script did (these are the
  rows Tables 1-2 evaluate on). The official script divided the correct count by the size of the whole test part
  (15000) although it evaluated 5000 rows; we report correct / evaluated (the arg-max selection is the same).

Output folder::

    run_config.json     the recipe and data choices (checked on --resume)
    history.json        per epoch: train loss/accuracy, mean gradient norm before clipping, selection
                        loss/accuracy, learning rate, seconds, and on a GPU the peak memory reserved
    checkpoint_<e>/     training state after epoch e (trainable parameters, optimizer, scheduler); only the
                        latest is kept; written atomically, so a killed run never leaves a torn checkpoint
    best/               save_pretrained folder of the best epoch (loads with from_pretrained / load_hf_model)

Usage::

    palrp-bench-finetune --model TinyLlama/TinyLlama-1.1B-Chat-v1.0 \\
        --output-dir checkpoints/train_tinyllama_imdb --imdb-path "IMDB Dataset.csv"      # one 80 GB GPU, ~1.5 h
    ln -s train_tinyllama_imdb/best checkpoints/tinyllama_imdb   # where configs/model/tinyllama.yaml looks
    palrp-bench-finetune ... --resume          # continue after an interruption
    accelerate launch --num_processes 2 -m palrp_bench.finetune --model meta-llama/Llama-2-7b-hf \\
        --gradient-checkpointing --output-dir checkpoints/train_llama2_7b_imdb --imdb-path "IMDB Dataset.csv"
    palrp-bench-finetune --model meta-llama/Llama-2-7b-hf --quantized \\
        --output-dir checkpoints/train_llama2_7b_imdb_4bit --imdb-path "IMDB Dataset.csv"   # the 4-bit row
    palrp-bench-finetune --smoke --output-dir /tmp/imdb_smoke   # tiny random model, seconds on CPU
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm

from ..atomic_io import write_json_atomic
from ..errors import BadInputError, MissingDataError, PalrpError
from ..planning.training import COMMAND
from ..planning.training import OFFICIAL_RECIPE as OFFICIAL

#: One training example: token ids (BOS first, unpadded, at most ``max_length``) and the label (0 pos, 1 neg).
Example = tuple[list[int], int]

CHECKPOINT_PREFIX = "checkpoint_"
STATE_FILE = "training_state.pt"


#: Smoke mode: a tiny random classifier on synthetic data; only the run length and data sizes shrink.
SMOKE_EPOCHS = 3
SMOKE_TRAIN_ROWS = 64
SMOKE_VAL_ROWS = 32
SMOKE_VOCAB = 64
#: Fields of run_config.json that must match on --resume (``epochs`` may grow; the rest define the run).
RESUME_KEYS = ("model", "smoke", "quantized", "dtype", "lr", "batch_size", "warmup_epochs", "schedule_epochs",
               "grad_clip", "max_length", "train_rows", "val_rows", "official_selection", "imdb_source",
               "imdb_path", "seed")


# ---------------------------------------------------------------------------------------------- processes


class Processes:
    """The processes that train together: one (``palrp-bench-finetune``), or one per GPU under
    ``accelerate launch --num_processes N`` / ``torchrun --nproc_per_node N`` (``WORLD_SIZE`` > 1), whose process
    group and devices accelerate's ``PartialState`` sets up (NCCL and ``cuda:<local rank>`` on GPUs, gloo with
    ``--device cpu``). Each global batch is split between them (:meth:`share`)."""

    def __init__(self, rank: int = 0, size: int = 1, device: str | torch.device = "cpu"):
        self.rank, self.size, self.device = rank, size, torch.device(device)

    @classmethod
    def launched(cls, device: str) -> "Processes":
        """The processes of this launch: one, or ``WORLD_SIZE`` set by the launcher (then ``device`` only chooses
        between the GPUs and the CPU)."""
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size == 1:
            return cls(0, 1, device)
        try:
            from accelerate import PartialState
        except ImportError:
            raise MissingDataError(f"a run over {size} processes needs accelerate, which is not installed",
                                   "pip install accelerate (palrp-bench[quant] installs it)") from None
        state = PartialState(cpu=torch.device(device).type == "cpu")
        return cls(state.process_index, state.num_processes, state.device)

    @property
    def sharded(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, chunk: Sequence[Example]) -> tuple[list[Example], torch.Tensor]:
        """This process's contiguous part of a global batch and the weight of each of its rows: 1, or 0 for the
        stand-in row a process without rows forwards (every process takes part in each sharded forward)."""
        n = len(chunk)
        rows = list(chunk[self.rank * n // self.size:(self.rank + 1) * n // self.size])
        if not rows:
            return [chunk[0]], torch.zeros(1)
        return rows, torch.ones(len(rows))

    def sum(self, values: Sequence[float]) -> list[float]:
        """``values`` summed over the processes."""
        if not self.sharded:
            return [float(v) for v in values]
        total = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(total)
        return total.tolist()

    def barrier(self) -> None:
        if self.sharded:
            torch.distributed.barrier()

    def close(self) -> None:
        """End the process group once every process is done (a barrier first: gloo may abort when one process
        tears down while another still talks to it)."""
        if self.sharded and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()


SINGLE = Processes()


# --------------------------------------------------------------------------------------------------- data


def imdb_examples(tokenizer, *, source: str, path: str | None, train_rows: int, val_rows: int | None,
                  official_selection: bool, max_length: int) -> tuple[list[Example], list[Example], str]:
    """Training and selection rows from :func:`palrp_bench.data.imdb.imdb_splits` (imported lazily)."""
    try:
        from ..data.imdb import imdb_splits
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
    from ..hub import hub_offline, hub_reachable

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
    from ..models.loading import load_hf_model
    torch.manual_seed(seed)
    model = load_hf_model(name_or_path, kind="classifier", dtype=dtype, quantization="nf4" if quantized else None,
                       num_labels=2, local_files_only=_local_files_only(name_or_path))
    if not quantized:
        model.to(device)
    return model


def shard(model, processes: Processes):
    """FSDP (``fully_shard``): each transformer block (the model's ``_no_split_modules``) is one unit, then the
    rest; the weights move to this process's device as they are sharded, so a model larger than one device loads
    on the CPU first."""
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard

    mesh = init_device_mesh(processes.device.type, (processes.size,))
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def trainable_parameters(model) -> dict[str, torch.nn.Parameter]:
    """The parameters that require a gradient, by name (after sharding: the sharded ones)."""
    return {name: param for name, param in model.named_parameters() if param.requires_grad}


def enable_gradient_checkpointing(model) -> None:
    """Recompute each block's activations in the backward (transformers' non-reentrant checkpointing)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()


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


def _chunks(examples: Sequence[Example], batch_size: int) -> Iterator[Sequence[Example]]:
    """The global batches, in order (the official DataLoader does not shuffle)."""
    for start in range(0, len(examples), batch_size):
        yield examples[start:start + batch_size]


def collate(chunk: Sequence[Example], pad_id: int, max_length: int,
            device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded with ``pad_id`` to the longest row of ``chunk`` (pads are masked, so this equals the official
    padding to 512 for a causal classifier pooled at the last real token)."""
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
    return ids.to(device), mask.to(device), labels.to(device)


def _input_device(model, processes: Processes) -> torch.device:
    return processes.device if processes.sharded else model.get_input_embeddings().weight.device


def _batch_stats(model, chunk, processes: Processes, pad_id: int, max_length: int):
    """Forward this process's part of ``chunk``: per-row cross-entropy (weighted: 0 for a stand-in row) and the
    number of correct predictions."""
    rows, weight = processes.share(chunk)
    device = _input_device(model, processes)
    ids, mask, labels = collate(rows, pad_id, max_length, device)
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
    weight = weight.to(logits.device)
    losses = F.cross_entropy(logits, labels, reduction="none") * weight
    correct = ((logits.argmax(-1) == labels).float() * weight).sum()
    return losses, correct


def batch_loss(model, chunk, processes: Processes, pad_id: int, max_length: int):
    """This process's loss of a global batch, its rows' cross-entropies and correct count (:func:`_batch_stats`).
    The loss is the sum over its rows times ``processes / rows in the batch``: FSDP averages the gradients over
    the processes, so the step takes the batch's mean gradient, as one process would (one process: the mean)."""
    row_losses, correct = _batch_stats(model, chunk, processes, pad_id, max_length)
    return row_losses.sum() * (processes.size / len(chunk)), row_losses, correct


def train_one_epoch(model, examples, trainable, optimizer, scheduler, batch_size: int, grad_clip: float,
                    pad_id: int, max_length: int, desc: str, processes: Processes = SINGLE) -> dict:
    """One pass over ``examples`` in batches of ``batch_size`` rows (:func:`batch_loss`)."""
    model.train()
    losses, norms, correct = [], [], 0
    steps = math.ceil(len(examples) / batch_size)
    bar = tqdm(_chunks(examples, batch_size), total=steps, desc=desc, leave=False, disable=not processes.main)
    for chunk in bar:
        loss, row_losses, row_correct = batch_loss(model, chunk, processes, pad_id, max_length)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(trainable.values()), max_norm=grad_clip)
        norms.append(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))  # sharded: a DTensor
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        total, n_correct = processes.sum([row_losses.sum().item(), row_correct.item()])
        losses.append(total / len(chunk))
        correct += round(n_correct)
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    return {"train_loss": float(sum(losses) / len(losses)), "train_accuracy": correct / len(examples),
            "grad_norm": float(sum(norms) / len(norms))}


def evaluate(model, examples, batch_size: int, pad_id: int, max_length: int, desc: str,
             processes: Processes = SINGLE) -> dict:
    """Accuracy = correct / evaluated rows, and the mean cross-entropy over batches."""
    model.eval()
    losses, correct = [], 0
    steps = math.ceil(len(examples) / batch_size)
    with torch.no_grad():
        for chunk in tqdm(_chunks(examples, batch_size), total=steps, desc=desc, leave=False,
                          disable=not processes.main):
            row_losses, row_correct = _batch_stats(model, chunk, processes, pad_id, max_length)
            total, n_correct = processes.sum([row_losses.sum().item(), row_correct.item()])
            losses.append(total / len(chunk))
            correct += round(n_correct)
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


def _full_state(model, optimizer, processes: Processes) -> tuple[dict, dict]:
    """The model's and the optimizer's state keyed by parameter name, whole (gathered from the shards onto the first
    process's CPU when sharded; the other processes get empty dicts): one format for every number of processes."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer,
                          options=StateDictOptions(full_state_dict=True, cpu_offload=processes.sharded))


def save_checkpoint(output_dir: Path, epoch: int, model, trainable, optimizer, scheduler, history: list,
                    best: dict, processes: Processes = SINGLE) -> Path:
    """``checkpoint_<epoch>/`` with the trainable parameters and the optimizer state by name (written by the first
    process; every process takes part in gathering them)."""
    model_state, optimizer_state = _full_state(model, optimizer, processes)
    final = output_dir / f"{CHECKPOINT_PREFIX}{epoch}"
    if processes.main:
        tmp = output_dir / f"{CHECKPOINT_PREFIX}{epoch}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save({"epoch": epoch, "trainable": {k: model_state[k].detach().cpu() for k in trainable},
                    "optimizer": optimizer_state, "scheduler": scheduler.state_dict(), "history": history,
                    "best": best, "torch_rng": torch.get_rng_state(), "processes": processes.size},
                   tmp / STATE_FILE)
        _replace_dir(tmp, final)
        for path in output_dir.glob(f"{CHECKPOINT_PREFIX}*"):
            if path != final:
                shutil.rmtree(path, ignore_errors=True)
    processes.barrier()
    return final


def load_checkpoint(path: Path, model, trainable, optimizer, scheduler, processes: Processes = SINGLE) -> dict:
    """Restore a checkpoint of any number of processes (every process reads the file; FSDP keeps its shard)."""
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
    by_name = all(isinstance(p, str) for group in state["optimizer"]["param_groups"] for p in group["params"])
    if by_name:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(model, optimizer, model_state_dict=state["trainable"], optim_state_dict=state["optimizer"],
                       options=StateDictOptions(full_state_dict=True, strict=False))
    elif processes.sharded:
        raise BadInputError(f"checkpoint {path} was written by an earlier version of this script (optimizer state by "
                            "position)", "resume it in one process (palrp-bench-finetune ... --resume)")
    else:
        with torch.no_grad():
            for name, param in trainable.items():
                param.copy_(state["trainable"][name])
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    return state


def export_best(model, tokenizer, output_dir: Path, processes: Processes = SINGLE) -> None:
    """``best/``: ``save_pretrained`` of the whole model (sharded: gathered onto the first process, which writes)."""
    state = None
    if processes.sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if processes.main:
        tmp = output_dir / "best.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp, state_dict=state)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        _replace_dir(tmp, output_dir / "best")
    processes.barrier()


# ---------------------------------------------------------------------------------------------------- run


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0],
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
    p.add_argument("--ignore-memory-check", action="store_true",
                   help="start even when the estimated peak memory exceeds the device's (docs/planning.md)")
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


def _device_memory(processes: Processes) -> float | None:
    """Bytes of this process's device: the GPU's, or on the CPU the machine's memory shared by its processes."""
    if processes.device.type == "cuda":
        return float(torch.cuda.get_device_properties(processes.device).total_memory)
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) / processes.size
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(args, model_path: str, processes: Processes, loaded=None):
    """Estimate this run (:mod:`palrp_bench.planning.training`) and refuse it, in one line naming what fits, when
    its peak memory exceeds the device's (``--ignore-memory-check`` starts anyway). Returns the estimate, or None
    while the architecture is unknown (a hub id not in the cache: checked again once the model is loaded)."""
    from ..data.imdb import OFFICIAL_LIMIT
    from ..planning.budget import format_bytes as gb, format_seconds
    from ..numerics import device_kind
    from ..planning.training import Setting, cheapest_fit, classifier_architecture, estimate_training

    arch = classifier_architecture(model_path)
    if arch is None:
        return None
    val_rows = args.val_rows or (OFFICIAL_LIMIT if args.official_selection else OFFICIAL.val_rows)
    recipe = replace(OFFICIAL, batch_size=args.batch_size, max_length=args.max_length, train_rows=args.train_rows,
                     epochs=args.epochs, val_rows=val_rows)
    kind = device_kind(str(processes.device), cpu_detail=True)
    common = dict(kind=kind, head_only=args.quantized, dtype=args.dtype, device_memory=_device_memory(processes),
                  recipe=recipe)
    found = estimate_training(arch, setting=Setting(args.gradient_checkpointing, processes.size), **common)
    if processes.main:
        hours = "" if found.seconds is None else f"{format_seconds(found.seconds)}, "
        room = "" if found.device_memory is None else f" of {gb(found.device_memory)}"
        print(f"estimate: {hours}peak {gb(found.memory.total)}{room} per device on {kind} (docs/planning.md "
              "\"Finetuning the classifiers\")", file=sys.stderr)
    if found.fits is not False:
        return found
    gpu = processes.device.type == "cuda"
    what = "the head of a 4-bit model" if args.quantized else f"{args.dtype} AdamW"
    sharded = f" sharded over {processes.size}" if processes.sharded else ""
    room = "this GPU has" if gpu else "this machine has" + (" per process" if processes.sharded else "")
    problem = (f"{args.model or 'the smoke model'} {what} needs ~{gb(found.memory.total)} per "
               f"{'GPU' if gpu else 'process'} (weights, gradients and optimizer states{sharded} "
               f"{gb(found.memory.states)}, activations {gb(found.memory.activations)} at batch {args.batch_size} x "
               f"{args.max_length} tokens), {room} {gb(found.device_memory)}")
    best = cheapest_fit(arch, **common)
    options = []
    if best is not None:
        options.append(f"{best.setting.describe()} ({best.setting.command(f'--model {args.model} ...')})")
    if not args.quantized:
        options.append("--quantized (the 4-bit row's recipe: only the head trains)")
    fix = f"use {' or '.join(options)}" if options else "use a device with more memory"
    if args.ignore_memory_check:
        if processes.main:
            print(f"warning: {problem}; starting anyway (--ignore-memory-check)", file=sys.stderr)
        return found
    raise BadInputError(problem, f"{fix}; --ignore-memory-check tries anyway")


def run(args: argparse.Namespace, processes: Processes | None = None) -> dict:
    """Train (or continue training) and return ``{"history": [...], "best": {...}, "output_dir": ...}``."""
    processes = processes or Processes.launched(args.device)
    if processes.sharded:
        print(f"process {processes.rank} of {processes.size} on {processes.device}: FSDP over {processes.size} "
              "processes", file=sys.stderr)
        if args.quantized:
            raise BadInputError(f"--quantized trains only the head of a 4-bit model: nothing to shard over "
                                f"{processes.size} processes", "run it in one process (palrp-bench-finetune "
                                "... --quantized)")
    output_dir: Path = args.output_dir
    existing = latest_checkpoint(output_dir)
    if existing is not None and not args.resume:
        raise BadInputError(f"{output_dir} already holds {existing.name}",
                            "pass --resume to continue it, or choose a new --output-dir")
    config = _run_config(args)
    if args.resume:
        _check_resume_config(output_dir, config)
    # a run that cannot fit stops before writing anything (the smoke model is built first: it always fits)
    estimate = None if args.smoke else check_memory(args, args.model, processes)
    processes.barrier()  # every process has checked the folder before the first one writes to it
    if processes.main:
        output_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(output_dir / "run_config.json", dict(config, processes=processes.size))
        if args.smoke:
            build_smoke_model(output_dir / "smoke_base_model", args.seed)
    processes.barrier()
    model_path = str(output_dir / "smoke_base_model") if args.smoke else args.model
    if args.smoke:
        estimate = check_memory(args, model_path, processes)
    if args.smoke:
        tokenizer = None
        train = smoke_examples(args.train_rows, args.seed)
        selection = smoke_examples(args.val_rows, args.seed + 1)
        selection_kind = "smoke: synthetic held-out rows"
        pad_id = 2
    else:
        tokenizer = load_tokenizer(args.model)
        train, selection, selection_kind = imdb_examples(
            tokenizer, source=args.imdb_source, path=args.imdb_path, train_rows=args.train_rows,
            val_rows=args.val_rows, official_selection=args.official_selection, max_length=args.max_length)
        pad_id = tokenizer.pad_token_id

    # sharded: every process loads the model on the CPU and keeps its shard on its device
    model = load_classifier(model_path, quantized=args.quantized, dtype=args.dtype, seed=args.seed,
                            device="cpu" if processes.sharded else args.device)
    if estimate is None:  # a hub model whose config.json is in the cache now
        check_memory(args, model_path, processes)
    model.config.pad_token_id = pad_id
    select_trainable(model, args.quantized)
    if args.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if processes.sharded:
        shard(model, processes)
    trainable = trainable_parameters(model)

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
        state = load_checkpoint(existing, model, trainable, optimizer, scheduler, processes)
        history, best, start_epoch = state["history"], state["best"], state["epoch"] + 1
        if processes.main:
            print(f"resuming after epoch {state['epoch']} from {existing}", file=sys.stderr)

    if processes.main:
        n_trainable = sum(p.numel() for p in trainable.values())  # a sharded parameter counts in full
        print(f"training {len(train)} rows, selecting on {len(selection)} ({selection_kind}); "
              f"{n_trainable:,} trainable parameters", file=sys.stderr)
    stop_at = args.epochs if args.stop_after is None else min(args.epochs, start_epoch + args.stop_after)
    for epoch in tqdm(range(start_epoch, stop_at), desc="epochs", initial=start_epoch, total=args.epochs,
                      disable=not processes.main):
        lr = scheduler.get_last_lr()[0]
        row = {"epoch": epoch, "lr_at_start": lr}
        started = time.perf_counter()
        row.update(train_one_epoch(model, train, trainable, optimizer, scheduler, args.batch_size, args.grad_clip,
                                   pad_id, args.max_length, f"epoch {epoch} train", processes))
        row.update(evaluate(model, selection, args.batch_size, pad_id, args.max_length, f"epoch {epoch} select",
                            processes))
        row["seconds"] = time.perf_counter() - started
        if processes.device.type == "cuda":  # what the estimate's peak memory is fitted to
            row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved(processes.device)
        history.append(row)
        if row["selection_accuracy"] > best["selection_accuracy"]:
            best = {"epoch": epoch, "selection_accuracy": row["selection_accuracy"], "selection": selection_kind}
            export_best(model, tokenizer, output_dir, processes)
        save_checkpoint(output_dir, epoch, model, trainable, optimizer, scheduler, history, best, processes)
        if processes.main:
            write_json_atomic(output_dir / "history.json", {"history": history, "best": best})
            print(f"epoch {epoch}: train loss {row['train_loss']:.4f} acc {row['train_accuracy']:.4f} | selection "
                  f"loss {row['selection_loss']:.4f} acc {row['selection_accuracy']:.4f}", file=sys.stderr)
    processes.close()
    return {"history": history, "best": best, "output_dir": str(output_dir)}


def main(argv: Sequence[str] | None = None) -> int:
    processes = SINGLE
    try:
        args = parse_args(argv)
        processes = Processes.launched(args.device)
        run(args, processes)
    except PalrpError as err:
        prefix = f"[process {processes.rank} of {processes.size}] " if processes.sharded else ""
        print(f"{prefix}error: {err}", file=sys.stderr)
        if processes.sharded:  # the launcher stops the others; skip a teardown that may wait for them
            sys.stderr.flush()
            os._exit(2)
        return 2
    return 0
