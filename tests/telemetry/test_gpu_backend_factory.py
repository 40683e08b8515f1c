"""Production reaches the fake NVML only through the backend factory, and only on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.telemetry import gpu_backend_factory
from stages.telemetry.fake_nvml import FakeNvml
from stages.telemetry.gpu_backend_factory import FAKE_NVML_ENV_VAR

REPO_ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_MODULES = (
    "stages.telemetry.gpu_backend_factory",
    "stages.telemetry.gpu_sampler",
    "stages.telemetry.host_sampler",
    "stages.telemetry.nvml_backend",
    "stages.telemetry.sampler_process",
    "stages.telemetry.sampler_group",
)


def _loaded_fake_modules(env: dict[str, str], call_factory: bool) -> list[str]:
    """Import the production modules (and open a backend) in a fresh interpreter; return the
    fake NVML modules that ended up in its sys.modules."""
    code = "\n".join(
        [
            "import importlib, json, sys",
            "FAKE = 'stages.telemetry.fake_nvml'",
            *(f"importlib.import_module({name!r})" for name in PRODUCTION_MODULES),
            "from stages.telemetry.gpu_backend_factory import open_gpu_backend",
            *(["backend = open_gpu_backend()"] if call_factory else []),
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(FAKE))))",
        ]
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(result.stdout)
    return loaded


def _env_without_fake() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != FAKE_NVML_ENV_VAR}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.mark.spawns
def test_production_never_imports_the_fake_without_the_env_var() -> None:
    assert _loaded_fake_modules(_env_without_fake(), call_factory=False) == []
    assert _loaded_fake_modules(_env_without_fake(), call_factory=True) == []


@pytest.mark.spawns
def test_the_env_var_makes_the_factory_load_the_fake(tmp_path: Path) -> None:
    script = tmp_path / "fake.json"
    script.write_text(json.dumps({"devices": [{"name": "Fake H100"}]}))
    env = {**_env_without_fake(), FAKE_NVML_ENV_VAR: str(script)}
    assert "stages.telemetry.fake_nvml" in _loaded_fake_modules(env, call_factory=True)


def test_factory_returns_the_scripted_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAKE_NVML_ENV_VAR, raising=False)
    assert gpu_backend_factory.fake_nvml_from_env() is None
    script = tmp_path / "fake.yaml"
    script.write_text(json.dumps({"devices": [{"name": "Fake H100", "power_w": 42.0}]}))
    monkeypatch.setenv(FAKE_NVML_ENV_VAR, str(script))
    fake = gpu_backend_factory.fake_nvml_from_env()
    assert isinstance(fake, FakeNvml)
    assert fake.script.devices[0].name == "Fake H100"
    backend = gpu_backend_factory.open_gpu_backend()
    assert backend is not None
    assert backend.name(0) == "Fake H100"
    assert backend.power_w(0) == pytest.approx(42.0)
    backend.shutdown()
