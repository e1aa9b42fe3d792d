"""The preflight (docs/planning.md "Preflight"): every problem at once, before any model loads, online or offline,
each with its fix written as command-line overrides that the CLI accepts and that remove the problem."""
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from palrp_bench import hub
from palrp_bench.cli import check_overrides
from palrp_bench.planning import preflight
from palrp_bench.runner.devices import resolve_devices
from palrp_bench.runner.plan import plan_cells
from palrp_bench.planning.preflight import MissingRequirementsError, check_requirements, run_preflight
from runner.harness import compose_cfg, fake_cuda_devices

FIXTURES = Path(__file__).resolve().parents[1] / "data"
#: a local ARC-Easy copy in the hub layout (its preflight reads the head of each split)
ARC_COPY = FIXTURES / "fixtures_text" / "arc"
CPU = resolve_devices(["cpu"], n_cuda=0)
NO_GPU = resolve_devices(["auto"], n_cuda=0)
_OVERRIDE = re.compile(r"^[+~]*[a-z_][a-z_.]*=(\S+)$")


def _overrides(fix: str) -> list[str]:
    """The command-line overrides written in a fix, each ``<placeholder>`` (one word) filled in as a user would."""
    found = []
    for token in (t.rstrip(",;") for t in fix.split()):
        match = _OVERRIDE.match(token)
        if match:
            assert re.fullmatch(r"<[\w.-]+>|[^<>]+", match.group(1)), token  # placeholders hold no spaces
            found.append(re.sub(r"<[\w.-]+>", "/some/path", token))
    return found


