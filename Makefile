# palrp-bench: every target creates/reuses the virtualenv $(VENV) first.
VENV ?= .venv
PYTHON ?= python3
# torch comes first so pip never pulls a different build; override on GPU machines, e.g.
#   make setup TORCH_SPEC="torch torchvision --index-url <your wheel index>"
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
PY := $(VENV)/bin/python
STAMP := $(VENV)/.palrp-installed

.PHONY: setup test demo smoke report table1 table2 table3 table4 table5 appendix_f attnlrp_table1 evidence_table1 bench gpu-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[quant,slurm,dev]"
	touch $(STAMP)

# The numerics-sensitive tests run again with PyTorch's AVX2 kernels and with its baseline (no SIMD) kernels, so a
# tolerance that holds only with this machine's kernels fails here instead of on a user's CPU (tolerances come from
# float32/float64 rounding; nothing is compared bitwise against values saved on one machine).
NUMERIC_TESTS := tests/lrp tests/methods tests/models tests/evaluation tests/metrics tests/attributors
# pytest-xdist processes (each test runs single-threaded: tests/conftest.py); 0 runs everything in this process
PYTEST_WORKERS ?= 2

test: setup
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) tests
	ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest -q -n $(PYTEST_WORKERS) -p no:cacheprovider $(NUMERIC_TESTS)
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q -n $(PYTEST_WORKERS) -p no:cacheprovider $(NUMERIC_TESTS)

demo: setup
	$(VENV)/bin/palrp-bench

# tests + the embedded experiment
smoke: test demo

# RUN: run directories / results.csv files (default: the newest run under runs/)
RUN ?=
report: setup
	$(VENV)/bin/palrp-bench-report $(RUN)

# Real reproductions (GPU + data); on a machine without them they stop at once listing what is missing.
# attnlrp_table1: the AttnLRP paper's Table 1 with every baseline (docs/baselines.md).
# evidence_table1: the decomposition-attribution paper's Table 1, PG / MRR / RMA / PTA on sva, ra, qa (docs/evidence.md;
# one task at a time where the data is local, e.g. ARGS="task=sva task.path=<file>"; docs/evidence.md "Real data").
# ARGS: extra overrides, e.g. make table1 ARGS="model=tinyllama model.source=/ckpt/tinyllama_imdb"
ARGS ?=
table1 table2 table3 table4 table5 appendix_f attnlrp_table1 evidence_table1: setup
	$(VENV)/bin/palrp-bench experiment=$@ $(ARGS)

bench: setup
	$(PY) scripts/bench_attribution.py

# One check of a CUDA machine: the suite (as `make test`, on all cores), calibration, a 20-sample rehearsal of every
# target and the bench, one summary table, everything under gpu_check/<stamp>/ (docs/rehearsal.md "GPU check");
# ARGS="--quick": the suite and one target per paper table in about 8 minutes. Without a GPU it stops at once
# (exit 2); CPU dry runs: make gpu-check ARGS="--device cpu --samples 2 --targets deit_tiny_imagenet_seg
# --skip suite,bench", make gpu-check ARGS="--quick --device cpu --targets deit_tiny_imagenet_seg --tests tests/bench"
gpu-check: setup
	$(PY) scripts/gpu_check.py $(ARGS)

clean:
	rm -rf outputs multirun .pytest_cache
