"""Your own model (``model=hf model.source=<folder or hub id>``): kind, family and name read from the checkpoint
before anything loads, float32 unless told; and published numbers only for the paper's checkpoint: a borrowed paper
config with another ``model.source`` gets neither the paper's numbers nor its bfloat16 (runner/model_identity.py)."""
import hashlib
import json
import math

import pandas as pd
import pytest
import torch

from palrp_bench import catalog
from palrp_bench.data.synthetic_text import ASSET_DIR
from palrp_bench.errors import BadInputError, MissingDataError, UnsupportedModelError
from palrp_bench.models.checkpoint import derived_name, official_file_prefix
from palrp_bench.metrics.published import attach_published, load_published
from palrp_bench.runner import model_identity
from palrp_bench.runner.model_identity import paper_identity, resolve_model
from palrp_bench.runner.plan import plan_cells
from palrp_bench.schema import DType, ModelConfig, ModelKind
from models import families, tiny_families
from runner.harness import compose_cfg, read_results, run_cli

#: TinyLlama-1.1B's architecture (config.json of TinyLlama/TinyLlama-1.1B-Chat-v1.0), the base of Table 1's classifier
TINYLLAMA = dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                 num_attention_heads=32, num_key_value_heads=4, vocab_size=32000)


def _own(source, **fields) -> ModelConfig:
    return ModelConfig(**{"name": "hf", "loader": "hf", "kind": ModelKind.auto, "source": str(source), **fields})


def _shipped(config, **fields) -> ModelConfig:
    from dataclasses import replace

    from omegaconf import OmegaConf

    return replace(OmegaConf.to_object(catalog.load("model", config)), **fields)


def _config_only(folder, **fields):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(fields))
    return folder


@pytest.mark.parametrize("build, kind, family", [
    (lambda: tiny_families.make_model("llama", "classifier"), "classifier", "llama"),
    (lambda: tiny_families.make_model("qwen2", "causal"), "causal", "qwen2"),
    (lambda: families.make_text("bert", "masked_lm", torch.float32), "masked_lm", "bert"),
    (lambda: families.make_text("gpt2", "causal", torch.float32), "causal", "gpt2"),
])
def test_kind_family_and_name_come_from_the_checkpoint(tmp_path, build, kind, family, caplog):
    folder = tmp_path / "my-finetuned model"
    build().save_pretrained(folder)
    with caplog.at_level("INFO", logger="palrp_bench.runner"):
        model = resolve_model(_own(folder))
    assert (model.kind.value, model.name, model.dtype) == (kind, "my-finetuned_model", DType.float32)
    assert f"({family}, {kind})" in caplog.text and "runs in float32" in caplog.text
    told = resolve_model(_own(folder, name="mine", kind=ModelKind.causal, dtype=DType.bfloat16))
    assert (told.name, told.kind, told.dtype) == ("mine", ModelKind.causal, DType.bfloat16)  # what is told wins


def test_a_timm_checkpoint_and_a_t5_are_their_kinds(tmp_path):
    from palrp_bench.data.synthetic_vision import save_tiny_vit_checkpoint
    from models.tiny_t5 import make_t5

    vit = resolve_model(_own(save_tiny_vit_checkpoint(tmp_path / "shapes_vit")))
    assert (vit.kind, vit.name) == (ModelKind.vit, "shapes_vit")
    make_t5(dtype=torch.float32).save_pretrained(tmp_path / "t5")
    assert resolve_model(_own(tmp_path / "t5")).kind == ModelKind.seq2seq


def test_the_head_decides_the_kind():
    from palrp_bench.models.checkpoint import kind_of_config

    t5 = dict(model_type="t5", architectures=["T5ForConditionalGeneration"], is_encoder_decoder=True)
    gemma = dict(model_type="gemma3", architectures=["Gemma3ForConditionalGeneration"])  # vision tower + decoder
    assert kind_of_config(t5, "x") == ("seq2seq", "t5") and kind_of_config(gemma, "x") == ("vlm", "gemma3")
    llava = dict(model_type="llava", architectures=["LlavaForConditionalGeneration"])
    assert kind_of_config(llava, "x") == ("vlm", "llava")
    assert kind_of_config(dict(model_type="roberta", architectures=["RobertaForMaskedLM"]), "x")[0] == "masked_lm"


def test_names_say_what_the_model_is():
    assert derived_name("checkpoints/train_tinyllama_imdb/best") == "train_tinyllama_imdb_best"
    assert derived_name("runs/ckpt/checkpoint-500/") == "ckpt_checkpoint-500"
    assert derived_name("openai-community/gpt2") == "gpt2"
    assert derived_name("./hub/models--org--my-model/snapshots/" + "a" * 40) == "my-model"
    assert model_identity._shipped_name("openai-community/gpt2", ModelKind.causal) == "gpt2"  # one name per model
    assert model_identity._shipped_name("openai-community/gpt2", ModelKind.classifier) is None


