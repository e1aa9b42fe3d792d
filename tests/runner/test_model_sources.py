"""Where a model's pieces come from, as the user sees it: a local checkpoint folder holding tokenizer files is its
own tokenizer (offline, no hub retries), the log names the file actually loaded, and bitsandbytes' "install
kernels" warning is replaced by one line saying what it means for speed."""
import logging
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from palrp_bench.data.synthetic_text import ASSET_DIR
from palrp_bench.models import loading
from palrp_bench.models.loading import BNB_KERNELS_NOTE, tokenizer_source, weights_description
from palrp_bench.runner.bundles import load_bundle
from palrp_bench.runner.plan import plan_cells
from models.tiny_llama import make_llama
from runner.harness import REPO, compose_cfg


def _cfg(**fields):
    base = dict(source="org/model", tokenizer=None, base_model=None, checkpoint=None)
    return SimpleNamespace(**{**base, **fields})


def test_tokenizer_source_rules(tmp_path):
    with_tokenizer, without = tmp_path / "with", tmp_path / "without"
    for folder in (with_tokenizer, without):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    (with_tokenizer / "tokenizer_config.json").write_text("{}")
    assert tokenizer_source(_cfg()) == "org/model"  # a hub model is its own tokenizer
    assert tokenizer_source(_cfg(source=str(with_tokenizer), base_model="org/base")) == str(with_tokenizer)
    assert tokenizer_source(_cfg(source=str(without), base_model="org/base")) == "org/base"
    assert tokenizer_source(_cfg(source=str(with_tokenizer), tokenizer="org/other")) == "org/other"  # says otherwise
    assert tokenizer_source(_cfg(source=str(without))) == str(without)  # nothing better: fails naming it


@pytest.fixture
def finetuned_folder(tmp_path):
    """A classifier checkpoint saved with its tokenizer, as palrp-bench-finetune exports it."""
    folder = tmp_path / "tinyllama_imdb"
    make_llama("gqa", "classifier", vocab_size=128).save_pretrained(folder)
    for item in (ASSET_DIR / "tokenizer").iterdir():
        shutil.copy(item, folder / item.name)
    return folder


def test_the_makefile_example_loads_its_tokenizer_from_the_folder_offline(tmp_path, finetuned_folder, monkeypatch):
    """``make table1 ARGS="model=tinyllama model.source=/ckpt/tinyllama_imdb"`` offline: the folder's tokenizer, no
    hub lookup of the base model's (which is not cached here)."""
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    cell = plan_cells(compose_cfg(tmp_path / "run", "experiment=table1", "model=tinyllama",
                                  f"model.source={finetuned_folder}", "model.dtype=float32"))[0]
    assert cell.model.base_model == "TinyLlama/TinyLlama-1.1B-Chat-v1.0" and cell.model.tokenizer is None
    start = time.monotonic()
    bundle = load_bundle(cell.model, "cpu")
    assert time.monotonic() - start < 60
    assert len(bundle.tokenizer) < 200  # the folder's (embedded) tokenizer, not a 32,000-token LLaMA one
    assert bundle.tokenizer.name_or_path == str(finetuned_folder)


def test_the_log_names_the_checkpoint_file_loaded(tmp_path, caplog):
    import timm

    checkpoint = tmp_path / "deit_tiny_patch16_224-random.pth"
    torch.save({"model": timm.create_model("deit_tiny_patch16_224", pretrained=False).state_dict()}, checkpoint)
    cell = plan_cells(compose_cfg(tmp_path / "run", "model=deit_tiny", "task=synthetic_shapes", "method=pa_lrp",
                                  f"model.checkpoint={checkpoint}"))[0]
    assert weights_description(cell.model) == f"checkpoint {checkpoint} into deit_tiny_patch16_224.fb_in1k"
    with caplog.at_level(logging.INFO, logger="palrp_bench.runner.bundles"):
        load_bundle(cell.model, "cpu")
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("loading model deit_tiny"))
    assert str(checkpoint) in line


def test_bnb_kernels_warning_becomes_one_line_of_ours(caplog, monkeypatch):
    monkeypatch.setattr(loading._BnbKernelsNote, "noted", False)
    loading._replace_bnb_kernels_warning()
    loading._replace_bnb_kernels_warning()  # idempotent: one filter
    bnb_logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    assert sum(isinstance(f, loading._BnbKernelsNote) for f in bnb_logger.filters) == 1
    with caplog.at_level(logging.INFO):
        for _ in range(2):
            bnb_logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure "
                               "you already `pip install kernels` and the kernels >= 0.11.1", "No module named x")
        bnb_logger.warning("another bitsandbytes warning")
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count(BNB_KERNELS_NOTE) == 1 and not any("pip install kernels" in m for m in messages)
    assert "another bitsandbytes warning" in messages


def test_nf4_load_prints_no_kernels_warning(tmp_path):
    """The real import path, in a fresh process: on CPUs where bitsandbytes warns (AVX512-BF16), our line replaces
    its warning; elsewhere neither appears."""
    pytest.importorskip("bitsandbytes")
    make_llama("gqa", "causal", hidden_size=64, intermediate_size=128).save_pretrained(tmp_path / "m")
    code = ("import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
            "from palrp_bench.models.loading import load_hf_model\n"
            f"load_hf_model({str(tmp_path / 'm')!r}, kind='causal', dtype='float32', quantization='nf4')\n"
            "from bitsandbytes.functional import has_avx512bf16; print('avx512bf16', has_avx512bf16())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                               "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pip install kernels" not in done.stderr
    if "avx512bf16 True" in done.stdout:
        assert done.stderr.count("optional fused 4-bit CPU kernel") == 1
