# kubetrain developer tasks. `make demo` and `make test` are the README's two commands: they install
# everything they need (virtualenv, torch, hadolint, the Go-built control plane) and cache it.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= runtime,examples,dev
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`: each test module runs on one worker, and the real-node and kind modules
# run together on one (tests/testenv/workers.py, docs/testenv.md). PYTEST_WORKERS=1 runs it in one process.
PYTEST_WORKERS ?= 2
WORKER_ARGS := $(if $(filter 1,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder)
# `make test-stress`: the timing-sensitive modules, with a busy loop on every CPU beside them.
STRESS_TESTS ?= tests/e2e tests/controller tests/queues/test_restarts.py tests/local/test_hang_local.py \
                tests/local/test_local_endings.py
STRESS_BURNERS ?= $(shell nproc)
# Bytecode is compiled when first imported and kept in the virtualenv, for every process make starts (tests,
# torchrun's workers, `make demo`), even where PYTHONDONTWRITEBYTECODE=1 is set: without cached bytecode every
# torch process compiles torch again. Compiling all of site-packages at install (uv --compile-bytecode) cost
# 20 s of each fresh clone's `make test` (80 s on a busy machine) for modules that are mostly never imported.
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(abspath $(VENV))/pycache

.PHONY: install demo testenv test test-stress test-fast e2e lint bench gpu-check clean

install: $(STAMP)

# uv (from PyPI) installs what pip would, but keeps unpacked wheels in its cache (~/.cache/uv) and hardlinks
# them: a fresh virtualenv with torch's 6 GB takes seconds instead of pip's ~2 min of download and unpacking.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python --upgrade-package pip -e '.[$(EXTRAS)]' pip
	@touch $(STAMP)

## The main job: the built-in digits example, 2 nodes x 1 process, on this machine.
demo: install
	$(BIN)/kubetrain run -f examples/digits/kubetrain.yaml

## Build (first time) or reuse (cached) the Kubernetes control plane binaries for the tests.
testenv: install
	bash tests/testenv/prepare.sh
	bash tests/testenv/prepare-browser.sh

## The whole suite: renderer, CLI, runtime (real DDP), and the real control plane.
test: install testenv
	$(BIN)/python -m pytest $(WORKER_ARGS) $(PYTEST_ARGS)

## The timing-sensitive modules under CPU starvation: a wait sized to this machine fails here (not in `make test`).
test-stress: install testenv
	$(BIN)/python -m pytest --cpu-burners $(STRESS_BURNERS) $(STRESS_TESTS) $(PYTEST_ARGS)

## Only the end-to-end scenarios on the test cluster's real kubelet node (part of `make test`; needs root).
e2e: install testenv
	$(BIN)/python -m pytest tests/e2e $(PYTEST_ARGS)

## Everything that needs neither torch nor the control plane.
test-fast: install
	$(BIN)/python -m pytest -m "not controlplane and not torch" $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check kubetrain tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_shell_scripts.py

bench: install
	$(BIN)/python benchmarks/bench_cli.py
	@for b in benchmarks/bench_*.py; do [ "$$b" = benchmarks/bench_cli.py ] || $(BIN)/python $$b; done

## What only a real NVIDIA GPU can tell (docs/gpu.md); not part of `make test`. Without a GPU: one line, exit 1.
## Uses .venv when there is one, else $(PYTHON) (a GPU machine's own Python with kubetrain installed).
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
gpu-check:
	$(GPU_PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis dist build