@pytest.mark.parametrize("fields, error, match", [
    (None, MissingDataError, "holds no config.json"),
    (dict(model_type="mamba", architectures=["MambaForCausalLM"]), UnsupportedModelError,
     "is a 'mamba' model, which no LRP twin covers -- supported families: .*llama"),
    (dict(model_type="llama", architectures=["LlamaModel"]), BadInputError,
     "names the head LlamaModel, not one palrp-bench explains -- set model.kind=causal"),
    (dict(model_type="llama"), BadInputError, "names no head"),
    ("{ not json", MissingDataError, "config.json of .* is not readable JSON"),
])
def test_what_cannot_be_explained_is_refused_before_loading(tmp_path, fields, error, match):
    folder = tmp_path / "m"
    folder.mkdir()
    if fields is not None:
        (folder / "config.json").write_text(fields if isinstance(fields, str) else json.dumps(fields))
    with pytest.raises(error, match=match) as err:
        resolve_model(_own(folder))
    assert "\n" not in str(err.value)
    with pytest.raises(BadInputError, match="model=hf needs the checkpoint to load -- add model.source="):
        resolve_model(_own(""))


def test_a_finetuned_classifier_is_the_papers_when_it_has_the_base_architecture(tmp_path):
    """Table 1's TinyLlama classifier was never released: the paper's cell is a two-label classifier of
    TinyLlama-1.1B's architecture (trained with the official recipe); a 2-layer model is not."""
    head = dict(architectures=["LlamaForSequenceClassification"], id2label={"0": "a", "1": "b"})
    paper = _config_only(tmp_path / "tinyllama_imdb", **TINYLLAMA, **head)
    found = paper_identity(_shipped("tinyllama", source=str(paper)))
    assert found.matches is True and "TinyLlama/TinyLlama-1.1B-Chat-v1.0's architecture" in found.reason
    small = _config_only(tmp_path / "small", **{**TINYLLAMA, "num_hidden_layers": 2}, **head)
    found = paper_identity(_shipped("tinyllama", source=str(small)))
    assert found.matches is False and found.reason == (
        f"not the paper's checkpoint: {small} has num_hidden_layers=2, TinyLlama/TinyLlama-1.1B-Chat-v1.0 has 22")
    three = _config_only(tmp_path / "three", **TINYLLAMA, architectures=head["architectures"],
                         id2label={"0": "a", "1": "b", "2": "c"})
    assert "has 3 labels" in paper_identity(_shipped("tinyllama", source=str(three))).reason
    assert paper_identity(_shipped("tinyllama", source=str(tmp_path / "absent"))).matches is None
    wrong_kind = paper_identity(_shipped("tinyllama", source=str(paper), kind=ModelKind.causal))
    assert wrong_kind.matches is False and "model.kind=causal, the paper's classifier" in wrong_kind.reason


def test_released_weights_match_by_hub_id_or_by_the_fingerprint_of_a_local_copy(tmp_path, monkeypatch):
    assert paper_identity(_shipped("llama3_8b")).reason == "the shipped configuration"
    other = paper_identity(_shipped("llama3_8b", source="someone/llama-8b-merged"))
    assert other.matches is False and "the paper's meta-llama/Llama-3.1-8B-Instruct" in other.reason
    snapshot = tmp_path / "hub" / "snapshot"
    tiny_families.make_model("llama").save_pretrained(snapshot)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.json", "model.safetensors"):
        (copy / name).write_bytes((snapshot / name).read_bytes())
    (copy / "README.md").write_text("a downloaded copy holds other files too")
    not_cached = paper_identity(_shipped("llama3_8b", source=str(copy)))
    assert not_cached.matches is False and "is not in the hub cache to compare it with" in not_cached.reason
    from palrp_bench import fingerprints

    monkeypatch.setattr(fingerprints, "hub_snapshot", lambda repo: snapshot if repo == "meta-llama/Llama-3.1-8B-Instruct"
                        else None)
    assert paper_identity(_shipped("llama3_8b", source=str(copy))).matches is True
    tiny_families.make_model("llama", seed=1).save_pretrained(copy)  # other weights, same architecture
    assert "differ from meta-llama/Llama-3.1-8B-Instruct's" in paper_identity(
        _shipped("llama3_8b", source=str(copy))).reason


def test_an_official_weights_file_is_known_by_the_hash_in_its_url(tmp_path, monkeypatch):
    url = "https://dl.fbaipublicfiles.com/deit/deit_tiny_patch16_224-a1311bcf.pth"
    assert official_file_prefix(url) == "a1311bcf" and official_file_prefix("https://x/y/model.pth") is None
    mine = tmp_path / "deit_tiny.pth"
    mine.write_bytes(b"not the official weights")
    found = paper_identity(_shipped("deit_tiny", checkpoint=str(mine)))
    assert found.matches is False and "is not the official weights file deit_tiny_patch16_224-a1311bcf.pth" in found.reason
    from palrp_bench.models import checkpoint

    prefix = hashlib.sha256(mine.read_bytes()).hexdigest()[:8]  # as if this file were the official one
    monkeypatch.setattr(checkpoint, "official_file_prefix", lambda url: prefix)
    assert paper_identity(_shipped("deit_tiny", checkpoint=str(mine))).matches is True
    assert paper_identity(_shipped("deit_tiny")).matches is True  # timm's pretrained weights by name
    assert paper_identity(_own("x")) is None and paper_identity(_shipped("tiny_llama_cls", name="mine")) is None


