"""A tiny run with cached explanations that the HTML report tests share (text: the tiny LLaMA classifier with
AttnLRP, PE only and PA-LRP; vision: the tiny ViT with AttnLRP and PA-LRP). Built once per test session, also under
pytest-xdist: the first worker builds it under a file lock in the session's shared temporary folder, the others
reuse it. Test modules import the fixture: ``from report.html_fixture import html_run``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

#: (model, task, method, samples) of the shared run, in the order the cells are run
CELLS = [("tiny_llama_cls", "synthetic_sentiment", m, 4) for m in ("attnlrp", "pe_only", "pa_lrp")] + \
        [("tiny_vit", "synthetic_shapes", m, 3) for m in ("attnlrp", "pa_lrp")]


def _build(run_dir: Path) -> dict:
    from palrp_bench.app import run
    from runner.harness import compose_cfg

    facts = {}
    for k, (model, task, method, n) in enumerate(CELLS):
        last = k == len(CELLS) - 1  # every run writes report.html unless runner.html=false: only the last one here
        cfg = compose_cfg(run_dir, f"model={model}", f"task={task}", f"method={method}", f"runner.max_samples={n}",
                          "runner.quiet=true", "runner.devices=[cpu]", f"runner.html={str(last).lower()}",
                          "report.n_boot=200")
        with open(Path(run_dir).parent / "run.out", "a") as out:
            run(cfg, out=out)
        if not last:
            facts["html_before_last_run"] = (Path(run_dir) / "report.html").exists()
    return facts


@pytest.fixture(scope="session")
def html_run(tmp_path_factory, worker_id):
    """``(run_dir, facts)`` of the shared run (module docstring)."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    folder = root / "html_report_run"
    with FileLock(str(root / "html_report_run.lock")):
        done = folder / "facts.json"
        if not done.is_file():
            folder.mkdir(exist_ok=True)
            facts = _build(folder / "run")
            done.write_text(json.dumps(facts))
    return folder / "run", json.loads(done.read_text())
