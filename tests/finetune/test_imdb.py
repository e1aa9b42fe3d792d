"""palrp-bench-finetune (palrp_bench/finetune/imdb.py): the official recipe on a tiny random classifier (smoke), resume,
data path, errors."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from palrp_bench.finetune import imdb


@pytest.fixture(scope="module")
def ft():
    return imdb


def _history(folder: Path) -> list[dict]:
    return json.loads((folder / "history.json").read_text())["history"]


def _trainable_state(folder: Path) -> dict:
    checkpoints = sorted(folder.glob("checkpoint_*"))
    assert len(checkpoints) == 1, checkpoints  # only the latest is kept
    return torch.load(checkpoints[0] / "training_state.pt", weights_only=True)


@pytest.fixture(scope="module")
def uninterrupted(ft, tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke_full")
    assert ft.main(["--smoke", "--output-dir", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def uninterrupted_on_cpu(ft, uninterrupted, tmp_path_factory):
    """The uninterrupted run on the CPU, where the FSDP test's two processes run (gloo): ``uninterrupted`` itself
    where the CPU is the script's default device (no CUDA), else a run with ``--device cpu``."""
    if not torch.cuda.is_available():
        return uninterrupted
    out = tmp_path_factory.mktemp("smoke_full_cpu")
    assert ft.main(["--smoke", "--device", "cpu", "--output-dir", str(out)]) == 0
    return out


def test_smoke_follows_the_recipe(ft, uninterrupted):
    history = _history(uninterrupted)
    assert [row["epoch"] for row in history] == [0, 1, 2]
    # linear warm-up over 5 epochs to lr 5e-4 (2 steps per epoch: 64 rows, batch 32)
    assert [row["lr_at_start"] for row in history] == pytest.approx([0.0, 1e-4, 2e-4])
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    config = json.loads((uninterrupted / "run_config.json").read_text())
    assert config["recipe"]["lr"] == 5e-4 and config["recipe"]["batch_size"] == 32
    assert config["recipe"]["warmup_epochs"] == 5 and config["recipe"]["grad_clip"] == 1.0

    base = load_file(uninterrupted / "smoke_base_model" / "model.safetensors")
    best = load_file(uninterrupted / "best" / "model.safetensors")
    assert torch.equal(base["model.embed_tokens.weight"], best["model.embed_tokens.weight"])  # frozen
    changed = [k for k in base if not torch.equal(base[k], best[k])]
    assert "score.weight" in changed and "model.layers.0.self_attn.q_proj.weight" in changed
    assert set(changed) == set(base) - {"model.embed_tokens.weight"}


def test_best_checkpoint_reproduces_the_selection_accuracy(ft, uninterrupted):
    from transformers import LlamaForSequenceClassification
    record = json.loads((uninterrupted / "history.json").read_text())["best"]
    model = LlamaForSequenceClassification.from_pretrained(uninterrupted / "best").eval()
    examples = ft.smoke_examples(ft.SMOKE_VAL_ROWS, 42 + 1)
    metrics = ft.evaluate(model, examples, 32, 2, 512, "check")
    assert metrics["selection_accuracy"] == pytest.approx(record["selection_accuracy"])
    best_row = max(_history(uninterrupted), key=lambda r: r["selection_accuracy"])
    assert record["epoch"] == best_row["epoch"]


def test_resume_after_interruption_matches_uninterrupted_run(ft, uninterrupted, tmp_path):
    out = tmp_path / "interrupted"
    assert ft.main(["--smoke", "--output-dir", str(out), "--stop-after", "1"]) == 0
    assert [row["epoch"] for row in _history(out)] == [0]
    # a write that was killed half-way leaves a .tmp folder: it must be ignored
    torn = out / "checkpoint_1.tmp"
    torn.mkdir()
    (torn / "training_state.pt").write_bytes(b"torn")
    assert ft.latest_checkpoint(out).name == "checkpoint_0"
    assert ft.main(["--smoke", "--output-dir", str(out), "--resume"]) == 0
    assert not torn.exists()

    full, resumed = _history(uninterrupted), _history(out)
    assert len(full) == len(resumed) == 3
    for a, b in zip(full, resumed):
        for key in ("lr_at_start", "train_loss", "selection_loss", "selection_accuracy"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), key
    state_full, state_resumed = _trainable_state(uninterrupted), _trainable_state(out)
    assert state_full["epoch"] == state_resumed["epoch"] == 2
    for name, tensor in state_full["trainable"].items():
        torch.testing.assert_close(tensor, state_resumed["trainable"][name], rtol=1e-5, atol=1e-6)


