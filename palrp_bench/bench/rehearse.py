"""Full-size rehearsal of the paper tables: real architectures with random weights, data in the real formats,
every table's pipeline through the ``palrp-bench`` command line, with load time, time and peak memory per sample
(each beside the estimate ``palrp-bench mode=plan`` gives for the same command) and the projected total of each
table.

    python scripts/rehearse.py --samples 3 --max-minutes 15                      # every target that fits here
    python scripts/rehearse.py --samples 3 --max-minutes 15 --only tinyllama_imdb_csv deit_tiny_imagenet
    python scripts/rehearse.py --samples 20 --max-minutes 30 --device cuda        # the GPU column

What it builds under ``--work`` (default ``rehearsal/``, never committed; reused by later calls):

* checkpoints with random weights at the real sizes: TinyLlama-1.1B (``TinyLlama/TinyLlama-1.1B-Chat-v1.0``
  architecture numbers) as a sequence classifier and as a causal LM, LLaMA-2-7B as a classifier in bf16 (written
  shard by shard, never whole in memory; the run quantizes it to NF4 at load, as the real 4-bit row does),
  LLaMA-3.1-8B as a causal LM in bf16 (only where memory allows), DeiT-T/S/B (timm, ``pretrained=False``) as
  official-style ``.pth`` files ``{"model": state_dict}``;
* a tokenizer in the real format (``tokenizer.json`` + config): a byte-level-free BPE with SentencePiece-style
  ``▁`` word marks and LLaMA's special ids (``<unk>``=0, ``<s>``=1, ``</s>``=2), trained with ``tokenizers`` on the
  rehearsal's own word list so that one word is one token: the texts below then have the token lengths of
  the real data under the LLaMA tokenizer;
* data in the real formats: IMDB as the Kaggle CSV (50,000 rows) and in the hub's parquet layout, ARC-Easy and
  Wikipedia in the hub's parquet layouts, an ImageNet val folder in the ImageFolder layout (1000 class folders,
  50,000 hard links to 16 distinct JPEGs of ImageNet size), and a MATLAB v7.3 ``gtsegs_ijcv.mat`` with 4276
  entries (referencing 16 distinct images). Text lengths follow the real data: IMDB reviews log-normal around 230
  tokens (about 12 % longer than 512), ARC prompts 60-110 tokens, Wikipedia articles mostly longer than 512.

Each target runs ``palrp-bench model=<m> task=<t> method=pa_lrp`` with ``task.selection=all`` (random weights
answer nothing correctly under "first N correct"), ``runner.max_samples=--samples`` and ``runner.quiet=true`` in
its own process, stopped with Ctrl-C semantics after ``--max-minutes``. Per target it reports the model load
time, the data load time, the time per sample (explanation + perturbation / segmentation) and, after the first
batch, how it splits into the stages a job records (``timings``: data wait, explain, forwards, metrics and write,
the rest; palrp_bench/stages.py), the process's peak resident memory (the whole CLI child: its ``VmHWM``, polled), its wall and CPU time with the 5-minute load average (on a
shared machine, wall time / CPU time shows how much of a core the run actually got), and on CUDA the peak device
memory, and projects each table:
for every cell of its experiment, load + (paper samples x time per sample), all methods assumed to cost what
``pa_lrp`` costs (``grad_x_input`` is cheaper), selection forwards not included (about one plain forward per
candidate, a few percent of a sample). ``--json PATH`` writes the same as data (:func:`as_data`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..stages import steady_split

REPO = Path(__file__).resolve().parents[2]
GIB = 1024 ** 3

#: samples each paper table evaluates per cell (docs/protocol.md section 2-4); IMDB: up to the 1000th correct of a
#: ~93 % accurate classifier
PAPER_SAMPLES = {"imdb": 1075, "mcqa": 1000, "wikipedia": 2500, "imagenet": 5000, "imagenet_seg": 4276}
#: cells of each table: (experiment, model config, task config, number of methods)
TABLE_CELLS = {
    "table1": [("llama2_7b", "imdb", 3), ("llama2_7b_4bit", "imdb", 3), ("tinyllama", "imdb", 3)],
    "table2": [("llama2_7b", "imdb", 2)],
    "table3": [("llama3_8b", task, 3) for task in ("mcqa", "wikipedia", "mcqa_noncausal", "wikipedia_noncausal")],
    "table4+appendix_f": [(f"deit_{s}", "imagenet", 2) for s in ("tiny", "small", "base")],
    "table5": [(f"deit_{s}", "imagenet_seg", 2) for s in ("tiny", "small", "base")],
}

TINYLLAMA = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                 num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5,
                 rope_theta=10000.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096, rms_norm_eps=1e-5,
                 rope_theta=10000.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
LLAMA31_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                  rope_theta=500000.0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


@dataclass
class Target:
    """One rehearsed pipeline: a model config and a task config of the tables with local overrides."""

    name: str
    model: str
    task: str
    checkpoint: str  # key of CHECKPOINTS
    data: str  # key of the data writers
    overrides: tuple[str, ...] = ()
    memory_gib: float = 0.0  # resident memory the run needs (skipped when the machine has less available)
    tables: tuple[str, ...] = ()
    note: str = ""


TARGETS = [
    Target("tinyllama_imdb_csv", "tinyllama", "imdb", "tinyllama_cls", "imdb_csv", memory_gib=6, tables=("table1",)),
    Target("tinyllama_imdb_parquet", "tinyllama", "imdb", "tinyllama_cls", "imdb_parquet",
           ("+task.options.source=hf",), memory_gib=6, note="IMDB from the hub's parquet layout"),
    Target("llama2_7b_4bit_imdb", "llama2_7b_4bit", "imdb", "llama2_7b_cls", "imdb_csv", memory_gib=12,
           tables=("table1",), note="bf16 shards quantized to NF4 at load"),
    Target("llama2_7b_imdb", "llama2_7b", "imdb", "llama2_7b_cls", "imdb_csv", memory_gib=30,
           tables=("table1", "table2")),
    Target("tinyllama_mcqa", "llama3_8b", "mcqa", "tinyllama_causal", "arc", memory_gib=6,
           note="the Table-3 pipeline on the TinyLlama architecture (the 8B is the target below)"),
    Target("tinyllama_wikipedia", "llama3_8b", "wikipedia", "tinyllama_causal", "wikipedia", memory_gib=6,
           note="the Table-3 pipeline on the TinyLlama architecture"),
    Target("llama3_8b_mcqa", "llama3_8b", "mcqa", "llama31_8b", "arc", memory_gib=36, tables=("table3",)),
    Target("llama3_8b_wikipedia", "llama3_8b", "wikipedia", "llama31_8b", "wikipedia", memory_gib=40,
           tables=("table3",)),
] + [Target(f"deit_{s}_{task}", f"deit_{s}", task, f"deit_{s}", data, memory_gib=4,
            tables=(("table4+appendix_f",) if task == "imagenet" else ("table5",)))
     for s in ("tiny", "small", "base") for task, data in (("imagenet", "imagenet"), ("imagenet_seg", "gtsegs"))]


# ----------------------------------------------------------------------------------------------- text data
def _rng(seed: int):
    import numpy as np

    return np.random.default_rng(seed)


def _words(n: int = 6000) -> list[str]:
    rng = _rng(1)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    words = {"".join(rng.choice(letters, size=int(k))) for k in rng.integers(2, 10, size=3 * n)}
    return sorted(words)[:n]


class _Text:
    """Texts of a given token length made of the rehearsal's words (one word = one token), Zipf-distributed."""

    def __init__(self, seed: int):
        import numpy as np

        self.words = np.array(_words())
        ranks = np.arange(1, len(self.words) + 1)
        self.p = (1.0 / ranks) / (1.0 / ranks).sum()
        self.rng = _rng(seed)

    def __call__(self, n_tokens: int) -> str:
        picked = self.rng.choice(self.words, size=max(1, int(n_tokens)), p=self.p)
        return " ".join(picked) + "."

    def lengths(self, n: int, median: float, sigma: float, low: int, high: int):
        import numpy as np

        return np.clip(self.rng.lognormal(np.log(median), sigma, size=n), low, high).astype(int)