def _problems(tmp_path, *overrides, devices=CPU):
    cfg = compose_cfg(tmp_path / "run", *overrides)
    selected = {g for g in ("model", "task", "method") if cfg.get(g) is not None}
    return run_preflight(plan_cells(cfg), devices, selected)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Offline with an empty hub cache; a network probe would fail the test."""
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(preflight, "hub_reachable", lambda **_: pytest.fail("probed the hub while offline"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _fake_cached(cache: Path, repo: str, files: dict[str, str], repo_type: str = "model") -> None:
    """A Hugging Face cache entry as ``huggingface_hub`` lays it out (refs/main -> snapshots/<commit>/...)."""
    root = cache / f"{repo_type}s--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text("0123abc")
    snapshot = root / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (snapshot / name).write_text(content)


def test_table1_on_an_empty_machine_lists_every_problem_with_a_valid_override(offline):
    found = _problems(offline, "experiment=table1", devices=NO_GPU)
    items = [p.item for p in found.problems]
    assert len(items) == 5, items
    assert items[0].startswith("a CUDA GPU (for llama2_7b, llama2_7b_4bit, tinyllama)")
    for folder in ("llama2_7b_imdb", "llama2_7b_imdb_4bit", "tinyllama_imdb"):
        assert any(f"./checkpoints/{folder} (" in i for i in items)
    assert any("IMDB Dataset.csv" in i for i in items)
    for problem in found.problems:
        overrides = _overrides(problem.fix)
        assert overrides, problem.fix
        check_overrides(overrides)  # the CLI accepts every fix as written
    fixes = " ".join(p.fix for p in found.problems)
    assert "runner.devices=[cpu]" in fixes and "model=tinyllama model.source=" in fixes
    assert "task=imdb task.path=" in fixes
    with pytest.raises(MissingRequirementsError) as err:
        check_requirements(plan_cells(compose_cfg(offline / "run", "experiment=table1")), NO_GPU,
                           "experiment table1")
    lines = str(err.value).splitlines()
    assert lines[0].startswith("cannot run experiment table1: 5 problems found before loading anything")
    assert sum(1 for line in lines if line.lstrip().startswith("fix: ")) == 5
    assert max(len(line) for line in lines) <= preflight.WIDTH


def test_a_single_problem_stays_one_line(offline):
    with pytest.raises(MissingRequirementsError) as err:
        check_requirements(plan_cells(compose_cfg(offline / "run", "experiment=table1", "model=tinyllama",
                                                  "runner.devices=[cpu]")), CPU, "experiment table1",
                           {"model"}, None)
    assert len(err.value.problems) == 2  # the folder and the CSV
    assert [line[:5] for line in str(err.value).splitlines() if line[:5].strip()[:2] in ("1.", "2.")] == \
        ["  1. ", "  2. "]
    (offline / "checkpoints" / "tinyllama_imdb").mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (offline / "checkpoints" / "tinyllama_imdb" / name).write_text("{}")
    with pytest.raises(MissingRequirementsError) as err:
        check_requirements(plan_cells(compose_cfg(offline / "run", "experiment=table1", "model=tinyllama")), CPU,
                           "experiment table1", {"model"}, None)
    assert "\n" not in str(err.value) and "IMDB CSV" in str(err.value) and "task=imdb task.path=" in str(err.value)


def test_dataset_sizes_are_checked_and_the_fixes_remove_the_problems(offline):
    imagenet = FIXTURES / "fixtures_vision" / "imagefolder"
    seg = FIXTURES / "fixtures_vision" / "gtsegs_tiny.mat"
    csv = FIXTURES / "fixtures_text" / "imdb" / "IMDB Dataset.csv"
    checks = [("imagenet", f"task.path={imagenet}", "task.options.subset=all"),
              ("imagenet_seg", f"task.path={seg}", "++task.options.expected_count=null"),
              ("imdb", f"task.path={csv}", "task.pool_size=6")]
    for task, path, expected_fix in checks:
        model = "tinyllama" if task == "imdb" else "deit_tiny"
        found = _problems(offline, f"model={model}", f"task={task}", "method=pa_lrp", path,
                          "model.base_model=null" if task == "imdb" else "model.checkpoint=" + str(seg))
        data = [p for p in found.problems if "holds" in p.item or "rows" in p.item]
        assert len(data) == 1, found.problems
        assert expected_fix in data[0].fix, data[0].fix
        check_overrides([f"model={model}", f"task={task}", "method=pa_lrp"] + _overrides(data[0].fix))
        fixed = _problems(offline, f"model={model}", f"task={task}", "method=pa_lrp", path, expected_fix,
                          "model.base_model=null" if task == "imdb" else "model.checkpoint=" + str(seg))
        assert not [p for p in fixed.problems if "holds" in p.item or "rows" in p.item], fixed.problems


def test_imagenet_layout_problems_name_the_path(offline):
    found = _problems(offline, "model=deit_tiny", "task=imagenet", "method=pa_lrp", "task.path=nowhere",
                      "model.checkpoint=nowhere.pth")
    items = [p.item for p in found.problems]
    assert any(i.startswith("DeiT checkpoint file nowhere.pth (deit_tiny)") for i in items)
    assert any(i.startswith("ImageNet validation set at nowhere (imagenet)") for i in items)


def test_offline_hub_models_and_datasets_come_from_the_cache(offline):
    found = _problems(offline, "model=llama3_8b", "task=mcqa", "method=pa_lrp")
    assert [p.item.split(":")[0] for p in found.problems] == [
        "hub model meta-llama/Llama-3.1-8B-Instruct (llama3_8b)", "hub dataset allenai/ai2_arc (mcqa)"]
    assert found.hub == "offline" and all("HF_HUB_OFFLINE=1" in p.item for p in found.problems)
    _fake_cached(offline / "hub", "meta-llama/Llama-3.1-8B-Instruct",
                 {"config.json": "{}", "model.safetensors.index.json": '{"weight_map": {"a": "m-1.safetensors", '
                  '"b": "m-2.safetensors"}}', "m-1.safetensors": "", "tokenizer.json": "{}"})
    found = _problems(offline, "model=llama3_8b", "task=mcqa", "method=pa_lrp")
    assert any("hub model" in p.item for p in found.problems)  # a shard of the index is missing
    _fake_cached(offline / "hub", "meta-llama/Llama-3.1-8B-Instruct", {"m-2.safetensors": ""})
    found = _problems(offline, "model=llama3_8b", "task=mcqa", "method=pa_lrp")
    assert [p.item.split(":")[0] for p in found.problems] == ["hub dataset allenai/ai2_arc (mcqa)"]


def test_timm_weights_and_tokenizers_from_the_hub_cache(offline):
    found = _problems(offline, "model=deit_tiny", "task=synthetic_shapes", "method=pa_lrp")
    assert [p.item.split(":")[0] for p in found.problems] == [
        "pretrained weights timm/deit_tiny_patch16_224.fb_in1k (deit_tiny)"]
    assert "model.checkpoint=" in found.problems[0].fix
    _fake_cached(offline / "hub", "timm/deit_tiny_patch16_224.fb_in1k", {"model.safetensors": ""})
    assert _problems(offline, "model=deit_tiny", "task=synthetic_shapes", "method=pa_lrp").problems == []
    folder = offline / "ckpt"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_text("{}")
    found = _problems(offline, "model=tinyllama", "task=synthetic_sentiment", "method=pa_lrp",
                      f"model.source={folder}")
    assert [p.item.split(":")[0] for p in found.problems] == [
        "hub tokenizer TinyLlama/TinyLlama-1.1B-Chat-v1.0 (tinyllama)"]
    found = _problems(offline, "model=tinyllama", "task=synthetic_sentiment", "method=pa_lrp",
                      f"model.source={folder}", "model.base_model=null")
    assert found.problems[0].item.startswith(f"tokenizer of tinyllama: {folder} holds no tokenizer files")
    assert found.problems[0].fix == "model.tokenizer=<tokenizer> (a hub id or folder)"
    (folder / "tokenizer.json").write_text("{}")  # a finetuned folder saved with its tokenizer
    assert _problems(offline, "model=tinyllama", "task=synthetic_sentiment", "method=pa_lrp",
                     f"model.source={folder}").problems == []


@pytest.fixture
def online(monkeypatch, tmp_path):
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_online_but_unreachable_hub_is_probed_once_and_listed(online, monkeypatch):
    probes = []
    monkeypatch.setattr(preflight, "hub_reachable", lambda **kw: probes.append(kw) or False)
    monkeypatch.setattr(preflight, "hub_access", lambda *a, **k: pytest.fail("access check on a dead hub"))
    found = _problems(online, "experiment=table3")
    assert len(probes) == 1 and probes[0]["timeout"] == hub.HUB_PROBE_TIMEOUT
    assert found.hub == "unreachable"
    items = [p.item for p in found.problems]
    assert any(i.startswith("hub model meta-llama/Llama-3.1-8B-Instruct (llama3_8b): not in the local")
               and "did not answer" in i for i in items)
    assert any("allenai/ai2_arc (mcqa)" in i for i in items) and any("wikimedia/wikipedia" in i for i in items)
    for problem in found.problems:
        check_overrides(["experiment=table3"] + _overrides(problem.fix))


@pytest.mark.parametrize("access,expected", [(hub.ACCESS_GATED, "gated on the hub"),
                                             (hub.ACCESS_NOT_FOUND, "no such repository"), (hub.ACCESS_OK, None),
                                             (hub.ACCESS_UNKNOWN, None)])
def test_online_hub_access_is_checked_per_model(online, monkeypatch, access, expected):
    monkeypatch.setattr(preflight, "hub_reachable", lambda **_: True)
    asked = []
    monkeypatch.setattr(preflight, "hub_access", lambda repo, repo_type: asked.append(repo) or access)
    found = _problems(online, "model=llama3_8b", "task=mcqa", "method=pa_lrp", f"task.path={ARC_COPY}")
    assert asked == ["meta-llama/Llama-3.1-8B-Instruct"] and found.hub == "online"
    if expected is None:
        assert found.problems == []
    else:
        assert len(found.problems) == 1 and expected in found.problems[0].item
        if access == hub.ACCESS_GATED:
            assert "hf auth login" in found.problems[0].fix and "or model.source=" in \
                found.problems[0].fix


def test_hub_access_is_bounded_and_reads_the_errors(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    def hang(*_, **__):
        time.sleep(5)
    monkeypatch.setattr(huggingface_hub, "auth_check", hang)
    start = time.monotonic()
    assert hub.hub_access("org/model", timeout=0.2) == hub.ACCESS_UNKNOWN
    assert time.monotonic() - start < 2
    for error, expected in ((GatedRepoError, hub.ACCESS_GATED), (RepositoryNotFoundError, hub.ACCESS_NOT_FOUND)):
        def fail(*_, error=error, **__):
            raise error.__new__(error)
        monkeypatch.setattr(huggingface_hub, "auth_check", fail)
        assert hub.hub_access("org/model", timeout=2) == expected


def test_go_offline_switches_the_loaded_hub_library_off(monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    hub.go_offline()
    assert hub.hub_offline() and hub.hub_offline("dataset") and constants.HF_HUB_OFFLINE is True


@pytest.mark.parametrize("n_cuda,device_problem", [(0, "no CUDA device is visible"),
                                                   (1, "only 1 CUDA device(s) are visible"), (2, None)])
def test_devices_problems_join_the_list(offline, monkeypatch, n_cuda, device_problem):
    """cuda:1 asked for on a machine with no, one or two GPUs (faked): the device problem joins the others."""
    from palrp_bench.app import run

    fake_cuda_devices(monkeypatch, n_cuda)
    with pytest.raises(MissingRequirementsError) as err:
        run(compose_cfg(offline / "run", "experiment=table1", "runner.devices=[cuda:1]"))
    text = str(err.value)
    assert "./checkpoints/tinyllama_imdb" in text
    if device_problem:
        assert f"GPU 1 was requested (runner.devices) but {device_problem}" in text
    else:
        assert "GPU 1 was requested" not in text and "a CUDA GPU" not in text
    assert not (offline / "run").exists()


def test_preflight_runs_before_any_model_loads(offline, monkeypatch):
    from palrp_bench.runner import bundles
    from palrp_bench.app import run

    monkeypatch.setattr(bundles, "load_bundle", lambda *_: pytest.fail("a model loaded before the preflight"))
    shutil.copytree(FIXTURES / "fixtures_vision" / "imagefolder", offline / "imagenet")
    with pytest.raises(MissingRequirementsError) as err:
        run(compose_cfg(offline / "run", "experiment=table4", f"task.path={offline / 'imagenet'}",
                        "task=imagenet", "runner.devices=[cpu]"))
    text = str(err.value)
    assert "subset=protocol5000 is defined on all 50,000" in text and "task.options.subset=all" in text
    assert text.count("pretrained weights timm/deit_") == 3


def test_a_complete_machine_has_nothing_missing(offline):
    from palrp_bench.data.imdb import KAGGLE_CSV_NAME

    for folder in ("llama2_7b_imdb", "llama2_7b_imdb_4bit", "tinyllama_imdb"):
        path = offline / "checkpoints" / folder
        path.mkdir(parents=True)
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            (path / name).write_text("{}")
    (offline / "data" / "imdb").mkdir(parents=True)
    rows = "".join(f"review {i},{'positive' if i % 2 else 'negative'}\n" for i in range(16667))  # 5000 test rows
    (offline / "data" / "imdb" / KAGGLE_CSV_NAME).write_text("review,sentiment\n" + rows)
    assert _problems(offline, "experiment=table1", devices=resolve_devices(["auto"], n_cuda=1)).problems == []
    assert [p.item.split(":")[0] for p in _problems(offline, "experiment=table1", devices=NO_GPU).problems] == [
        "a CUDA GPU (for llama2_7b, llama2_7b_4bit, tinyllama)"]


def test_a_run_continues_offline_when_the_hub_does_not_answer(online, monkeypatch):
    """Everything needed is cached but the hub is dead: no problem, and the loaders never retry the hub."""
    import os

    from palrp_bench.runner import execute
    from palrp_bench.app import run

    _fake_cached(online / "hub", "timm/deit_tiny_patch16_224.fb_in1k", {"model.safetensors": ""})
    monkeypatch.setattr(preflight, "hub_reachable", lambda **_: False)
    seen = []

    def load(*_):
        seen.append(os.environ.get("HF_HUB_OFFLINE"))
        raise KeyboardInterrupt  # stop here: the model itself is a fake
    monkeypatch.setattr(execute.BundleCache, "get", lambda self, *a: load())
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)  # restored after the test
    with pytest.raises(KeyboardInterrupt):
        run(compose_cfg(online / "run", "model=deit_tiny", "task=synthetic_shapes", "method=pa_lrp",
                        "runner.devices=[cpu]", "runner.quiet=true"))
    assert seen == ["1"]


def test_imdb_in_the_hub_layout_is_checked_as_parquet_not_as_the_csv(offline):
    hub_layout = FIXTURES / "fixtures_text" / "imdb_hf"
    args = ("model=tinyllama", "task=imdb", "method=pa_lrp", "model.base_model=null", "+task.options.source=hf")
    found = _problems(offline, *args, f"task.path={hub_layout}")
    assert not [p for p in found.problems if "IMDB" in p.item], found.problems
    (offline / "empty").mkdir()
    found = _problems(offline, *args, f"task.path={offline / 'empty'}")
    imdb = [p for p in found.problems if "IMDB" in p.item]
    assert len(imdb) == 1 and "stanfordnlp/imdb layout" in imdb[0].item and "no 'test' split file" in imdb[0].item
    assert "plain_text/test-*.parquet" in imdb[0].fix


@pytest.mark.parametrize("model, task, kinds", [
    (("model=tiny_vit",), "synthetic_sentiment", "is an image classifier (kind vit), but task synthetic_sentiment "
                                                 "(text_classification) needs a text classifier (kind classifier)"),
    (("model=tiny_llama_cls",), "synthetic_shapes", "is a text classifier (kind classifier), but task "
                                                    "synthetic_shapes (image_classification) needs an image "
                                                    "classifier (kind vit)"),
    (("model=tiny_llama_causal",), "synthetic_sentiment", "is a causal language model (kind causal), but task "
                                                          "synthetic_sentiment (text_classification) needs a text "
                                                          "classifier"),
    (("model=tiny_llama_cls",), "synthetic_mcqa", "(kind classifier), but task synthetic_mcqa (next_token) needs a "
                                                  "causal language model (kind causal)"),
    (("model=bert_base", "model.kind=masked_lm"), "synthetic_mcqa", "is a masked language model (kind masked_lm), but "
                                                                    "task synthetic_mcqa (next_token) needs a causal"),
    (("model=tiny_vit",), "selftest", "but task selftest (selftest) needs no model (the harness self-test) (kind none)"),
])
def test_a_model_of_another_kind_than_the_task_needs_is_refused_before_loading(offline, monkeypatch, model, task,
                                                                               kinds):
    """A model kind the task kind's adapter does not evaluate (its ``model_kinds``) is one problem naming both
    kinds, found before any model loads; its fix (a model of the needed kind) removes it."""
    from palrp_bench.runner import bundles
    from palrp_bench.app import run

    monkeypatch.setattr(bundles, "load_bundle", lambda *_: pytest.fail("a model loaded before the preflight"))
    with pytest.raises(MissingRequirementsError) as err:
        run(compose_cfg(offline / "run", *model, f"task={task}", "method=pa_lrp", "runner.devices=[cpu]"))
    problems = [p for p in err.value.problems if "kind" in p.item]
    assert len(problems) == 1 and kinds in problems[0].item and "\n" not in problems[0].item
    fixed = _overrides(problems[0].fix)
    assert fixed and fixed[0].startswith("model=")
    check_overrides([*fixed, f"task={task}"])
    assert not [p for p in _problems(offline, *fixed, f"task={task}", "method=pa_lrp").problems if "kind" in p.item]
    assert not (offline / "run").exists()


def test_every_shipped_cell_pairs_kinds_its_task_evaluates(tmp_path):
    """The experiments never pair a model with a task kind it cannot run (the check can fail: see above)."""
    from palrp_bench import catalog

    for name in catalog.available("experiment"):
        cells = plan_cells(compose_cfg(tmp_path, f"experiment={name}"))
        found = preflight.Preflight()
        for cell in cells:
            preflight._kind_checks(cell, found)
        assert found.problems == [], name


@pytest.mark.parametrize("mode", ["run", "plan"])
def test_the_command_refuses_a_vision_model_on_a_text_task_in_one_line(tmp_path, mode):
    from runner.harness import run_cli

    done = run_cli(f"mode={mode}", "model=tiny_vit", "task=synthetic_sentiment", "method=pa_lrp",
                   f"run_dir={tmp_path / 'r'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-1500:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("palrp-bench: error: ") and "Traceback" not in done.stderr
    where = lines[0] if mode == "run" else done.stdout
    assert "model tiny_vit is an image classifier (kind vit), but task synthetic_sentiment" in where
    assert "model=tiny_llama_cls" in where and "VisionTransformer" not in done.stderr + done.stdout
    assert os.listdir(tmp_path) == []  # no run dir, no runs/<stamp>/


def test_a_plan_and_the_load_list_the_imagenet_folder_once(offline, monkeypatch):
    """The preflight lists the ImageNet folder; the job's load reuses that listing (data/imagenet.py "One listing
    per folder"), counted as every ``os.scandir`` of the val folder."""
    import os

    from palrp_bench.evaluation.tasks import task_adapter

    root = offline / "imagenet"
    shutil.copytree(FIXTURES / "fixtures_vision" / "imagefolder", root)
    past = time.time() - 3600
    for folder, _, names in os.walk(root):
        for path in [Path(folder), *(Path(folder) / n for n in names)]:
            os.utime(path, (past, past))
    listed = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": (listed.append(path) if Path(path) == root / "val" else None)
                        or real(path))
    cfg = compose_cfg(offline / "run", "model=deit_tiny", "task=imagenet", "method=pa_lrp", f"task.path={root}",
                      "task.options.subset=all")
    cells = plan_cells(cfg)
    found = run_preflight(cells, CPU, {"model", "task", "method"})
    assert not [p for p in found.problems if "ImageNet" in p.item], found.problems
    pool = task_adapter(cells[0].task.kind).load_samples(cells[0].task, None)
    assert len(pool) == 5 and len(listed) == 1


