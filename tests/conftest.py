"""Shared pytest setup: deterministic, single-threaded-friendly, offline."""
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# tiny models: one thread is several times faster than two fighting over small matmuls (and CI has 2 cores)
os.environ.setdefault("OMP_NUM_THREADS", "1")
# the user cache (selection flags, remembered batch sizes) of this test session only, shared by its CLI children
os.environ["PALRP_CACHE_DIR"] = tempfile.mkdtemp(prefix="palrp-test-cache-")
# torch.compile's on-disk kernels of this test session only: inductor's cache reuses CPU kernels across
# ATEN_CPU_CAPABILITY settings (torch 2.14: an AVX-512 kernel reused under avx2 answered wrong numbers, an avx2 one
# reused natively corrupted the heap), and `make test` runs the suite under three of them (docs/engine.md)
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="palrp-test-inductor-")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

DATA = TESTS / "data"
OFFICIAL = DATA / "official"


def pytest_runtest_setup(item):
    """``@pytest.mark.cuda`` tests (pyproject.toml markers) need a CUDA device: skipped, with the reason, where none
    is visible. Users run on GPUs, so no other test may assume there is none."""
    if item.get_closest_marker("cuda") is not None and not torch.cuda.is_available():
        import pytest

        pytest.skip("needs a CUDA device: none is visible here (torch.cuda.is_available() is False)")