def write_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=list("abcdefghijklmnopqrstuvwxyzABCDE.,:?()0123456789"))
    words = _words()
    corpus = [" ".join(words[i:i + 50]) for i in range(0, len(words), 50)] * 3
    corpus += ["A. B. C. D. Answer is: Please make sure to answer (A,B,C, or D) The following is multiple "
               "choice question (with answers)."] * 20
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(str(folder))


def write_imdb(folder: Path) -> None:
    """The Kaggle CSV (50,000 rows) and the hub's ``plain_text/{train,test}-00000-of-00001.parquet``, each hub
    split sorted by label as the hub's is."""
    from ..data.imdb import KAGGLE_CSV_NAME, write_hub_layout, write_kaggle_csv

    text = _Text(2)
    n = 50000
    lengths = text.lengths(n, median=230, sigma=0.6, low=8, high=2400)
    reviews = [text(k) for k in lengths]
    sentiments = ["positive" if i % 2 else "negative" for i in range(n)]
    write_kaggle_csv(folder / "kaggle" / KAGGLE_CSV_NAME, reviews, sentiments)
    half = n // 2
    splits = {}
    for split, part in (("train", slice(0, half)), ("test", slice(half, n))):
        rows = sorted(zip(reviews[part], [int(s == "positive") for s in sentiments[part]]), key=lambda r: r[1])
        splits[split] = ([r[0] for r in rows], [r[1] for r in rows])
    write_hub_layout(folder / "hub", splits)


