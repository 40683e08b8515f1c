"""The instance configuration `make demo` and `make ui` write (bench_defs.core.pools): a Dagster
instance loads it, and it limits runs per device pool (no pools file: the pool `local`, one run
at a time); a user's own file keeps everything but the limits; benchmark_job carries the pool."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from bench_defs.core.pools import (
    OLD_DEVICE_TAG,
    POOL_TAG,
    POOLS_FILE_ENV,
    QUEUE_TAG,
    load_pools,
    write_instance_config,
)
from bench_defs.definitions import defs
from tests.helpers import REPO

TWO_POOLS = {
    "pools": [
        {"name": "host-a", "queue": "host-a", "host": "host-a", "devices": 1},
        {"name": "h100", "queue": "host-b", "host": "host-b", "devices": 4},
    ]
}


def run_limits(folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The run queue's tag limits of the instance in `folder`, as Dagster reads them."""
    monkeypatch.setenv("DAGSTER_HOME", str(folder))
    instance = dg.DagsterInstance.get()
    try:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None
        return list(queue.tag_concurrency_limits)
    finally:
        instance.dispose()


def test_the_template_limits_the_local_pool_to_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "bench_defs" / "dagster.yaml", tmp_path / "dagster.yaml")
    assert run_limits(tmp_path, monkeypatch) == [{"key": POOL_TAG, "value": "local", "limit": 1}]
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:  # not Dagster's 5 s
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # type: ignore[attr-defined]
    # written without a pools file, it is the template itself (comments kept)
    written = write_instance_config(tmp_path / "home")
    assert written.read_text() == (REPO / "bench_defs" / "dagster.yaml").read_text()


@pytest.mark.spawns
def test_one_limit_per_pool_of_the_pools_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools_file = tmp_path / "pools.yaml"
    pools_file.write_text(yaml.safe_dump(TWO_POOLS))
    monkeypatch.setenv(POOLS_FILE_ENV, str(pools_file))
    completed = subprocess.run(
        [sys.executable, "-m", "bench_defs.core.pools", "--write-instance", str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "h100: queue host-b, host host-b, 4 at once" in completed.stdout
    assert run_limits(tmp_path / "home", monkeypatch) == [
        {"key": POOL_TAG, "value": "host-a", "limit": 1},
        {"key": POOL_TAG, "value": "h100", "limit": 4},
    ]


def test_a_users_file_keeps_its_settings_and_loses_the_per_device_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    per_device = {"key": OLD_DEVICE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    own = {
        "telemetry": {"enabled": False},
        "run_monitoring": {"enabled": True, "max_resume_run_attempts": 0},
        "concurrency": {
            "runs": {
                "max_concurrent_runs": 8,
                "tag_concurrency_limits": [
                    per_device,
                    {"key": "team", "value": "vision", "limit": 2},
                ],
            }
        },
    }
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(own))
    pools = load_pools(tmp_path / "none.yaml")
    written = yaml.safe_load(write_instance_config(tmp_path, pools).read_text())
    assert written["run_monitoring"] == own["run_monitoring"]
    assert written["concurrency"]["runs"]["max_concurrent_runs"] == 8
    assert run_limits(tmp_path, monkeypatch) == [
        {"key": "team", "value": "vision", "limit": 2},
        {"key": POOL_TAG, "value": "local", "limit": 1},
    ]
    before = (tmp_path / "dagster.yaml").stat().st_mtime_ns
    write_instance_config(tmp_path, pools)  # nothing changed: not rewritten
    assert (tmp_path / "dagster.yaml").stat().st_mtime_ns == before


def test_benchmark_job_runs_carry_the_first_pool() -> None:
    tags = defs.resolve_job_def("benchmark_job").tags
    assert tags[POOL_TAG] == "local" and tags[QUEUE_TAG] == "dagster"
    assert OLD_DEVICE_TAG not in tags


def test_instance_config_turns_off_telemetry_and_the_onboarding_dialog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "bench_defs" / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    instance = dg.DagsterInstance.get()
    try:
        assert not instance.telemetry_enabled
        assert not instance.nux_enabled
    finally:
        instance.dispose()
