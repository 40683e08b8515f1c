"""ServiceGroup: every service up before the first phase, `per_phase` ones restarted, the dead
named with their reason, a failed start leaving nothing behind, all stopped at the end."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from stages.services.group import ServiceGroup, resolve_model
from stages.services.lifecycle import ServiceError
from stages.spec.services import ServiceModelSpec, ServiceSpec

STUB = str(Path(__file__).with_name("stub_service.py"))


@pytest.fixture(autouse=True)
def _allow_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")


def stub_spec(name: str, *flags: str, **fields: Any) -> ServiceSpec:
    return ServiceSpec.model_validate(
        {
            "name": name,
            "type": "command",
            "command": [sys.executable, STUB, "{port}", *flags],
            "ready": {"path": "/health", "timeout_s": 10},
            **fields,
        }
    )


def running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            pass
    return alive


@pytest.mark.spawns
def test_all_up_then_all_stopped(tmp_path: Path) -> None:
    group = ServiceGroup(
        [stub_spec("a", "--child"), stub_spec("b", restart="per_phase")], log_dir=tmp_path
    )
    with group:
        urls = group.base_urls()
        assert set(urls) == {"a", "b"} and urls["a"] != urls["b"]
        pids = group.pids()
        assert {"service:a", "service:a:1", "service:b"} <= set(pids)
        group.restart_per_phase()
        assert group.pids()["service:a"] == pids["service:a"]  # `once`: kept up
        assert group.pids()["service:b"] != pids["service:b"]  # `per_phase`: a new process
        assert group.dead() == {}
        every_pid = [*pids.values(), *group.pids().values()]
    assert running(every_pid) == []
    assert (tmp_path / "a.log").is_file()
    whats = [(span["service"], span["what"]) for span in group.spans]
    assert whats.count(("b", "service_ready")) == 2 and ("a", "service_stop") in whats


@pytest.mark.spawns
def test_a_dead_service_is_named_with_its_reason(tmp_path: Path) -> None:
    with ServiceGroup([stub_spec("a")], log_dir=tmp_path) as group:
        os.kill(group.pids()["service:a"], signal.SIGTERM)
        deadline = time.monotonic() + 30  # generous: a loaded CI machine reaps slowly
        while not group.dead() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert group.dead() == {"a": "service a killed by signal 15: stub service listening"}
        with pytest.raises(ServiceError, match="service a killed by signal 15"):
            group.raise_if_dead()


@pytest.mark.spawns
def test_a_failed_start_stops_what_was_started(tmp_path: Path) -> None:
    group = ServiceGroup([stub_spec("a"), stub_spec("b", "--bad-flag")], log_dir=tmp_path)
    started: list[int] = []
    original = group._bring_up

    def bring_up(spec: ServiceSpec) -> None:
        original(spec)
        started.extend(group.services[spec.name].pids())

    group._bring_up = bring_up  # type: ignore[method-assign]
    with pytest.raises(ServiceError, match="service b exited with status 2"):
        group.start_all()
    assert started and running(started) == []
    assert group.services == {}


def test_models_resolve_to_paths(tmp_path: Path) -> None:
    assert resolve_model(ServiceModelSpec(path=str(tmp_path))) == str(tmp_path)
    seen: list[str | None] = []

    def resolver(model: ServiceModelSpec) -> str:
        seen.append(model.artifact)
        return "/built/tiny_lm"

    spec = stub_spec("a", model={"artifact": "tiny_lm"})
    group = ServiceGroup([spec], resolver=resolver)
    assert group._process(spec).model == "/built/tiny_lm" and seen == ["tiny_lm"]