def test_a_borrowed_paper_config_runs_in_float32_unless_told(tmp_path):
    small = tmp_path / "small"
    tiny_families.make_model("llama", "classifier").save_pretrained(small)
    args = ("model=tinyllama", f"model.source={small}", "task=synthetic_sentiment", "method=pa_lrp")
    (cell,) = plan_cells(compose_cfg(tmp_path / "r", *args))
    assert cell.model.dtype == DType.float32 and cell.identity.matches is False
    assert cell.describe()["paper_checkpoint"] == {"matches": False, "reason": cell.identity.reason}
    (cell,) = plan_cells(compose_cfg(tmp_path / "r", *args, "model.dtype=float16"))
    assert cell.model.dtype == DType.float16  # told
    head = dict(architectures=["LlamaForSequenceClassification"], id2label={"0": "a", "1": "b"})
    paper = _config_only(tmp_path / "paper", **TINYLLAMA, **head)
    (cell,) = plan_cells(compose_cfg(tmp_path / "r", "model=tinyllama", f"model.source={paper}",
                                     "task=synthetic_sentiment", "method=pa_lrp"))
    assert cell.model.dtype == DType.bfloat16 and cell.identity.matches is True  # the paper's cell as the paper ran


def test_published_numbers_are_withheld_from_a_model_that_is_not_the_papers():
    metrics = pd.DataFrame([{"run": "r", "model": "tinyllama", "task": "imdb", "paper_task": "imdb",
                             "method": "pa_lrp", "metric": "auac", "variant": "generation", "value": 0.49,
                             "note": ""}])
    published = load_published()
    attached = attach_published(metrics, published)
    assert attached.loc[0, "published"] == 0.806 and attached.loc[0, "paper_table"] == "table1"
    withheld = {("r", "tinyllama"): "not the paper's checkpoint: a 2-layer model"}
    once = attach_published(metrics, published, withheld)
    assert math.isnan(once.loc[0, "published"]) and math.isnan(once.loc[0, "difference"])
    assert once.loc[0, "paper_table"] == "" and once.loc[0, "note"] == (
        "no published number: not the paper's checkpoint: a 2-layer model")
    again = attach_published(once, published, withheld)  # the report re-attaches to metrics.csv: no second note
    assert again.loc[0, "note"] == once.loc[0, "note"]
    assert attach_published(metrics, published, {("other run", "tinyllama"): "x"}).loc[0, "published"] == 0.806


def test_a_random_model_borrowing_the_tinyllama_config_gets_no_published_numbers(tmp_path):
    """The case of the report: `model=tinyllama model.source=<random 2-layer model>` on a 60-row IMDB CSV printed
    `(paper 0.806)`, filled paper_table / published / difference in metrics.csv and ran in bfloat16."""
    from palrp_bench.data.synthetic_text import make_synthetic_classification

    folder = tmp_path / "random_llama"
    tiny_families.make_model("llama", "classifier", vocab_size=128, max_position_embeddings=128).save_pretrained(folder)
    csv = tmp_path / "reviews.csv"
    samples = make_synthetic_classification(60, 0, "test")
    pd.DataFrame({"review": [s.meta["text"] for s in samples],
                  "sentiment": ["negative" if s.label else "positive" for s in samples]}).to_csv(csv, index=False)
    run_dir = tmp_path / "run"
    done = run_cli("model=tinyllama", f"model.source={folder}", f"model.tokenizer={ASSET_DIR / 'tokenizer'}",
                   "model.needs_gpu=false", "task=imdb", f"task.path={csv}", "task.pool_size=18",
                   "task.options.max_length=32", "method=pa_lrp", "runner.max_samples=4", "runner.quiet=true",
                   "runner.devices=[cpu]", f"run_dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(paper " not in done.stdout and "no published number: not the paper's checkpoint" in done.stdout
    metrics = pd.read_csv(run_dir / "metrics.csv")
    assert metrics["published"].isna().all() and metrics["difference"].isna().all()
    assert (metrics["paper_table"].isna() | (metrics["paper_table"] == "")).all()
    assert metrics["note"].str.contains(f"not the paper's checkpoint: {folder} has hidden_size=32").all()
    assert set(read_results(run_dir)["dtype"]) == {"float32"}
    report = run_cli("mode=report", f"run_dir={run_dir}", "report.n_boot=100", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    paper, only = report.stdout.split("## Reproduced only")
    assert "tinyllama" not in paper and "### run/tinyllama/imdb" in only
