"""Fixtures of the Dagster tests: the per-test ones from tests/dagster/fixtures.py (also used by
the reliability tests), the session's demo run, and the defs-state cleanup after each test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.dagster.demo_run import DemoRun
from tests.dagster.fixtures import (  # noqa: F401 - registers them for tests/dagster
    defs,
    home,
    instance,
    resources,
    specs_dir,
)
from tests.dagster.specs import prompts_spec, write_spec
from tests.helpers import REPO


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    base = tmp_path_factory.mktemp("demo")
    demo_home, demo_specs = base / "home", base / "specs"
    write_spec(demo_specs, "tiny", prompts_spec())
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    run = DemoRun(demo_home, demo_specs, demo_home / "dagster", subprocess.CompletedProcess([], 0))
    env |= run.env() | {"PYTHONPATH": str(REPO)}
    completed = subprocess.run(
        [sys.executable, "-m", "bench_defs.demo", "--partition", "tiny"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        start_new_session=True,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return DemoRun(demo_home, demo_specs, demo_home / "dagster", completed)


@pytest.fixture(autouse=True)
def _forget_disposed_instances() -> Iterator[None]:
    """After each test, clear Dagster's current defs-state storage (a context variable a
    DagsterInstance sets while it lives): one test's disposed instance can stay current,
    and the next `Definitions.get_repository_def()` then fails with "Attempted to resolve
    undefined DagsterInstance weakref" (seen with test_sensor and test_schedule run before
    test_definitions). Private Dagster API, test-only."""
    yield
    from dagster._core.storage.defs_state.base import _current_storage

    _current_storage.set(None)
