"""Services in a run: up before the first phase and stopped at the end with their spans in the
manifest's timeline, no process left; a service that died fails the pipelines that use it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from stages.collocation.results import PipelineOutcome
from stages.collocation.services_run import RunServices, pipelines_using
from stages.spec.models import BenchmarkSpec
from tests.helpers import run

pytestmark = pytest.mark.spawns  # every test here starts a process

STUB = str(Path(__file__).parents[1] / "services" / "stub_service.py")


def doc(*flags: str, **service: Any) -> dict[str, Any]:
    return {
        "name": "served",
        "collocation": {"solo_baselines": False},
        "pipelines": [
            {
                "name": "p",
                "loadgen": {"type": "server", "rate": 50, "duration_s": 0.5},
                "stages": [{"id": "s", "type": "noop"}],
            }
        ],
        "services": [
            {
                "name": "stub",
                "type": "command",
                "command": [sys.executable, STUB, "{port}", "--child", *flags],
                "ready": {"path": "/health", "timeout_s": 10},
                "warmup_requests": 2,
                **service,
            }
        ],
    }


@pytest.fixture(autouse=True)
def _allow_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")


def stub_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if STUB in (process.info["cmdline"] or []) and process.status() != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


@pytest.mark.slow
def test_a_run_starts_its_service_first_and_stops_it_last(tmp_path: Path) -> None:
    result = run(doc(), tmp_path)
    assert result.status == "ok", result.warnings
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    timeline = manifest["timeline"]
    whats = [entry["what"] for entry in timeline if entry.get("service") == "stub"]
    assert whats == ["service_start", "service_ready", "service_warmup", "service_stop"]
    by_what = {entry["what"]: entry for entry in timeline}
    assert by_what["service_warmup"]["end_ns"] <= by_what["phase"]["start_ns"]
    assert by_what["service_stop"]["start_ns"] >= by_what["phase"]["end_ns"]
    assert "stub service listening" in (result.run_dir / "services" / "stub.log").read_text()
    assert stub_processes() == []


def test_a_service_that_cannot_start_fails_the_run_with_its_reason(tmp_path: Path) -> None:
    result = run(doc("--bad-flag"), tmp_path)
    assert result.status == "failed" and result.results == []
    assert any("service stub exited with status 2" in line for line in result.warnings)
    assert stub_processes() == []


def test_a_dead_service_fails_the_pipelines_that_use_it(tmp_path: Path) -> None:
    spec = BenchmarkSpec.model_validate(
        {
            **doc(),
            "pipelines": [
                {
                    "name": "user",
                    "stages": [{"id": "s", "type": "x", "config": {"service": "stub"}}],
                },
                {"name": "other", "stages": [{"id": "s", "type": "noop"}]},
            ],
        }
    )
    assert pipelines_using(spec) == {"stub": {"user"}}
    timeline: list[dict[str, Any]] = []
    services = RunServices(spec, tmp_path, timeline)
    warnings: list[str] = []
    assert services.start(warnings) and services.before_phase(warnings)
    assert services.dead_users() == {}
    root = services._group.services["stub"].popen.pid  # type: ignore[union-attr]
    assert services.root_pids() == {"stub": root}
    assert services.base_urls()["stub"].startswith("http://127.0.0.1:")
    services._group.services["stub"].popen.kill()  # type: ignore[union-attr]
    services._group.services["stub"].popen.wait()  # type: ignore[union-attr]
    assert services.root_pids() == {}
    stopped = services.dead_users()
    assert list(stopped) == ["user"] and "service stub killed by signal 9" in stopped["user"]
    outcomes = [PipelineOutcome(0, "collocated", name, status="ok") for name in ("user", "other")]
    services.after_phase(outcomes, warnings)
    services.after_phase(outcomes, warnings)
    services.stop()
    assert [o.status for o in outcomes] == ["failed", "ok"]
    assert outcomes[0].error is not None and "service stub killed by signal 9" in outcomes[0].error
    assert len(warnings) == 1  # reported once
    assert stub_processes() == []
    assert [entry["what"] for entry in timeline][-1] == "service_stop"
