"""capture_environment: the facts a manifest needs, no secrets, no in-process torch, no raising."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from stages.collocation import environment, torch_probe
from stages.collocation.environment import capture_environment, redact_secrets
from tests.paths import REPO


def test_redact_secrets_drops_secret_names_case_insensitively() -> None:
    kept = redact_secrets(
        {
            "CUDA_VISIBLE_DEVICES": "0",
            "MY_API_TOKEN": "abc",
            "aws_secret_access_key": "abc",
            "DB_Password": "abc",
            "GOOGLE_APPLICATION_CREDENTIALS": "/x.json",
            "HTTP_AUTH": "abc",
            "OMP_NUM_THREADS": "1",
        }
    )
    assert kept == {"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "1"}


def test_redact_secrets_masks_url_credentials() -> None:
    kept = redact_secrets({"HF_ENDPOINT": "https://me:hunter2@mirror.example/hf"})
    assert kept == {"HF_ENDPOINT": "https://***@mirror.example/hf"}


@pytest.mark.spawns
def test_capture_environment_reports_machine_and_filters_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_API_TOKEN", "abc")
    monkeypatch.setenv("COLLOBENCH_API_TOKEN", "abc")  # relevant prefix, secret name
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("HOME_IRRELEVANT", "x")

    env = capture_environment(REPO)

    json.dumps(env)  # goes into manifest.json as is
    variables = env["env"]
    assert isinstance(variables, dict)
    assert variables.get("CUDA_VISIBLE_DEVICES") == "0"
    assert "MY_API_TOKEN" not in variables
    assert "COLLOBENCH_API_TOKEN" not in variables
    assert "HOME_IRRELEVANT" not in variables
    assert "abc" not in json.dumps(env)

    python = env["python"]
    assert isinstance(python, dict)
    assert python["version"] == ".".join(map(str, sys.version_info[:3]))
    assert python["implementation"] == "CPython"
    packages = env["packages"]
    assert isinstance(packages, dict)
    assert packages["pandas"] and packages["mlflow"] and packages["pyarrow"]
    assert len(str(env["packages_sha256"])) == 64 and int(str(env["packages_count"])) > 50
    assert env["server_programs"] == {}  # no service types given
    cpu = env["cpu"]
    assert isinstance(cpu, dict)
    assert cpu["logical_cores"] == os.cpu_count()
    assert isinstance(cpu["physical_cores"], int) and cpu["physical_cores"] >= 1
    assert isinstance(env["memory_total_bytes"], int) and env["memory_total_bytes"] > 0
    assert env["hostname"]
    assert isinstance(env["gpus"], list)  # [] without NVML, never None
    if packages["torch"] is not None:  # the subprocess probe found torch
        torch_info = env["torch"]
        assert isinstance(torch_info, dict)
        assert str(torch_info["version"]).startswith(str(packages["torch"]))


@pytest.mark.spawns
def test_capture_environment_never_imports_torch_in_process() -> None:
    code = (
        "import json, sys; from pathlib import Path; "
        "from stages.collocation.environment import capture_environment; "
        "env = capture_environment(Path('.')); "
        "print(json.dumps({'torch_loaded': 'torch' in sys.modules}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"torch_loaded": False}


@pytest.fixture
def no_torch_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the ~1.5 s torch subprocess in tests about other probes."""
    monkeypatch.setattr(environment, "_start_torch_probe", lambda cache_dir=None: None)


@pytest.mark.spawns
@pytest.mark.usefixtures("no_torch_probe")
def test_git_state_of_a_repository(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    clean = capture_environment(tmp_path)["git"]
    assert isinstance(clean, dict)
    assert isinstance(clean["commit"], str) and len(clean["commit"]) == 40
    assert clean["dirty"] is False

    (tmp_path / "a.txt").write_text("2")
    dirty = capture_environment(tmp_path)["git"]
    assert isinstance(dirty, dict)
    assert dirty["dirty"] is True
    assert dirty["commit"] == clean["commit"]


@pytest.mark.spawns
@pytest.mark.usefixtures("no_torch_probe")
def test_git_is_none_outside_a_repository(tmp_path: Path) -> None:
    assert capture_environment(tmp_path / "not-a-repo")["git"] is None


@pytest.mark.spawns
def test_failing_probes_yield_none_instead_of_raising(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def broken() -> str:
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(environment, "_cpu_model", broken)
    monkeypatch.setattr(environment, "_memory_total_bytes", broken)
    monkeypatch.setattr(environment, "_nvidia", broken)
    monkeypatch.setattr(environment, "TORCH_PROBE_TIMEOUT_S", 0.0)  # the torch probe times out
    monkeypatch.setattr(torch_probe, "_TORCH_BUILDS", {})  # (and has not answered before)
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH

    env = capture_environment(tmp_path)

    cpu = env["cpu"]
    assert isinstance(cpu, dict)
    assert cpu["model"] is None
    assert env["memory_total_bytes"] is None
    assert env["nvidia_driver_version"] is None
    assert env["gpus"] == []
    assert env["torch"] is None
    assert env["git"] is None
    assert env["hostname"]  # the other probes still ran


@pytest.mark.spawns
def test_the_torch_probe_runs_once_per_installation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A second capture in one process reuses the first probe's answer, and so does a new
    process with the same cache folder (the next run); another installation (a reinstall
    changes version.py's mtime) is probed again."""
    monkeypatch.setattr(torch_probe, "_TORCH_BUILDS", {})  # nothing probed yet
    cache = tmp_path / "cache"
    first = capture_environment(tmp_path, cache_dir=cache)["torch"]
    assert isinstance(first, dict) and first["version"]
    assert (cache / torch_probe.CACHE_FILE).is_file()
    started: list[bool] = []
    real_start = torch_probe.start_torch_probe

    def counting_start(cache_dir: Path | None = None) -> Any:
        process = real_start(cache_dir)
        started.append(process is not None)
        return process

    monkeypatch.setattr(environment, "_start_torch_probe", counting_start)
    assert capture_environment(tmp_path)["torch"] == first
    monkeypatch.setattr(torch_probe, "_TORCH_BUILDS", {})  # a new process: only the file
    assert capture_environment(tmp_path, cache_dir=cache)["torch"] == first
    assert started == [False, False]
    install = torch_probe._torch_install()
    assert install is not None
    reinstalled = (install[0], install[1], install[2] + 1, install[3])
    monkeypatch.setattr(torch_probe, "_torch_install", lambda: reinstalled)
    assert capture_environment(tmp_path, cache_dir=cache)["torch"] == first
    assert started == [False, False, True]


def test_the_packages_fingerprint_hashes_every_distribution_as_name_and_version() -> None:
    """Read from the METADATA headers (fast), it equals what importlib's parser reads."""
    expected = sorted(
        {
            f"{re.sub(r'[-_.]+', '-', d.metadata['Name']).lower()}=={d.version}"
            for d in metadata.distributions()
        }
    )
    fingerprint = environment.packages_fingerprint()
    assert fingerprint == {
        "packages_sha256": hashlib.sha256("\n".join(expected).encode()).hexdigest(),
        "packages_count": len(expected),
    }
    assert f"pyarrow=={metadata.version('pyarrow')}" in expected


def test_server_programs_are_the_versions_of_what_the_services_run() -> None:
    programs = environment.server_programs(
        ["transformers.serve", "transformers.serve", "external", "llama.cpp", "vllm.serve"]
    )
    vllm = environment.package_versions(("vllm",))["vllm"]
    assert programs == {"transformers": metadata.version("transformers"), "vllm": vllm}