def test_the_squad_file_is_read_and_counted_before_a_run(offline):
    """squad_attnlrp: a missing SQuAD v2 file is one problem naming the official file; a file with fewer questions
    than pool_size is another, fixed by a smaller pool (the fixture holds 12, 9 of them answerable: the count
    follows task.options.answerable_only)."""
    squad = FIXTURES / "fixtures_text" / "evidence" / "dev-v2.0.json"
    cell = ("model=tiny_t5", "task=squad_attnlrp", "method=pa_lrp")
    missing = [p for p in _problems(offline, *cell).problems if "SQuAD" in p.item]
    assert len(missing) == 1 and "dev-v2.0.json" in missing[0].fix, missing
    check_overrides(list(cell) + _overrides(missing[0].fix))
    small = [p for p in _problems(offline, *cell, f"task.path={squad}").problems if "holds" in p.item]
    assert len(small) == 1 and "12 questions, fewer than pool_size=4,000" in small[0].item, small
    assert "task.pool_size=12" in small[0].fix
    answerable = [p for p in _problems(offline, *cell, f"task.path={squad}", "task.options.answerable_only=true",
                                       "task.pool_size=10").problems if "holds" in p.item]
    assert len(answerable) == 1 and "9 answerable questions, fewer than pool_size=10" in answerable[0].item
    assert not _problems(offline, *cell, f"task.path={squad}", "task.pool_size=12").problems
    assert not _problems(offline, *cell, f"task.path={squad.parent / 'squad_v2'}", "task.pool_size=9").problems
