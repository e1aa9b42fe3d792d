"""Refused means nothing written: a method the model cannot take, a data file in a wrong format, or a refusal that only
a job can see is one line on stderr, exit code 2, and no run folder (docs/planning.md "Preflight")."""
from __future__ import annotations

import json

import pytest

from runner.harness import NO_GPU, run_cli

pytestmark = pytest.mark.slow


def _refused(done, tmp_path) -> str:
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("palrp-bench: error:"), done.stderr
    assert not (tmp_path / "runs").exists(), sorted(p.name for p in tmp_path.iterdir())
    return lines[0]


def test_a_method_the_model_cannot_take_is_refused_before_it_loads(tmp_path):
    """tiny_vit's learned position embedding is a single sink; the twin's positional kind is known from the config."""
    done = run_cli("model=tiny_vit", "task=synthetic_shapes", "method=pa_lrp_no_multisink", "runner.devices=[cpu]",
                   cwd=tmp_path, env=NO_GPU)
    line = _refused(done, tmp_path)
    assert "has a single sink" in line and "use pa_lrp" in line and "loading model" not in done.stderr


def test_a_file_lacking_a_column_is_refused_before_the_model_loads(tmp_path):
    (tmp_path / "wiki.jsonl").write_text(json.dumps({"text": "Anarchism is a political philosophy."}) + "\n")
    done = run_cli("model=tiny_llama_causal", "task=wikipedia", "task.path=wiki.jsonl", "method=attnlrp",
                   "runner.devices=[cpu]", cwd=tmp_path, env=NO_GPU)
    assert "lacks the columns ['id']" in _refused(done, tmp_path) and "loading model" not in done.stderr


def test_a_refusal_inside_a_job_leaves_no_run_folder(tmp_path):
    """What only the loader sees (here the self-test's pool of 0 samples) stops the run after it started (its log
    lines are printed) but before a sample is stored: the run folder it created goes too."""
    done = run_cli("model=selftest", "task=selftest", "method=pa_lrp", "task.options.n=0", "runner.devices=[cpu]",
                   cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("palrp-bench: error:")]
    assert len(errors) == 1 and "task.options.n must be >= 1" in errors[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()
