# The two commands a newcomer needs: `make demo` and `make test`. Both create .venv on first use;
# `make test` also installs the Debian packages its tests drive (system-packages).
# `make check` is the contributor's quick loop: ruff, mypy and the quick tests (see unit-quick).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export COLLOBENCH_HOME ?= $(CURDIR)/.collobench
export DAGSTER_HOME ?= $(COLLOBENCH_HOME)/dagster
CODE := stages analysis bench_defs tests perf
# Let Python cache bytecode (and pytest its assertion-rewritten test modules) under __pycache__/
# even where the machine sets PYTHONDONTWRITEBYTECODE: otherwise every pytest session rewrites
# its 300 test modules anew (10 s of `make check`'s collection) and every process a test starts
# compiles collobench's own modules again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install system-packages demo ui cluster cluster-down test check lint typecheck unit unit-quick \
	unit-parallel unit-serial \
	perf perf-studies soak gpu-check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch/torchvision are pinned in pyproject: pip takes the builds on this disk, never a newer CUDA build.
	# `.[test]` includes `transformers[serving]` (the tests start `transformers serve`): no other torch.
	# Byte-compiled ahead: with PYTHONDONTWRITEBYTECODE set (as on these machines) nothing else
	# would, and every process of the suite would compile torch and Dagster anew. compileall on
	# every core instead of pip's one (a file some package ships unparsable is skipped, as pip does).
	$(BIN)/python -m pip install --disable-pip-version-check --no-compile -qq -e '.[test]'
	-$(BIN)/python -m compileall -qq -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
	touch $(STAMP)

# The commit-msg hook (.githooks/commit-msg: subjects of at most 72 characters, then a blank
# line); only inside a git checkout, and only where no other hooks path is set.
install: $(STAMP)
	@if git rev-parse --git-dir >/dev/null 2>&1 && [ -z "$$(git config core.hooksPath)" ]; then \
	  git config core.hooksPath .githooks; fi

# Debian packages the tests drive: chromium, headless (tests/dagster/test_ui_browser.py), and
# redis-server with PostgreSQL 15 (/usr/lib/postgresql/15/bin; the scale-out tests in
# tests/dagster/test_cluster.py). Only what is missing is installed, with sudo when not root;
# a failed install stops `make test` here (the tests may not skip for want of them).
SYSTEM_SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
system-packages:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	test -x /usr/lib/postgresql/15/bin/postgres || missing="$$missing postgresql-15"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SYSTEM_SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SYSTEM_SUDO) apt-get install -y -qq $$missing && \
	  command -v chromium >/dev/null && command -v redis-server >/dev/null && \
	  test -x /usr/lib/postgresql/15/bin/postgres; \
	fi