def write_arc(folder: Path) -> None:
    """``ARC-Easy/{train,validation,test}-00000-of-00001.parquet`` (2251 / 570 / 2376 questions)."""
    from ..data.arc import write_hub_layout

    text = _Text(3)
    splits = {}
    for split, n in (("train", 2251), ("validation", 570), ("test", 2376)):
        rows = []
        for i in range(n):
            k = 4 if i % 50 else (3 if i % 100 else 5)
            labels = [chr(ord("A") + j) for j in range(k)]
            rows.append({"id": f"Rehearsal_{split}_{i:05d}", "question": text(int(text.rng.integers(10, 40))),
                         "choices": {"text": [text(int(text.rng.integers(1, 6))) for _ in labels], "label": labels},
                         "answerKey": labels[int(text.rng.integers(0, k))]})
        splits[split] = rows
    write_hub_layout(folder, splits)


def write_wikipedia(folder: Path) -> None:
    """``20231101.en/train-0000{0..1}-of-00002.parquet``, 3000 articles (the run reads the first 2500)."""
    from ..data.wikipedia import write_hub_layout

    text = _Text(4)
    lengths = text.lengths(3000, median=700, sigma=0.9, low=30, high=4000)
    rows = [{"id": str(10 + i), "url": f"https://en.wikipedia.org/wiki?curid={10 + i}", "title": f"Article {i}",
             "text": text(k)} for i, k in enumerate(lengths)]
    write_hub_layout(folder, rows, n_shards=2)


# --------------------------------------------------------------------------------------------- vision data
def _images(n: int = 16):
    """``n`` smooth random RGB images of ImageNet's typical sizes (uint8 ``[H, W, 3]``)."""
    import numpy as np
    from PIL import Image

    rng = _rng(5)
    sizes = [(375, 500), (500, 375), (333, 500), (500, 500)]
    out = []
    for i in range(n):
        h, w = sizes[i % len(sizes)]
        coarse = rng.integers(0, 256, size=(h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
        image = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC))
        noise = rng.integers(-12, 13, size=image.shape)
        out.append(np.clip(image.astype(int) + noise, 0, 255).astype(np.uint8))
    return out


