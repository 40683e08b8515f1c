"""The pre-flight on the device (issue 21): a foreign compute process on a GPU the run will use
refuses the run at once (manifest status `device_busy`, the process named, nothing measured,
exit 3); one on a GPU the run does not use stays a warning. The GPU is the fake NVML's, its
compute processes scripted; the host id (`COLLOBENCH_HOST_ID`) is the manifest's `host`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stages import settings
from stages.collocation.preflight import check_environment, gpus_used
from stages.validation.loading import validate_document
from tests.helpers import REPO, foreign_process, run, spec_doc


@pytest.fixture
def foreign() -> Iterator[int]:
    """The pid of a stranger's process on the GPU (tests.helpers.foreign_process)."""
    with foreign_process() as pid:
        yield pid


def script_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *pids: list[int]) -> None:
    """Fake GPUs, GPU i running the compute processes pids[i]."""
    devices = [
        {"uuid": f"GPU-fake-{i}", "processes": [{"pid": p, "used_memory_mib": 64} for p in ps]}
        for i, ps in enumerate(pids)
    ]
    script = tmp_path / "gpu.json"
    script.write_text(json.dumps({"devices": devices}))
    monkeypatch.setenv("COLLOBENCH_FAKE_NVML", str(script))


def one_pipeline(device: str) -> dict[str, Any]:
    doc = spec_doc({"type": "noop"})
    doc["pipelines"] = doc["pipelines"][1:]  # `survivor` alone
    doc["pipelines"][0]["device"] = device
    return doc


def test_host_id_is_the_env_else_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(settings.HOST_ID_ENV, raising=False)
    assert settings.host_id() == socket.gethostname()
    monkeypatch.setenv(settings.HOST_ID_ENV, "gpu-host-7")
    assert settings.host_id() == "gpu-host-7"


@pytest.mark.spawns
def test_the_manifest_records_the_host_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(settings.HOST_ID_ENV, "host-b")
    result = run(one_pipeline("cpu"), tmp_path)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert result.status == "ok" and manifest["host"] == "host-b"


def test_the_gpus_a_run_uses_are_its_pipelines_and_its_own_services(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")
    doc = one_pipeline("cuda:1")
    doc["pipelines"].append({**doc["pipelines"][0], "name": "other", "device": "cuda"})
    doc["pipelines"].append(
        {**doc["pipelines"][0], "name": "placed", "device": "cuda", "placement": {"gpu": 4}}
    )
    doc["services"] = [
        {"name": "own", "type": "command", "command": ["x"], "device": "cuda:3"},
        {"name": "far", "type": "external", "url": "http://127.0.0.1:9", "device": "cuda:2"},
    ]
    assert gpus_used(validate_document(doc, "test").spec) == {0, 1, 3, 4}


@pytest.mark.spawns
def test_a_foreign_process_on_another_gpu_is_only_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, foreign: int
) -> None:
    script_gpus(tmp_path, monkeypatch, [os.getpid()], [foreign])
    spec = validate_document(one_pipeline("cuda:0"), "test").spec
    gpu_count, warnings, busy = check_environment(spec)
    assert gpu_count == 2 and busy == []
    assert warnings == [
        f"foreign compute process on the GPU: pid {foreign} (sleep) on GPU 1, 64.0 MiB"
    ]


@pytest.mark.spawns
def test_a_foreign_process_on_the_runs_gpu_refuses_it_as_device_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, foreign: int
) -> None:
    script_gpus(tmp_path, monkeypatch, [foreign])
    spec = tmp_path / "busy.yaml"
    spec.write_text(yaml.safe_dump(one_pipeline("cuda:0")))
    out = tmp_path / "runs"
    completed = subprocess.run(
        [sys.executable, "-m", "stages.cli", "run", str(spec), "--out", str(out), "--no-load"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
        env={**os.environ, "COLLOBENCH_MLFLOW": "0", "COLLOBENCH_HOST_ID": "host-a"},
    )
    assert completed.returncode == 3, completed.stderr
    line = f"pid {foreign} (sleep) on GPU 0"
    assert f"device_busy: foreign compute process on the GPU: {line}" in completed.stderr
    assert "Traceback" not in completed.stderr
    (run_dir,) = out.iterdir()
    assert sorted(path.name for path in run_dir.iterdir()) == ["manifest.json"]  # no data
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "device_busy" and manifest["host"] == "host-a"
    assert manifest["ended_at"] and manifest["results"] == [] and manifest["timeline"] == []
    assert any(line in warning for warning in manifest["warnings"])