# The demo through Dagster: installs bench_defs/dagster.yaml into $(DAGSTER_HOME), materialises
# the demo spec's artefacts, then benchmark_run, warehouse and the reports of partition `demo`
# on that instance (bench_defs/demo.py); `make ui` then shows them.
demo: install
	$(BIN)/collobench validate specs/*.yaml
	$(BIN)/python -m bench_defs.demo

# The Dagster UI on the instance `make demo` wrote (loopback only); its dagster.yaml gets one run
# limit per device pool of the pools file (none: the pool `local`, one run at a time).
ui: install
	$(BIN)/python -m bench_defs.core.pools --write-instance $(DAGSTER_HOME)
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# A multi-process Dagster instance on Postgres with two Celery worker hosts (host-a, host-b),
# under $(COLLOBENCH_HOME)/cluster (bench_defs/cluster/): Postgres on a unix socket, Redis,
# code server, webserver, daemon, the workers (and one on the default queue for untagged runs).
# Needs Debian's redis-server and PostgreSQL (/usr/lib/postgresql/15/bin). `make cluster-down`
# stops every process by group.
cluster: install
	$(BIN)/python -m pip install --disable-pip-version-check -qq -e '.[cluster]'
	$(BIN)/python -m bench_defs.cluster up --workers 2 --default-worker
	$(BIN)/python -m bench_defs.cluster status

cluster-down:
	$(BIN)/python -m bench_defs.cluster down

lint: install
	$(BIN)/ruff check $(CODE)
	$(BIN)/ruff format --check $(CODE)

typecheck: install
	$(BIN)/mypy

# Every test, in two sessions. First all but the `serial` ones on both cores (pytest-xdist; a
# module's tests stay together, so a module's server or cluster starts once), with mypy beside
# them for its first minute: the tests that start processes mostly wait on them, and every
# timing assertion holds on a machine twice as slow (its margin is written beside it). Then the `serial` ones, one at a time: they time CPU work against a calibration.
# The slowest are listed, to keep `make test` under 17 min here.
unit: unit-parallel unit-serial

unit-parallel: install
	COLLOBENCH_CHECK=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile \
		-m "not serial and not soak" --durations=30

unit-serial: install
	$(BIN)/python -m pytest -q -m "serial and not soak" --durations=10

test: system-packages lint
	$(MAKE) --no-print-directory -j 2 typecheck unit-parallel
	$(MAKE) --no-print-directory unit-serial

# The quick loop's tests: those not marked `spawns` (no subprocess, process pool, server, dagster
# dev or browser; in-process Dagster stays), nor `slow` (over a few seconds each: the seeded
# simulations, warehouse migrations, the hostile-input suite), nor `serial` (they time CPU work
# and would share a core here), on both cores (pytest-xdist; a module's tests stay together).
# `make test` runs all of them. COLLOBENCH_CHECK=1 makes tests/spawn_guard.py fail a test that
# starts a process without the marker, so the selection cannot rot. Under 2 minutes with
# ruff and mypy (their caches warm) on 2 cores.
unit-quick: install
	COLLOBENCH_CHECK=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile \
		-m "not spawns and not serial and not slow and not soak" --durations=10

check: lint typecheck unit-quick

# The regression benchmarks of perf/, one JSON line each (their figures:
# README.md#performance-what-the-harness-does-to-stay-out-of-the-way and
# docs/design.md#the-figures-to-beat). perf.cluster_launch brings up its own cluster (needs
# redis-server and PostgreSQL; without them it prints a `skipped` line). perf.client_truth
# compares with AIPerf when an `aiperf` executable is on PATH (AIPERF=path/to/aiperf to name
# one); without it, collobench alone and a `skipped` key.
perf: install
	$(BIN)/python -m pip install --disable-pip-version-check -qq -e '.[perf,cluster]'
	$(BIN)/python -m perf.stage_overhead
	$(BIN)/python -m perf.stage_overhead --scheduling-policy batch
	$(BIN)/python -m perf.loadgen_accuracy
	$(BIN)/python -m perf.sampler_cost
	$(BIN)/python -m perf.launch
	$(BIN)/python -m perf.profiling_cost
	$(BIN)/python -m perf.fidelity
	$(BIN)/python -m perf.analysis_speed
	$(BIN)/python -m perf.capacity_search_cost
	$(BIN)/python -m perf.verdicts
	$(BIN)/python -m perf.http_client
	$(BIN)/python -m perf.client_truth --aiperf $(or $(AIPERF),aiperf)
	$(BIN)/python -m perf.cluster_launch

# The one-off studies of perf/studies/ (variants of the hot path's choices, the kernel hints,
# the default spec's fields, the hot path's parts), one JSON line each; not regression guards,
# rerun when the choice they weighed is revisited.
perf-studies: install
	$(BIN)/python -m perf.studies.issue_delay_rounds
	$(BIN)/python -m perf.studies.issue_delay_sources
	$(BIN)/python -m perf.studies.default_spec_issue_delay
	$(BIN)/python -m perf.studies.hot_path_costs

# The reliability suite with its long part (marker `soak`: 100 worker kills, ten runs through
# dagster dev and the CLI; the real-harness capacity region of two pinned pipelines) and the 1M-query runtime flatness run (python -m perf.stage_overhead --soak),
# summed up in one JSON line; exits 1 when pytest fails or a target is missed. Then perf.ab:
# 10 real A/A sessions of specs/ab_demo.yaml and 10 with 10% more stage work, through
# `collobench ab` (2-s segments), and 1,000 sessions resampled from their blocks (about an hour).
soak: install
	$(BIN)/python -m perf.soak
	$(BIN)/python -m perf.ab --aa-sessions 10 --change-sessions 10

# On a machine with an NVIDIA GPU: NVML, CUDA sync and placement, the GPU sampler, MPS, and the
# model specs on cuda; one line per check and a JSON line (also to $$GPU_CHECK_OUT when set).
# Without a GPU every check is "skip" and it exits 0. The acceptance check lives with the tests
# (tests/gpu/; tests/gpu/test_gpu_check.py runs it on the fake NVML and on a CPU-only machine).
gpu-check: install
	$(BIN)/python -m tests.gpu.gpu_check

clean:
	rm -rf $(VENV) .collobench .pytest_cache .mypy_cache .ruff_cache