def write_imagenet(folder: Path) -> None:
    """``val/<wnid>/ILSVRC2012_val_XXXXXXXX.JPEG``: 1000 classes x 50 images, hard links to 16 JPEGs."""
    from PIL import Image

    from ..data.imagenet import write_image_folder

    sources = folder / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, image in enumerate(_images()):
        path = sources / f"image{i:02d}.JPEG"
        Image.fromarray(image).save(path, quality=90)
        paths.append(path)
    write_image_folder(folder, paths, [f"n{1440764 + c * 97:08d}" for c in range(1000)], per_class=50)


def write_gtsegs_file(path: Path) -> None:
    """MATLAB v7.3 ``gtsegs_ijcv.mat`` with 4276 entries sharing 16 images (a box as each mask)."""
    import numpy as np

    from ..data.imagenet_seg import IMAGENET_SEG_COUNT, write_imagenet_seg

    entries = []
    for image in _images():
        h, w = image.shape[:2]
        mask = np.zeros((h, w), np.uint8)
        mask[h // 5:4 * h // 5, w // 4:3 * w // 4] = 1
        entries.append((image, mask))
    write_imagenet_seg(path, entries, count=IMAGENET_SEG_COUNT)


# ----------------------------------------------------------------------------------------------- checkpoints
def weights_device() -> str:
    """Where random weights are drawn: the first GPU when there is one (drawing the 7-8 billion numbers of a 7B / 8B
    checkpoint takes 60-100 s on a CPU and well under a second there), else the CPU."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _write_sharded_llama(folder: Path, numbers: dict, kind: str, shard_bytes: int = 2 * GIB,
                         device: str | None = None) -> None:
    """Random bf16 weights of a LLaMA model (normal, std 0.02; norms 1) written shard by shard (never the whole model
    in memory), drawn on ``device`` (default :func:`weights_device`) one tensor at a time and copied to the CPU."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    config = LlamaConfig(**numbers, dtype="bfloat16", num_labels=2, pad_token_id=numbers["eos_token_id"])
    cls = LlamaForSequenceClassification if kind == "classifier" else LlamaForCausalLM
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
    folder.mkdir(parents=True, exist_ok=True)
    device = device or weights_device()
    generator = torch.Generator(device=device).manual_seed(0)
    shard: dict = {}
    weight_map: dict = {}
    total = 0
    names: list[str] = []

    def flush():
        if not shard:
            return
        name = f"model-{len(names) + 1:05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in shard})
        names.append(name)
        shard.clear()

    size = 0
    for key, shape in shapes.items():
        if key.endswith("norm.weight"):
            tensor = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensor = torch.randn(shape, generator=generator, device=device).mul_(0.02).to(torch.bfloat16).cpu()
        shard[key] = tensor
        size += tensor.numel() * 2
        total += tensor.numel() * 2
        if size >= shard_bytes:
            flush()
            size = 0
    flush()
    if device != "cpu":
        torch.cuda.empty_cache()  # the drawn tensors' blocks: the GPU is for the runs
    n = len(names)
    renamed = {}
    for i, name in enumerate(names):
        final = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        (folder / name).rename(folder / final)
        renamed[name] = final
    index = {"metadata": {"total_size": total}, "weight_map": {k: renamed[v] for k, v in weight_map.items()}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    config.architectures = [cls.__name__]
    config.save_pretrained(str(folder))


def _write_deit(path: Path, size: str) -> None:
    import timm
    import torch

    model = timm.create_model(f"deit_{size}_patch16_224", pretrained=False)
    torch.save({"model": model.state_dict()}, path)


CHECKPOINTS = {
    "tinyllama_cls": lambda d: _write_sharded_llama(d, TINYLLAMA, "classifier"),
    "tinyllama_causal": lambda d: _write_sharded_llama(d, TINYLLAMA, "causal"),
    "llama2_7b_cls": lambda d: _write_sharded_llama(d, LLAMA2_7B, "classifier"),
    "llama31_8b": lambda d: _write_sharded_llama(d, LLAMA31_8B, "causal"),
    **{f"deit_{s}": (lambda d, s=s: (d.mkdir(parents=True, exist_ok=True), _write_deit(d / "checkpoint.pth", s)))
       for s in ("tiny", "small", "base")},
}
DATA = {"imdb_csv": ("imdb", write_imdb), "imdb_parquet": ("imdb", write_imdb), "arc": ("arc", write_arc),
        "wikipedia": ("wikipedia", write_wikipedia), "imagenet": ("imagenet", write_imagenet),
        "gtsegs": ("gtsegs", lambda d: (d.mkdir(parents=True, exist_ok=True),
                                        write_gtsegs_file(d / "gtsegs_ijcv.mat")))}


#: one build at a time in this process (gpu_check.py builds ahead in a thread while the suite runs)
_BUILDING = threading.Lock()


def _ensure(folder: Path, build, what: str) -> Path:
    """Build ``folder`` once (a ``.done`` marker guards against half-written folders; a second caller waits for a
    build in progress and then reuses it)."""
    marker = folder / ".done"
    with _BUILDING:
        if marker.exists():
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        t0 = time.monotonic()
        print(f"  building {what} ...", flush=True)
        build(folder)
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
        print(f"  built {what} in {time.monotonic() - t0:.0f} s", flush=True)
    return folder


def _data_path(target: Target, work: Path) -> str:
    folder = _ensure(work / "data" / DATA[target.data][0], DATA[target.data][1], f"data {target.data}")
    return str({"imdb_csv": folder / "kaggle" / "IMDB Dataset.csv", "imdb_parquet": folder / "hub",
                "arc": folder, "wikipedia": folder, "imagenet": folder,
                "gtsegs": folder / "gtsegs_ijcv.mat"}[target.data])


def _model_overrides(target: Target, work: Path, dtype_choice: str = "config") -> list[str]:
    folder = _ensure(work / "checkpoints" / target.checkpoint, CHECKPOINTS[target.checkpoint],
                     f"checkpoint {target.checkpoint}")
    if target.checkpoint.startswith("deit"):
        return [f"model.checkpoint={folder / 'checkpoint.pth'}"]
    tokenizer = _ensure(work / "tokenizer", write_tokenizer, "tokenizer")
    dtype = [] if dtype_choice == "config" else [f"model.dtype={dtype_choice}"]
    return [f"model.source={folder}", f"model.tokenizer={tokenizer}", *dtype]


# ----------------------------------------------------------------------------------------------- running
def pipeline_overrides(target: Target, work: Path, dtype_choice: str = "config") -> list[str]:
    """The CLI overrides that select ``target``'s pipeline on the rehearsal's checkpoint and data (both built
    under ``work`` on first use): model, task, ``method=pa_lrp``, their local paths and the target's own."""
    overrides = _model_overrides(target, work, dtype_choice) + [f"task.path={_data_path(target, work)}"]
    return [f"model={target.model}", f"task={target.task}", "method=pa_lrp", *overrides, *target.overrides]


def devices_override(device: str) -> str:
    """``runner.devices`` for ``--device``: the CPU, or the first GPU."""
    return "[cpu]" if device == "cpu" else "[cuda:0]"


def cuda_missing(program: str, dry_run: str) -> bool:
    """True, after one ``<program>: error:`` line on stderr naming the CPU dry run, where no CUDA device is
    visible: the GPU scripts' (bench_gpu.py, gpu_check.py) refusal on a machine without one."""
    import torch

    if torch.cuda.is_available():
        return False
    print(f"{program}: error: needs a CUDA device (torch.cuda.is_available() is False here) -- to dry-run it on "
          f"the CPU: {dry_run}", file=sys.stderr)
    return True


@dataclass
class Measured:
    target: str
    status: str
    samples: int = 0
    load_model_s: float | None = None
    load_data_s: float | None = None
    per_sample_s: float | None = None
    #: evaluation seconds per sample after the first batch (warm-up excluded), None when one batch ran
    steady_sample_s: float | None = None
    warmup_samples: int = 0  # samples of the excluded first batch
    planned_sample_s: float | None = None  # mode=plan's estimate for the same command (docs/planning.md)
    planned_load_s: float | None = None
    peak_rss_gib: float | None = None
    peak_device_gib: float | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    load_avg: float = 0.0
    note: str = ""
    log: str = ""  # the CLI child's output
    run_dir: str = ""
    #: the job's ``timings`` (runner/execute.py: load times, then the stages of its evaluation, palrp_bench/stages.py)
    timings: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def _available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024 ** 2
    return float("inf")


def memory_shortfall(target: Target, device: str) -> str | None:
    """Why ``target`` cannot run on the CPU of this machine (it needs more memory than is available), or None."""
    if device == "cpu" and target.memory_gib > _available_gib():
        return f"needs about {target.memory_gib:.0f} GiB of memory, {_available_gib():.1f} GiB available"
    return None


def _peak_rss_kib(pid: int) -> int:
    """``VmHWM`` (peak resident memory since exec) of a running process; wait4's ``ru_maxrss`` would also count
    the pages the child shared with this process when it was forked."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _planned(overrides: list[str], run_dir: Path) -> tuple[float | None, float | None]:
    """``(seconds per sample, model load seconds)`` that ``palrp-bench mode=plan`` estimates for the target's
    command (palrp_bench/bench/plan.py), or ``(None, None)`` if the cost model cannot price it."""
    from .plan import plan_of

    try:
        budget = plan_of([o for o in overrides if not o.startswith("run_dir=")], run_dir)
    except Exception as err:  # noqa: BLE001 - a benchmark column, not a reason to stop the rehearsal
        print(f"  (no plan estimate: {err})", flush=True)
        return None, None
    cell = budget.cells[0]
    per_sample = None if cell.estimate.seconds is None or not cell.remaining else cell.estimate.seconds / cell.remaining
    return per_sample, budget.load_seconds


def steady_rate(timings: dict) -> tuple[float | None, int]:
    """``(evaluation seconds per sample after the first batch, samples of that batch)`` from a job's ``timings``
    (``runner/execute.py``: ``total_s``, ``warmup_s``, ``warmup_samples``, ``samples``;
    :func:`palrp_bench.stages.steady_split`); ``(None, 0)`` when nothing ran after the first batch."""
    steady = steady_split(timings)
    if steady is None:
        return None, 0
    return steady[1]["total"], int(timings.get("warmup_samples") or 0)


def stage_split(timings: dict) -> str:
    """Seconds per sample of each stage after the first batch (:func:`palrp_bench.stages.steady_split`), compactly:
    ``data 1.0 ms / explain 40 ms / forwards 96 ms / metrics+write 2.0 ms / other 1.0 ms``; ``-`` when nothing ran
    after the first batch."""
    steady = steady_split(timings)
    if steady is None:
        return "-"
    split = steady[1]
    parts = (("data", split["data_wait"]), ("explain", split["explain"]), ("forwards", split["forwards"]),
             ("metrics+write", split["metrics"] + split["write"]), ("other", split["other"]))
    return " / ".join(f"{name} {_short(seconds)}" for name, seconds in parts)


def _short(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else (f"{seconds * 1e3:.0f} ms" if seconds >= 0.01
                                                     else f"{seconds * 1e3:.1f} ms")


def run_target(target: Target, args, work: Path, out: Path | None = None) -> Measured:
    """Build what ``target`` needs under ``work`` (reused), run its pipeline through the CLI with ``args.samples``,
    ``args.device``, ``args.batch_size``, ``args.dtype`` and the ``args.max_minutes`` cap (then Ctrl-C, and a kill
    after ``args.grace_s`` seconds, default 120), and return what it measured. The run directory goes to
    ``<out>/runs/``, the child's output to ``<out>/logs/`` (``out`` defaults to ``work``)."""
    out = work if out is None else out
    too_large = memory_shortfall(target, args.device)
    if too_large:
        return Measured(target.name, "skipped", note=too_large)
    run_dir = out / "runs" / f"{target.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    command = [sys.executable, "-m", "palrp_bench.cli", *pipeline_overrides(target, work, args.dtype),
               "task.selection=all", f"runner.max_samples={args.samples}",
               f"runner.devices={devices_override(args.device)}", "runner.quiet=true",
               f"runner.batch_size={args.batch_size}", "runner.cache_explanations=false",
               f"runner.loader_workers={getattr(args, 'loader_workers', 'auto')}", f"run_dir={run_dir}"]
    planned = _planned(command[3:], run_dir)
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    log_path = out / "logs" / f"{run_dir.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        child = subprocess.Popen(command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = t0 + 60 * args.max_minutes
        stopped = False
        peak_kib = 0
        while True:
            pid, code, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            peak_kib = max(peak_kib, _peak_rss_kib(child.pid))
            if not stopped and time.monotonic() > deadline:
                child.send_signal(signal.SIGINT)  # the job records what it finished, then stops
                stopped, deadline = True, time.monotonic() + getattr(args, "grace_s", 120.0)
            elif stopped and time.monotonic() > deadline:
                child.kill()
            time.sleep(0.5)
    wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(code)
    statuses = [json.loads(p.read_text()) for p in run_dir.glob("cells/*/*/*/shard-*.status.json")]
    m = Measured(target.name, "capped" if stopped else ("ok" if rc == 0 else f"failed (exit {rc})"),
                 peak_rss_gib=peak_kib / 1024 ** 2 if peak_kib else None, wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime,
                 load_avg=os.getloadavg()[1], note=target.note, planned_sample_s=planned[0],
                 planned_load_s=planned[1], log=str(log_path), run_dir=str(run_dir))
    if statuses:
        status = statuses[0]
        timings = m.timings = status.get("timings", {})
        m.samples = int(status.get("n_computed", 0))
        m.load_model_s, m.load_data_s = timings.get("load_model_s"), timings.get("load_data_s")
        if m.samples and timings.get("total_s") is not None:
            m.per_sample_s = timings["total_s"] / m.samples
            m.steady_sample_s, m.warmup_samples = steady_rate(timings)
        if status.get("peak_device_bytes"):
            m.peak_device_gib = status["peak_device_bytes"] / GIB
    if rc != 0 and not stopped:
        lines = log_path.read_text().strip().splitlines() or [""]
        errors = [line for line in lines if line.startswith("palrp-bench: error:")]  # the CLI's error, not a log line
        m.note = (errors or lines)[-1][:160]
    return m


def _fmt(x, spec=".1f", unit=""):
    return "-" if x is None else f"{x:{spec}}{unit}"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


@dataclass
class Projection:
    """One table's projected device time: every cell whose (model, task) a rehearsal target measured costs
    ``methods x (model load + data load + paper samples x time per sample)``; ``by_target`` splits the total by
    the target that priced the cells."""

    table: str
    cells: int
    measured: int
    seconds: float | None
    by_target: dict[str, float] = field(default_factory=dict)


def project(results: list[Measured], targets: dict[str, Target]) -> list[Projection]:
    """The projection of every table of :data:`TABLE_CELLS` from ``results`` (the targets that project a table
    and measured a time per sample)."""
    by_cell = {}
    for m in results:
        t = targets[m.target]
        if m.per_sample_s is not None and t.tables:
            by_cell[(t.model, t.task)] = m
    out = []
    for table, cells in TABLE_CELLS.items():
        by_target: dict[str, float] = {}
        for model, task, n_methods in cells:
            base_task = task.replace("_noncausal", "")
            m = by_cell.get((model, base_task))
            if m is None:
                continue
            seconds = n_methods * ((m.load_model_s or 0) + (m.load_data_s or 0)
                                   + PAPER_SAMPLES[base_task] * m.per_sample_s)
            by_target[m.target] = by_target.get(m.target, 0.0) + seconds
        measured = sum(1 for model, task, _ in cells if (model, task.replace("_noncausal", "")) in by_cell)
        out.append(Projection(table, len(cells), measured, sum(by_target.values()) if measured else None,
                              by_target))
    return out


def as_data(results: list[Measured], targets: dict[str, Target], args) -> dict:
    """What :func:`report` prints, as data (the ``--json`` file)."""
    from dataclasses import asdict

    return {"device": args.device, "samples": args.samples, "batch_size": str(args.batch_size),
            "dtype": args.dtype, "targets": [asdict(m) for m in results],
            "tables": [asdict(p) for p in project(results, targets)]}


def report(results: list[Measured], targets: dict[str, Target], args) -> str:
    lines = [f"| target | status | samples | model load (plan) | data load | time / sample (plan) | measured / plan | "
             f"after the first batch, per sample | peak RSS | peak {args.device} memory | "
             "wall / CPU time of the process | load avg | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in results:
        ratio = (f"{m.per_sample_s / m.planned_sample_s:.2f}"
                 if m.per_sample_s is not None and m.planned_sample_s else "-")
        lines.append(f"| {m.target} | {m.status} | {m.samples} | {_fmt(m.load_model_s, '.0f', ' s')} "
                     f"({_fmt(m.planned_load_s, '.0f', ' s')}) | {_fmt(m.load_data_s, '.0f', ' s')} | "
                     f"{_fmt(m.per_sample_s, '.1f', ' s')} ({_fmt(m.planned_sample_s, '.1f', ' s')}) | {ratio} | "
                     f"{stage_split(m.timings)} | {_fmt(m.peak_rss_gib, '.1f', ' GiB')} | {_fmt(m.peak_device_gib, '.1f', ' GiB')} | "
                     f"{m.wall_s:.0f} s / {m.cpu_s:.0f} s | {m.load_avg:.1f} | {m.note} |")
    lines += ["", "| table | cells measured | projected total (load + paper samples x time / sample, all cells) |",
              "|---|---|---|"]
    for p in project(results, targets):
        if p.seconds is None:
            lines.append(f"| {p.table} | 0 of {p.cells} | - |")
        else:
            lines.append(f"| {p.table} | {p.measured} of {p.cells} | {_hours(p.seconds)}"
                         f"{'' if p.measured == p.cells else ' (measured cells only)'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    names = [t.name for t in TARGETS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=3, help="samples per target (runner.max_samples)")
    parser.add_argument("--max-minutes", type=float, default=15.0, help="time cap of each target's run")
    parser.add_argument("--only", nargs="+", choices=names, metavar="TARGET",
                        help=f"targets to run (default: all): {', '.join(names)}")
    parser.add_argument("--skip", nargs="+", choices=names, default=[], metavar="TARGET")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--batch-size", default="1", help="runner.batch_size (an int or auto)")
    parser.add_argument("--loader-workers", default="auto",
                        help="runner.loader_workers (auto, 0 = load in the run's process, or a number)")
    parser.add_argument("--dtype", choices=("config", "float32", "bfloat16"), default="config",
                        help="model.dtype of the language models (config = the table's own, bfloat16)")
    parser.add_argument("--work", type=Path, default=REPO / "rehearsal",
                        help="where checkpoints, data and runs go (large; reused by later calls)")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    parser.add_argument("--json", type=Path, help="also write the measurements and projections to this JSON file")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    chosen = [t for t in TARGETS if (args.only is None or t.name in args.only) and t.name not in args.skip]
    print(f"rehearsal on {args.device}: {len(chosen)} target(s), {args.samples} sample(s) each, at most "
          f"{args.max_minutes:g} min each; work folder {work}", flush=True)
    results = []
    for target in chosen:
        print(f"[{target.name}] model={target.model} task={target.task}", flush=True)
        m = run_target(target, args, work)
        print(f"[{target.name}] {m.status}: {m.samples} samples, {_fmt(m.per_sample_s, '.1f', ' s')}/sample, "
              f"peak RSS {_fmt(m.peak_rss_gib, '.1f', ' GiB')} {m.note}", flush=True)
        results.append(m)
    text = report(results, {t.name: t for t in TARGETS}, args)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(as_data(results, {t.name: t for t in TARGETS}, args), indent=1) + "\n")
    return 0 if all(not m.status.startswith("failed") for m in results) else 1


if __name__ == "__main__":
    sys.exit(main())
