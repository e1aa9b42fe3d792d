"""Device resolution (one worker per device, CPU fallback) and the pre-run check of what is missing."""
import pytest

from palrp_bench.errors import BadInputError, MissingDataError
from palrp_bench.runner.devices import resolve_devices
from palrp_bench.runner.plan import plan_cells
from palrp_bench.runner.preflight import check_requirements, missing_requirements
from runner.harness import compose_cfg


def test_auto_uses_every_gpu_or_falls_back_to_cpu():
    assert resolve_devices(["auto"], n_cuda=0).devices == ("cpu",)
    assert resolve_devices(["auto"], n_cuda=0).cpu_by_fallback
    assert resolve_devices(["auto"], n_cuda=2).devices == ("cuda:0", "cuda:1")
    assert resolve_devices(["cuda"], n_cuda=3).n_workers == 3
    assert resolve_devices(["0", "cuda:1"], n_cuda=2).devices == ("cuda:0", "cuda:1")
    plan = resolve_devices(["cpu", "cpu"], n_cuda=0)
    assert plan.devices == ("cpu", "cpu") and not plan.cpu_by_fallback


@pytest.mark.parametrize("spec,match", [(["cuda"], "no CUDA device is visible"), (["cuda:1"], "only 1 CUDA"),
                                        (["tpu"], "unknown device"), ([], "empty")])
def test_impossible_devices_are_one_line_errors(spec, match):
    with pytest.raises(BadInputError, match=match) as err:
        resolve_devices(spec, n_cuda=1 if spec == ["cuda:1"] else 0)
    assert "\n" not in str(err.value)


def test_preflight_lists_everything_missing_for_table1(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = plan_cells(compose_cfg(tmp_path, "experiment=table1"))
    missing = [item for item, _ in missing_requirements(cells, resolve_devices(["auto"], n_cuda=0))]
    assert missing[0].startswith("a CUDA GPU")
    assert any("./checkpoints/llama2_7b_imdb " in m for m in missing)
    assert any("IMDB Dataset.csv" in m for m in missing)
    with pytest.raises(MissingDataError) as err:
        check_requirements(cells, resolve_devices(["auto"], n_cuda=0), "experiment table1")
    assert "\n" not in str(err.value) and "cannot run experiment table1: missing a CUDA GPU" in str(err.value)
    # an explicit CPU request is honoured; a GPU machine with the files has nothing missing
    for d in ("checkpoints/llama2_7b_imdb", "checkpoints/llama2_7b_imdb_4bit", "checkpoints/tinyllama_imdb",
              "data/imdb"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "data/imdb/IMDB Dataset.csv").write_text("review,sentiment\n")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert missing_requirements(cells, resolve_devices(["cpu"], n_cuda=0)) == []
    assert missing_requirements(cells, resolve_devices(["auto"], n_cuda=1)) == []


def test_preflight_offline_hub_models(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    cells = plan_cells(compose_cfg(tmp_path, "model=llama3_8b", "task=mcqa", "method=pa_lrp"))
    missing = [item for item, _ in missing_requirements(cells, resolve_devices(["cpu"], n_cuda=0))]
    assert missing == ["hub model meta-llama/Llama-3.1-8B-Instruct (llama3_8b)", "hub dataset allenai/ai2_arc (mcqa)"]
    (tmp_path / "hub/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/abc").mkdir(parents=True)
    missing = [item for item, _ in missing_requirements(cells, resolve_devices(["cpu"], n_cuda=0))]
    assert missing == ["hub dataset allenai/ai2_arc (mcqa)"]