def test_refuses_to_overwrite_and_checks_resume_settings(ft, uninterrupted, tmp_path, capsys):
    assert ft.main(["--smoke", "--output-dir", str(uninterrupted)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert ft.main(["--smoke", "--output-dir", str(uninterrupted), "--resume", "--lr", "1e-3"]) == 2
    assert "lr" in capsys.readouterr().err
    assert ft.main(["--smoke", "--output-dir", str(tmp_path / "x"), "--epochs", "300"]) == 2
    assert "schedule" in capsys.readouterr().err


def test_quantized_smoke_trains_only_the_head(ft, tmp_path):
    pytest.importorskip("bitsandbytes")
    out = tmp_path / "quant"
    assert ft.main(["--smoke", "--quantized", "--output-dir", str(out), "--epochs", "1"]) == 0
    state = _trainable_state(out)
    assert list(state["trainable"]) == ["score.weight"]
    base = load_file(out / "smoke_base_model" / "model.safetensors")
    assert not torch.equal(state["trainable"]["score.weight"].float(), base["score.weight"].bfloat16().float())
    config = json.loads((out / "best" / "config.json").read_text())
    quant = config["quantization_config"]
    assert quant["bnb_4bit_quant_type"] == "nf4" and quant["bnb_4bit_use_double_quant"] is True


def _word_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    words = ["great", "awful", "movie", "plot", "actors", "the", "was", "a", "film", "boring", "fun"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    core = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _imdb_csv(path: Path, rows: int = 40) -> Path:
    import pandas as pd
    good = ["the movie was great fun", "a great film", "great actors great plot", "fun fun film"]
    bad = ["the movie was awful", "a boring film", "awful plot awful actors", "boring boring movie"]
    records = [{"review": (good if i % 2 == 0 else bad)[i % 4], "sentiment": "positive" if i % 2 == 0 else
                "negative"} for i in range(rows)]
    pd.DataFrame(records).to_csv(path, index=False)
    return path


def test_real_data_path_with_a_local_model_and_csv(ft, tmp_path):
    """The non-smoke path: local model folder + tokenizer, Kaggle-format CSV through palrp_bench.data.imdb."""
    from palrp_bench.data.imdb import load_imdb

    model_dir = ft.build_smoke_model(tmp_path / "base", seed=0)
    tokenizer = _word_tokenizer()
    tokenizer.save_pretrained(model_dir)
    csv = _imdb_csv(tmp_path / "IMDB Dataset.csv")

    train, held_out, _ = ft.imdb_examples(tokenizer, source="kaggle_csv", path=str(csv), train_rows=8, val_rows=4,
                                          official_selection=False, max_length=512)
    _, official, _ = ft.imdb_examples(tokenizer, source="kaggle_csv", path=str(csv), train_rows=8, val_rows=4,
                                      official_selection=True, max_length=512)
    test_rows = load_imdb("kaggle_csv", str(csv), "test", 4, tokenizer=tokenizer, pad_to_max=False)
    assert official == [(list(s.input_ids), s.label) for s in test_rows]
    first_train = load_imdb("kaggle_csv", str(csv), "train", 12, tokenizer=tokenizer, pad_to_max=False)
    assert train == [(list(s.input_ids), s.label) for s in first_train[:8]]
    assert held_out == [(list(s.input_ids), s.label) for s in first_train[8:12]]
    assert all(ids[0] == 1 for ids, _ in train)

    out = tmp_path / "run"
    argv = ["--model", str(model_dir), "--imdb-path", str(csv), "--output-dir", str(out), "--train-rows", "8",
            "--val-rows", "4", "--batch-size", "4", "--epochs", "1"]
    assert ft.main(argv) == 0
    assert (out / "best" / "tokenizer.json").is_file()
    assert len(_history(out)) == 1


def test_missing_model_and_data_fail_with_one_line(ft, tmp_path, capsys):
    assert ft.main(["--model", str(tmp_path / "nope"), "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot load the tokenizer") and "\n" not in err

    model_dir = ft.build_smoke_model(tmp_path / "base", seed=0)
    _word_tokenizer().save_pretrained(model_dir)
    assert ft.main(["--model", str(model_dir), "--imdb-path", str(tmp_path / "missing.csv"),
                    "--output-dir", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip()
    assert "IMDB CSV not found" in err and "kaggle" in err.lower()


# ------------------------------------------------------------------------------------ several processes (FSDP)
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_shard_with_fsdp_and_equal_one_process(ft, uninterrupted_on_cpu, tmp_path):
    """Epoch 0 in one process, then ``--resume`` under ``accelerate launch --num_processes 2`` on the CPU (gloo):
    the FSDP run loads the one-process checkpoint, trains epochs 1-2 sharded, gathers its checkpoint and ``best/``
    on the first process, and every number equals the uninterrupted one-process run up to float32 rounding. Every
    run is pinned to the CPU (``--device cpu``), the one-process ones too: on a GPU machine the script's default
    device would be CUDA.
    (accelerate applies its own FSDP plugin only on GPU backends; the script shards with torch's ``fully_shard``
    itself, so this runs the same FSDP code as a GPU run.)"""
    pytest.importorskip("accelerate")
    import os
    import subprocess

    out = tmp_path / "two"
    uninterrupted = uninterrupted_on_cpu
    assert ft.main(["--smoke", "--device", "cpu", "--output-dir", str(out), "--stop-after", "1"]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1", TQDM_DISABLE="1", HF_HUB_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf_home"))  # no accelerate config file of the user's
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", str(_free_port())]
    done = subprocess.run(launch + ["-m", "palrp_bench.finetune", "--smoke", "--device", "cpu", "--output-dir", str(out),
                                    "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f"process {rank} of 2 on cpu" in done.stderr and "FSDP over 2 processes" in done.stderr
    assert json.loads((out / "run_config.json").read_text())["processes"] == 2

    # float32 rounding (eps 1.2e-7): each half of a batch is padded to its own longest row (masked positions) and
    # the halves' losses and gradients are summed in another order, so results differ in their last bits (about
    # 2e-8 measured); AdamW's 6 steps carry that over. 1e-5 is ~100 eps: room for other CPUs' kernels, far below
    # what a wrong share, scale or gathered shard changes (the losses move by ~1e-2 per step)
    close = dict(rtol=1e-5, atol=1e-6)
    full, sharded = _history(uninterrupted), _history(out)
    assert [row["epoch"] for row in sharded] == [0, 1, 2]
    for a, b in zip(full, sharded):
        # the gradient norm before clipping: FSDP must average the processes' gradients, not sum them
        for key in ("lr_at_start", "train_loss", "grad_norm", "selection_loss", "train_accuracy",
                    "selection_accuracy"):
            assert a[key] == pytest.approx(b[key], rel=close["rtol"], abs=close["atol"]), key
    assert sharded[-1]["train_loss"] < sharded[0]["train_loss"]

    state, reference = _trainable_state(out), _trainable_state(uninterrupted)
    assert state["processes"] == 2 and set(state["trainable"]) == set(reference["trainable"])
    for name, tensor in reference["trainable"].items():
        torch.testing.assert_close(state["trainable"][name], tensor, **close)
    assert set(state["optimizer"]["state"]) == set(reference["optimizer"]["state"])
    for name, moments in reference["optimizer"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(state["optimizer"]["state"][name][key], moments[key], **close)

    best = json.loads((out / "history.json").read_text())["best"]
    assert best["epoch"] >= 1  # exported by the two processes
    assert best == json.loads((uninterrupted / "history.json").read_text())["best"]
    exported, expected = load_file(out / "best" / "model.safetensors"), load_file(uninterrupted / "best" /
                                                                                  "model.safetensors")
    assert set(exported) == set(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(exported[name], tensor, **close)


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_a_batch_shared_by_processes_has_the_batch_mean_gradient(ft, tmp_path, size):
    """Each process forwards its contiguous share (a process without rows a weight-0 stand-in) and scales its summed
    loss by ``processes / rows``; FSDP averages the gradients, which must give the mean gradient of the batch."""
    from transformers import LlamaForSequenceClassification

    model = LlamaForSequenceClassification.from_pretrained(ft.build_smoke_model(tmp_path / "m", seed=0)).float()
    chunk = ft.smoke_examples(5, seed=3)

    def gradient(processes):
        model.zero_grad(set_to_none=True)
        loss, _, _ = ft.batch_loss(model, chunk, processes, 2, 512)
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    expected = gradient(ft.Processes())
    shares = [ft.Processes(rank, size).share(chunk) for rank in range(size)]
    real = [row for rows, weight in shares for row, w in zip(rows, weight) if w > 0]
    assert real == list(chunk)  # every row once, in order
    averaged = sum(gradient(ft.Processes(rank, size)) for rank in range(size)) / size
    # the shares sum each gradient component in another order: float32 rounding of the largest component's size,
    # once per share and once for the mean, bounds the gap (gaps up to 1.8e-7 against bounds of 4e-7 to 1.2e-6,
    # natively and on AVX2 kernels)
    bound = 2 * (size + 1) * torch.finfo(torch.float32).eps * float(expected.abs().max())
    gap = float((averaged - expected).abs().max())
    assert gap <= bound, (gap, bound)


# ----------------------------------------------------------------------------------------------- memory check
def test_a_run_that_cannot_fit_stops_before_writing_anything(ft, tmp_path, capsys, monkeypatch):
    """LLaMA-2-7B float32 with AdamW on a 64 GB machine (its architecture from the shipped table, offline)."""
    monkeypatch.setattr(ft, "_device_memory", lambda processes: 64e9)
    out = tmp_path / "llama"
    assert ft.main(["--model", "meta-llama/Llama-2-7b-hf", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: meta-llama/Llama-2-7b-hf float32 AdamW needs ~") and "has 64.0 GB" in err
    assert "--quantized" in err
    assert "--ignore-memory-check" in err
    assert not out.exists()


@pytest.fixture
def h100(ft, monkeypatch):
    """This process on an H100 80GB, as far as the memory check sees."""
    import palrp_bench.numerics as numerics

    monkeypatch.setattr(numerics, "device_kind", lambda device, **_: "cuda/NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(ft, "_device_memory", lambda processes: 85.0e9)


def _args(ft, *extra):
    return ft.parse_args(["--model", "meta-llama/Llama-2-7b-hf", "--output-dir", "unused", *extra])


def test_the_refusal_names_the_cheapest_setting_that_fits(ft, h100):
    from palrp_bench.errors import BadInputError

    with pytest.raises(BadInputError) as refused:
        ft.check_memory(_args(ft), "meta-llama/Llama-2-7b-hf", ft.Processes(0, 1, "cuda"))
    message = str(refused.value)
    assert "\n" not in message and "this GPU has 85.0 GB" in message
    assert "use 2 GPUs with FSDP and --gradient-checkpointing (accelerate launch --num_processes 2" in message
    assert "--quantized" in message
    # that setting passes, as do the 4-bit row and TinyLlama on one GPU
    assert ft.check_memory(_args(ft, "--gradient-checkpointing"), "meta-llama/Llama-2-7b-hf",
                           ft.Processes(0, 2, "cuda")).fits
    assert ft.check_memory(_args(ft, "--quantized"), "meta-llama/Llama-2-7b-hf", ft.Processes(0, 1, "cuda")).fits
    assert ft.check_memory(_args(ft), "TinyLlama/TinyLlama-1.1B-Chat-v1.0", ft.Processes(0, 1, "cuda")).fits


def test_ignore_memory_check_starts_anyway_with_a_warning(ft, h100, capsys):
    found = ft.check_memory(_args(ft, "--ignore-memory-check"), "meta-llama/Llama-2-7b-hf",
                            ft.Processes(0, 1, "cuda"))
    assert found.fits is False
    assert "starting anyway (--ignore-memory-check)" in capsys.readouterr().err
