"""SamplerGroup: the start barrier waits for every sampler's first sample (real spawned ones)."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from stages.rundir.tables import read_table
from stages.spec.models import TelemetrySpec
from stages.telemetry.gpu_backend_factory import FAKE_NVML_ENV_VAR
from stages.telemetry.sampler_group import SamplerGroup

pytestmark = pytest.mark.spawns  # every test here starts a process


def test_wait_first_samples_returns_after_every_first_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One real host sampler, and a GPU sampler that finds no NVML driver and ends at once.
    script = tmp_path / "fake_nvml.json"
    script.write_text(json.dumps({"init_error": "NVMLError_DriverNotLoaded"}))
    monkeypatch.setenv(FAKE_NVML_ENV_VAR, str(script))
    telemetry = TelemetrySpec.model_validate({"host": {"period_ms": 50}, "gpu": {"period_ms": 50}})
    run_dir = tmp_path / "run"
    group = SamplerGroup(multiprocessing.get_context("spawn"), run_dir, "r1", telemetry, 1)
    group.start(0, "solo", {}, harness_pid=os.getpid())
    started_ns = time.monotonic_ns()
    try:
        # Spawning and importing take far longer than a millisecond: nobody has reported yet.
        too_early = group.wait_first_samples(0.001)
        warnings = group.wait_first_samples(60.0)
        returned_ns = time.monotonic_ns()
    finally:
        stop_warnings = group.stop()
    assert {w.split(": ")[0] for w in too_early} == {
        "collobench:host-sampler",
        "collobench:gpu0-sampler",
    }
    assert all("no first sample within 0.001 s" in w for w in too_early)
    # The GPU sampler ended without sampling: it counts as done, with a warning.
    assert len(warnings) == 1
    assert warnings[0].startswith("collobench:gpu0-sampler ended before the measured window")
    assert stop_warnings == []
    rows = read_table(run_dir, "host_samples").sort_by("ts_ns").to_pylist()
    first_ns = rows[0]["ts_ns"]
    # Without the wait, a window opened at `started_ns` would precede its first sample.
    assert started_ns < first_ns <= returned_ns
    harness = [r for r in rows if r["scope"] == "harness"]
    assert harness and {(r["pid"], r["pipeline"]) for r in harness} == {(os.getpid(), None)}
    assert len(harness) == sum(r["scope"] == "host" for r in rows)  # one per sample
