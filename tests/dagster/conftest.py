"""Fixtures of the Dagster tests: tiny spec files in a temporary specs folder, a temporary
Dagster instance, and the code location's definitions pointed at both."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from bench_defs.definitions import build_definitions
from bench_defs.resources import CollobenchResource, GroupPipesClient, WarehouseResource
from tests.helpers import REPO


def tiny_spec(name: str = "tiny", **extra: Any) -> dict[str, Any]:
    """One sleep stage at 100 q/s for 1 s, no warm-up, solo only: a run takes a few seconds.
    Host samples every 200 ms, so a loaded CI machine does not open a 3-period gap."""
    return {
        "name": name,
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 200}},
        "pipelines": [
            {
                "name": "p",
                "loadgen": {
                    "type": "server",
                    "rate": 100,
                    "duration_s": 1,
                    "warmup_queries": 0,
                    "timeout_s": 30,
                },
                "stages": [{"id": "s", "type": "sleep", "config": {"ms": 1}}],
            }
        ],
        **extra,
    }


def write_spec(folder: Path, stem: str, document: dict[str, Any] | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.yaml"
    text = document if isinstance(document, str) else yaml.safe_dump(document, sort_keys=False)
    path.write_text(text)
    return path


@pytest.fixture
def specs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The COLLOBENCH_HOME the conftest's autouse fixture set for this test."""
    return Path(os.environ["COLLOBENCH_HOME"])


@pytest.fixture
def resources(home: Path, specs_dir: Path) -> dict[str, Any]:
    return {
        "collobench": CollobenchResource(home=str(home), specs_dir=str(specs_dir)),
        "duckdb_warehouse": WarehouseResource(path=str(home / "results.duckdb")),
        "pipes_client": GroupPipesClient(termination_grace_s=10),
    }


@pytest.fixture
def defs(resources: dict[str, Any]) -> dg.Definitions:
    return build_definitions(resources)


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    folder = tmp_path / "dagster"
    folder.mkdir()
    with dg.instance_for_test(temp_dir=str(folder)) as instance:
        yield instance


def prompts_spec(name: str = "tiny") -> dict[str, Any]:
    """The tiny spec with a `dataset.prompts` stage in front: it uses the `prompts` artefact
    (the cheapest builder, well under a second), so the demo has an artefact to materialise."""
    spec = tiny_spec(name)
    spec["pipelines"][0]["stages"] = [
        {"id": "d", "type": "dataset.prompts", "outputs": ["s"]},
        {"id": "s", "type": "sleep", "config": {"ms": 1}},
    ]
    return spec


@dataclass(frozen=True)
class DemoRun:
    """`python -m bench_defs.demo --partition tiny` as `make demo` runs it, done once per
    session (the tests that only read its instance and files share it)."""

    home: Path
    specs_dir: Path
    dagster_home: Path
    completed: subprocess.CompletedProcess[str]

    def env(self) -> dict[str, str]:
        """What a process reading this demo needs (dagster dev, the UI)."""
        return {
            "COLLOBENCH_HOME": str(self.home),
            "COLLOBENCH_SPECS_DIR": str(self.specs_dir),
            "COLLOBENCH_MLFLOW": "0",
        }


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    base = tmp_path_factory.mktemp("demo")
    home, specs_dir = base / "home", base / "specs"
    write_spec(specs_dir, "tiny", prompts_spec())
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    run = DemoRun(home, specs_dir, home / "dagster", subprocess.CompletedProcess([], 0))
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
    return DemoRun(home, specs_dir, home / "dagster", completed)


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
