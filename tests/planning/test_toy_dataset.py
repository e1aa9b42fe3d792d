"""The worked example of docs/architecture.md ("How to add ... A dataset"), run as written: a dataset registered
outside the package is planned, preflighted and run without planning, the runner or the assets knowing it."""
from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from palrp_bench.app import describe_plan, run
from palrp_bench.data.registry import DATASETS
from palrp_bench.planning.preflight import run_preflight
from palrp_bench.runner.devices import resolve_devices
from palrp_bench.runner.plan import plan_cells, plan_jobs
from runner.harness import compose_cfg, read_results

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
REVIEWS = ["the film was superb and the music was brilliant", "the plot was okay but the pace was average",
           "a gripping story with a superb cast", "the script was decent and the ending fine",
           "this movie was a masterpiece", "the camera work was average and the dialogue okay"]


def _example(language: str, first_line: str) -> str:
    """The fenced block of docs/architecture.md that starts with ``first_line``."""
    for block in re.findall(rf"```{language}\n(.*?)```", ARCHITECTURE.read_text(), re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"docs/architecture.md has no {language} block starting with {first_line!r}")


@pytest.fixture
def reviews():
    """The example's module, executed as the package would import it; unregistered afterwards."""
    namespace: dict = {"__name__": "palrp_bench.data.reviews"}
    exec(compile(_example("python", "# palrp_bench/data/reviews.py"), "reviews.py", "exec"), namespace)
    yield DATASETS["reviews"]
    del DATASETS["reviews"]


def _cfg(tmp_path: Path, csv: Path):
    """``model=tiny_llama_cls task=reviews method=pa_lrp`` with the example's task YAML (not shipped: set in place of
    another task's)."""
    cfg = compose_cfg(tmp_path / "run", "model=tiny_llama_cls", "task=synthetic_sentiment", "method=pa_lrp",
                      "runner.devices=[cpu]", "runner.quiet=true", "report.n_boot=50")
    task = OmegaConf.load(io.StringIO(_example("yaml", "# palrp_bench/configs/task/reviews.yaml")))
    cfg.task = OmegaConf.merge(OmegaConf.structured(type(OmegaConf.to_object(cfg.task))),
                               {**OmegaConf.to_container(task), "path": str(csv), "pool_size": len(REVIEWS)})
    return cfg


def test_the_documented_dataset_is_planned_preflighted_and_run(tmp_path, reviews):
    csv = tmp_path / "reviews.csv"
    pd.DataFrame({"text": REVIEWS, "label": [0, 1, 0, 1, 0, 1]}).to_csv(csv, index=False)
    cfg = _cfg(tmp_path, csv)
    cells = plan_cells(cfg)
    assert [c.task.dataset for c in cells] == ["reviews"]
    devices = resolve_devices(["cpu"], n_cuda=0)
    assert run_preflight(cells, devices).problems == []
    plan, problems = describe_plan(cfg, cells, plan_jobs(cfg, cells, 1), devices, [])
    assert problems == []
    assert re.search(r"tiny_llama_cls\s+reviews\s+pa_lrp\s+6\s+0", plan), plan  # the pool: task.pool_size
    outcome = run(cfg, out=io.StringIO())
    results = read_results(outcome.run_dir)
    assert results["sample_id"].nunique() == len(REVIEWS) and set(results["task"]) == {"reviews"}
    assert {"ac", "mse", "correct"} <= set(results["metric"])


def test_the_documented_check_refuses_a_wrong_file_in_one_line(tmp_path, reviews):
    csv = tmp_path / "reviews.csv"
    csv.write_text("review,sentiment\ngreat,positive\n")
    cells = plan_cells(_cfg(tmp_path, csv))
    [problem] = run_preflight(cells, resolve_devices(["cpu"], n_cuda=0)).problems
    assert "not the columns text,label" in problem.item and "\n" not in problem.item + problem.fix
    assert not (tmp_path / "run").exists()
