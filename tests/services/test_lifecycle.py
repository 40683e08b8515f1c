"""ServiceProcess against a stub loopback server run as a `command` service: start on a free
port, readiness, warm-up, a kill mid-way detected with its reason, stop by process group
(children and a server that ignores SIGTERM included), no process left."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from stages.services.builders import OpenAICompatible
from stages.services.lifecycle import ServiceError, ServiceProcess, free_port
from stages.services.registry import default_service_registry
from stages.spec.services import ServiceSpec

pytestmark = pytest.mark.spawns  # every test here starts a process

STUB = str(Path(__file__).with_name("stub_service.py"))


@pytest.fixture(autouse=True)
def _allow_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLOBENCH_ALLOW_COMMANDS", "1")


def stub(tmp_path: Path, *flags: str, **fields: Any) -> ServiceProcess:
    spec = ServiceSpec.model_validate(
        {
            "name": "stub",
            "type": "command",
            "command": [sys.executable, STUB, "{port}", *flags],
            "ready": {"path": "/health", "timeout_s": 10},
            **fields,
        }
    )
    service_type = default_service_registry().get("command")
    return ServiceProcess(spec, service_type, log_path=tmp_path / "stub.log")


class StubOpenAI(OpenAICompatible):
    """The stub as an OpenAI-compatible type: warm-up POSTs a completion."""

    name = "test.stub_openai"

    def command(self, spec: ServiceSpec, port: int, model: str | None) -> list[str]:
        return [sys.executable, STUB, str(port), *spec.args]


def gone(pids: list[int]) -> bool:
    return not [pid for pid in pids if psutil.pid_exists(pid) and _running(pid)]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_start_ready_warm_up_and_stop_leave_no_process(tmp_path: Path) -> None:
    service = stub(tmp_path, "--child", "--ready-after", "0.3", warmup_requests=3)
    service.start()
    try:
        assert service.port > 0 and service.base_url == f"http://127.0.0.1:{service.port}"
        waited_s = service.wait_ready()
        assert 0.3 <= waited_s < 10
        assert service.warm_up() == 3
        assert service.alive()
        pids = service.pids()
        assert len(pids) >= 2  # the server and its child
    finally:
        service.stop()
    assert gone(pids)
    assert not service.alive()
    assert [span["what"] for span in service.spans] == [
        "service_start", "service_ready", "service_warmup", "service_stop"
    ]  # fmt: skip
    assert all(span["start_ns"] <= span["end_ns"] for span in service.spans)


def test_a_kill_mid_way_is_detected_with_its_reason(tmp_path: Path) -> None:
    service = stub(tmp_path, "--child")
    service.start()
    try:
        service.wait_ready()
        pids = service.pids()
        os.kill(pids[0], signal.SIGKILL)
        deadline = time.monotonic() + 5
        while service.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not service.alive()
        reason = service.exit_reason()
        assert reason is not None
        assert reason.startswith("service stub killed by signal 9: stub service listening")
    finally:
        service.stop()
    assert gone(pids)  # the orphaned child went with the process group


def test_a_server_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    service = stub(tmp_path, "--ignore-term")
    service.start()
    service.wait_ready()
    pids = service.pids()
    started = time.monotonic()
    service.stop(grace_s=0.5)
    assert time.monotonic() - started < 5
    assert gone(pids)


def test_a_server_that_exits_before_ready_fails_with_its_status(tmp_path: Path) -> None:
    service = stub(tmp_path, "--no-such-flag")
    service.start()
    with pytest.raises(ServiceError, match=r"exited with status 2: .*unrecognized arguments"):
        service.wait_ready()
    service.stop()


def test_readiness_times_out(tmp_path: Path) -> None:
    service = stub(tmp_path, "--ready-after", "60", ready={"path": "/health", "timeout_s": 0.5})
    service.start()
    pids = service.pids()
    with pytest.raises(ServiceError, match=r"not ready after 0.5 s \(last: HTTP 503\)"):
        service.wait_ready()
    assert gone(pids)  # a service that never became ready is stopped


def test_an_openai_warm_up_posts_a_completion_and_a_failure_is_an_error(tmp_path: Path) -> None:
    spec = ServiceSpec.model_validate(
        {"name": "stub", "type": "test.stub_openai", "warmup_requests": 2, "model": {"path": "m"}}
    )
    healthy = ServiceProcess(spec, StubOpenAI(), model="m")
    healthy.start()
    try:
        healthy.wait_ready()
        assert healthy.warm_up() == 2
    finally:
        healthy.stop()
    failing = spec.model_copy(update={"args": ["--fail-warmup"], "warmup_requests": 1})
    service = ServiceProcess(failing, StubOpenAI(), model="m")
    service.start()
    try:
        service.wait_ready()
        with pytest.raises(ServiceError, match="warm-up 0: HTTP 500"):
            service.warm_up()
    finally:
        service.stop()


def test_a_fixed_port_is_used(tmp_path: Path) -> None:
    port = free_port()
    service = stub(tmp_path, port=port)
    service.start()
    try:
        service.wait_ready()
        assert service.base_url.endswith(f":{port}")
    finally:
        service.stop()
    service.stop()  # twice is harmless


def test_cpu_placement_pins_the_process(tmp_path: Path) -> None:
    cpu = sorted(os.sched_getaffinity(0))[0]
    service = stub(tmp_path, placement={"cpus": [cpu]})
    service.start()
    try:
        assert os.sched_getaffinity(service.pids()[0]) == {cpu}
    finally:
        service.stop()
