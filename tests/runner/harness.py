"""Helpers shared by the harness tests (tests/runner, tests/cli, tests/report): compose a config as the CLI
would, run the CLI in a subprocess, read a run's tidy results."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from hydra import compose, initialize_config_dir

from palrp_bench.catalog import CONFIG_DIR
from palrp_bench.schema import register_schemas

REPO = Path(__file__).resolve().parents[2]


def compose_cfg(run_dir: Path, *overrides: str):
    """The config ``palrp-bench run_dir=<run_dir> <overrides>`` would run with."""
    register_schemas()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=[f"run_dir={run_dir}", *overrides])


#: added to a CLI child's environment where a test's point is a machine without a GPU: CUDA then sees no device
#: (users run on GPUs, so a test never assumes there is none; a test about CPU behaviour pins runner.devices=[cpu])
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def cli_env(extra: dict | None = None) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return {**env, **(extra or {})}


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "palrp_bench.cli", *args]


def run_cli(*args: str, cwd: Path, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``palrp-bench <args>`` to completion and capture its output; ``env`` adds variables (e.g. ``NO_GPU``)."""
    return subprocess.run(cli_command(*args), cwd=cwd, env=cli_env(env), capture_output=True, text=True,
                          timeout=timeout)


def fake_cuda_devices(monkeypatch, n: int) -> None:
    """Make device discovery (``runner.devices``) see ``n`` CUDA devices in this process, present or absent."""
    from palrp_bench.runner import devices

    monkeypatch.setattr(devices, "cuda_device_count", lambda: n)


def read_results(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(Path(run_dir) / "results.csv", dtype={"variant": str, "sample_id": str})


def per_sample_values(df: pd.DataFrame) -> pd.Series:
    """``value`` indexed by (method, sample_id, metric, variant, step) -- what must not depend on sharding."""
    key = ["method", "sample_id", "metric", "variant", "step"]
    return df.assign(step=df["step"].fillna(-1.0)).set_index(key)["value"].sort_index()


def light_import_preamble() -> str:
    """Python code that makes ``palrp_bench.runner.*`` importable in a child process WITHOUT running
    ``palrp_bench/__init__.py`` (which imports torch): keeps subprocess tests of pure-Python modules fast."""
    pkg = REPO / "palrp_bench"
    return ("import sys, types\n"
            f"_pkg = types.ModuleType('palrp_bench'); _pkg.__path__ = [{str(pkg)!r}]\n"
            "sys.modules['palrp_bench'] = _pkg\n")
