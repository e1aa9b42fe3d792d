"""The runner runs a tiny random twin of every family through the task kinds its head supports (issue "PA-LRP for
the models people use now"): causal LMs (GPT-2, OPT, BLOOM) on the next-token / MCQA-style task, sequence
classifiers (GPT-2, BERT) on the classification task, the RoPE ViT on the image classification and segmentation
tasks. The shipped model configs for the real checkpoints (``configs/model/gpt2.yaml``, ``bloom_560m.yaml``, ...)
are used with ``model.source`` / ``model.checkpoint`` pointed at the tiny models; the tasks are the embedded
synthetic ones. One run goes through the ``palrp-bench`` command itself, the others through the same runner in
process (the command's code path after Hydra, without a process start per cell)."""
import pandas as pd
import pytest
import timm
import torch
import transformers

from palrp_bench.data.synthetic_text import build_tiny_tokenizer
from palrp_bench.data.synthetic_vision import SYNTHETIC_CLASSES
from palrp_bench.rundir import NONFINITE_METRIC
from palrp_bench.app import run
from runner.harness import compose_cfg, read_results, run_cli

VOCAB = 128  # covers the embedded tokenizer's 108 words
TEXT = dict(bos_token_id=1, eos_token_id=2, pad_token_id=2)
VIT_OPTIONS = dict(img_size=64, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=len(SYNTHETIC_CLASSES))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Tiny random models saved like real checkpoints: Hugging Face folders with the embedded tokenizer, a timm
    state dict."""
    root = tmp_path_factory.mktemp("tiny_family_models")
    tokenizer = build_tiny_tokenizer()
    gpt2 = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=4, **TEXT)
    models = {
        "gpt2_causal": transformers.GPT2LMHeadModel(gpt2),
        "gpt2_cls": transformers.GPT2ForSequenceClassification(gpt2),
        "opt_causal": transformers.OPTForCausalLM(transformers.OPTConfig(
            vocab_size=VOCAB, max_position_embeddings=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            ffn_dim=64, word_embed_proj_dim=32, **TEXT)),
        "bloom_causal": transformers.BloomForCausalLM(transformers.BloomConfig(
            vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4, **TEXT)),
        "bert_cls": transformers.BertForSequenceClassification(transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, **TEXT)),
    }
    torch.manual_seed(0)
    for name, model in models.items():
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    vit = timm.create_model("vit_small_patch16_rope_ape_224", **VIT_OPTIONS)
    torch.save(vit.state_dict(), root / "vit_rope.pth")
    return root


def text_cell(tiny, model, folder, task, kind=None):
    overrides = [f"model={model}", f"model.source={tiny / folder}", f"model.tokenizer={tiny / folder}",
                 f"task={task}", "task.options.n=3", "task.selection=all"]
    return overrides + ([f"model.kind={kind}"] if kind else [])


def vit_cell(tiny, task):
    return ["model=vit_small_rope", "model.source=vit_small_patch16_rope_ape_224",
            f"model.checkpoint={tiny / 'vit_rope.pth'}", *(f"+model.options.{k}={v}" for k, v in VIT_OPTIONS.items()),
            f"task={task}", "task.options.n=3"]


CELLS = {
    "gpt2_next_token": lambda t: text_cell(t, "gpt2", "gpt2_causal", "synthetic_mcqa"),
    "gpt2_classification": lambda t: text_cell(t, "gpt2", "gpt2_cls", "synthetic_sentiment", kind="classifier"),
    "opt_next_token": lambda t: text_cell(t, "opt_125m", "opt_causal", "synthetic_mcqa"),
    "bert_classification": lambda t: text_cell(t, "bert_base", "bert_cls", "synthetic_sentiment"),
    "vit_rope_image_classification": lambda t: vit_cell(t, "synthetic_shapes"),
    "vit_rope_segmentation": lambda t: vit_cell(t, "synthetic_shapes_seg"),
}


def check_results(df: pd.DataFrame, metrics: set[str]) -> None:
    assert df.sample_id.nunique() == 3
    assert (df.metric == NONFINITE_METRIC).sum() == 0
    assert metrics <= set(df.metric), set(df.metric)
    assert df.value.notna().all()


EXPECTED = {"next_token": {"ac", "mse"}, "classification": {"ac", "mse", "correct"},
            "image_classification": {"agreement", "relevance_positional"}, "segmentation": {"pix_correct", "ap"}}


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_runner_runs_each_family_on_its_task_kinds(tiny, tmp_path, cell):
    cfg = compose_cfg(tmp_path / "run", *CELLS[cell](tiny), "method=pa_lrp", "runner.quiet=true",
                      "runner.devices=[cpu]")
    outcome = run(cfg, out=open("/dev/null", "w"))
    assert outcome.merge.n_samples == 3
    kind = max((k for k in EXPECTED if cell.endswith(k)), key=len)
    check_results(read_results(tmp_path / "run"), EXPECTED[kind])


@pytest.mark.slow
def test_the_command_runs_bloom_on_the_mcqa_style_task(tiny, tmp_path):
    """The ``palrp-bench`` command itself, ALiBi family, every method of a multi-sink kind."""
    done = run_cli("-m", *text_cell(tiny, "bloom_560m", "bloom_causal", "synthetic_mcqa"),
                   "method=attnlrp,pa_lrp,pa_lrp_no_multisink", f"run_dir={tmp_path / 'run'}", "runner.quiet=true",
                   "runner.devices=[cpu]", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    df = read_results(tmp_path / "run")
    assert set(df.method) == {"attnlrp", "pa_lrp", "pa_lrp_no_multisink"} and set(df.model) == {"bloom_560m"}
    for _, part in df.groupby("method"):
        check_results(part, EXPECTED["next_token"])
    assert "bloom_560m / synthetic_mcqa" in done.stdout
