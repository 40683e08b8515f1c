"""Shared fixtures; test-only stage types live in `tests.helpers` (imported here to register).
In a check session (`make check`) a test not marked `spawns` may start no process
(`tests.spawn_guard`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import pytest

import tests.helpers  # noqa: F401 - registers the test stage types
from tests.noop_run import NoopCollocatedRun, run_noop_collocated

# The `spawns` marker's guard in a check session (`make check`).
pytest_plugins = ("tests.spawn_guard",)

# The checkout's pools file (`.collobench/cluster/pools.yaml`, which `make cluster` writes) must
# not decide the pools the tests see, not even in the job tags fixed when bench_defs loads: no
# pools file (os.devnull is no regular file), so the implicit pool `local`. A test of its own
# pools sets $COLLOBENCH_POOLS_FILE itself (bench_defs/core/pools.py).
os.environ["COLLOBENCH_POOLS_FILE"] = os.devnull

# A session started in the background (`pytest &` in a script, nohup) inherits SIGINT ignored,
# and Dagster's in-process execution (dg.materialize) gives SIGTERM SIGINT's handler and leaves
# it so. An ignored signal survives exec, so every process a later test starts would ignore
# SIGTERM: each stop waits out its grace (10-30 s) and a test that ends a service with SIGTERM
# fails. Python's own SIGINT handler, as in a foreground session, is reset at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test writes under its own COLLOBENCH_HOME, never the developer's."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("COLLOBENCH_HOME", str(home))
    monkeypatch.delenv("COLLOBENCH_RESULTS_DIR", raising=False)  # results in that home too
    monkeypatch.setenv("COLLOBENCH_MLFLOW", os.environ.get("COLLOBENCH_TEST_MLFLOW", "0"))


@pytest.fixture(scope="session")
def noop_collocated_run(tmp_path_factory: pytest.TempPathFactory) -> NoopCollocatedRun:
    """One `collobench run specs/noop_collocated.yaml` for the whole session (tests/noop_run.py);
    its users only read it. Its COLLOBENCH_HOME is its own, under the session's temporary folder
    (the autouse `_isolated_home` is per test), so the orphan check below still covers it."""
    return run_noop_collocated(tmp_path_factory.mktemp("noop_collocated"))


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After the whole session, no process started by a test (they all carry a COLLOBENCH_HOME
    under this session's temporary folder) may still be running."""
    yield
    import psutil

    base = str(tmp_path_factory.getbasetemp())
    deadline = time.monotonic() + 10
    while True:
        leftovers = []
        for process in psutil.process_iter(["pid", "ppid", "cmdline"]):
            command = " ".join(process.info["cmdline"] or [])
            if process.info["ppid"] == os.getpid() and "resource_tracker" in command:
                continue  # this pytest process's own tracker; it ends with pytest
            with contextlib.suppress(psutil.Error):
                if process.environ().get("COLLOBENCH_HOME", "").startswith(base):
                    leftovers.append(process)
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not leftovers, [" ".join(p.info["cmdline"] or [])[:120] for p in leftovers]
