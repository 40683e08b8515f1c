# The two commands a newcomer needs: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export COLLOBENCH_HOME ?= $(CURDIR)/.collobench
export DAGSTER_HOME ?= $(COLLOBENCH_HOME)/dagster
CODE := stages analysis bench_defs tests perf

.PHONY: install demo test lint typecheck unit perf soak gpu-check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch/torchvision are pinned in pyproject: pip takes the builds on this disk, never a newer CUDA build.
	$(BIN)/python -m pip install --disable-pip-version-check -qq -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	mkdir -p $(DAGSTER_HOME) && touch $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/collobench validate specs/*.yaml
	$(BIN)/collobench run specs/demo.yaml

lint: install
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check $(CODE)

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/python -m pytest -q

test: lint typecheck unit

perf: install
	$(BIN)/python -m pip install --disable-pip-version-check -qq -e '.[perf]'
	$(BIN)/python perf/stage_overhead.py
	$(BIN)/python perf/loadgen_accuracy.py
	$(BIN)/python perf/sampler_cost.py
	$(BIN)/python perf/launch.py
	$(BIN)/python perf/profiling_cost.py
	$(BIN)/python perf/fidelity.py
	$(BIN)/python perf/analysis_speed.py

soak: install
	$(BIN)/python perf/stage_overhead.py --soak

# On a machine with an NVIDIA GPU: NVML, CUDA sync and placement, the GPU sampler, MPS, and the
# model specs on cuda; one line per check and a JSON line (also to $$GPU_CHECK_OUT when set).
# Without a GPU every check is "skip" and it exits 0.
gpu-check: install
	$(BIN)/python perf/gpu_check.py

clean:
	rm -rf $(VENV) .collobench .pytest_cache .mypy_cache .ruff_cache
