"""bench_defs/dagster.yaml: a Dagster instance loads it, and it limits benchmark runs to one per
device tag; benchmark_job carries that tag by default."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from bench_defs.definitions import defs
from bench_defs.specs import DEVICE_TAG
from tests.helpers import REPO


def test_instance_config_limits_one_run_per_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(REPO / "bench_defs" / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    instance = dg.DagsterInstance.get()
    try:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None
        assert queue.tag_concurrency_limits == [
            {"key": DEVICE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
        ]
    finally:
        instance.dispose()


def test_benchmark_job_runs_are_tagged_with_a_device() -> None:
    assert defs.resolve_job_def("benchmark_job").tags[DEVICE_TAG] == "cpu"


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
