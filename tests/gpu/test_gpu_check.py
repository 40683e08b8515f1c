"""`make gpu-check` (tests/gpu/gpu_check.py and its check modules): the CPU-only path skips
every check with the reason and exits 0; the NVML checks' logic against the fake NVML; the MPS
refusal through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stages.telemetry.fake_nvml import NVML_FI_DEV_POWER_INSTANT, FakeNvml
from stages.telemetry.nvml_backend import NvmlBackend
from tests.gpu import cli_checks, gpu_check, nvml_checks
from tests.helpers import REPO


def fake_backend(**device: Any) -> NvmlBackend:
    return NvmlBackend(FakeNvml({"devices": [{"name": "NVIDIA Fake H100", **device}]}))


@pytest.mark.spawns
def test_without_a_gpu_every_check_skips_and_exit_is_0(tmp_path: Path) -> None:
    backend, _ = gpu_check.open_backend()
    if backend is not None:
        backend.shutdown()
        pytest.skip("this machine has an NVIDIA GPU")
    out = tmp_path / "gpu_check.json"
    environment = {k: v for k, v in os.environ.items() if k != "COLLOBENCH_FAKE_NVML"}
    started = time.monotonic()
    child = subprocess.run(
        [sys.executable, "-m", "tests.gpu.gpu_check"],
        cwd=REPO,
        env={**environment, "GPU_CHECK_OUT": str(out), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert time.monotonic() - started < 20
    lines = child.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    assert json.loads(out.read_text()) == report
    names = [check["name"] for check in report["checks"]]
    assert names == [*gpu_check.CHECK_NAMES, *(f"spec.{n}" for n in gpu_check.MODEL_SPECS)]
    assert {check["status"] for check in report["checks"]} == {"skip"}
    assert all("no NVIDIA GPU here" in check["detail"] for check in report["checks"])
    assert report["ok"] is True and report["failed"] == []
    human = lines[: len(names)]
    assert all(line.startswith("skip") for line in human)
    assert lines[len(names)].startswith("no GPU checks ran: no NVIDIA GPU here")


def test_devices_and_power_from_nvml() -> None:
    backend = fake_backend(power_w=71.5)
    devices = nvml_checks.check_devices(backend)
    assert devices.status == "ok" and "NVIDIA Fake H100" in devices.detail
    power = nvml_checks.check_power(backend)
    assert power.status == "ok"
    assert power.figures == {"power_w": 71.5, "power_field": "instant"}
    assert nvml_checks.check_power(fake_backend(power_w=0.0)).status == "FAIL"


def test_energy_counter_agrees_with_the_power_integral_and_sees_our_pid() -> None:
    pid = os.getpid()
    backend = fake_backend(
        power_w=[[0.0, 60.0], [0.3, 300.0], [0.8, 60.0]],
        processes=[{"pid": pid, "sm_util_pct": 90.0}],
    )
    check, trace = nvml_checks.check_energy(backend, time.sleep, pad_s=0.3, load_s=0.5)
    assert check.status == "ok", check.detail
    assert abs(check.figures["difference"]) <= 0.10
    assert check.figures["load_w"] == 300.0 and check.figures["idle_w"] == 60.0
    assert nvml_checks.check_process_utilization(trace, pid).status == "ok"
    assert nvml_checks.check_process_utilization(trace, pid + 1).status == "FAIL"


def test_energy_check_fails_when_nothing_rises_and_skips_without_a_counter() -> None:
    flat, _ = nvml_checks.check_energy(
        fake_backend(power_w=60.0), time.sleep, pad_s=0.1, load_s=0.1
    )
    assert flat.status == "FAIL" and "did not rise" in flat.detail
    no_counter = fake_backend(not_supported=["nvmlDeviceGetTotalEnergyConsumption"])
    check, _ = nvml_checks.check_energy(no_counter, time.sleep, pad_s=0.05, load_s=0.05)
    assert check.status == "skip" and "no energy counter" in check.detail


def test_unsupported_process_utilization_is_reported_as_skip() -> None:
    backend = fake_backend(
        unsupported_fields=[NVML_FI_DEV_POWER_INSTANT],
        not_supported=["nvmlDeviceGetProcessUtilization"],
        power_w=[[0.0, 60.0], [0.1, 250.0], [0.3, 60.0]],
    )
    check, trace = nvml_checks.check_energy(backend, time.sleep, pad_s=0.1, load_s=0.2)
    assert check.figures["power_field"] == "average"
    utilization = nvml_checks.check_process_utilization(trace, os.getpid())
    assert utilization.status == "skip" and "unsupported" in utilization.detail


@pytest.mark.spawns
def test_mps_without_a_daemon_is_refused_by_placement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-mps"))
    check = cli_checks.check_mps(tmp_path)
    assert check.status == "ok", check.detail
    assert check.detail == "daemon not running, placement refuses as designed"
    assert check.figures == {"daemon": False, "exit_code": 2}


def test_a_missing_model_spec_is_skipped_by_name(tmp_path: Path) -> None:
    check = cli_checks.check_model_spec("no_such_spec", tmp_path, 1.0)
    assert (check.status, check.detail) == ("skip", "specs/no_such_spec.yaml does not exist yet")
