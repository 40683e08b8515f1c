"""One service's life: start on loopback in its own process group, wait until its health path
answers, warm it up, watch it, stop it by process group (SIGTERM, then SIGKILL).

The launcher calls these outside every measured window and records each step's span
(`spans`: what, start_ns, end_ns on the monotonic clock, like the run's `timeline`). A service
whose process exits early is reported with its exit status and the tail of its log.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import psutil

from stages.contracts.errors import RunFailedError
from stages.process_groups import end_group, start_group
from stages.services.service_type import LOOPBACK_HOST, ServiceType
from stages.spec.services import ServiceSpec

POLL_INTERVAL_S = 0.05
REQUEST_TIMEOUT_S = 5.0
STOP_GRACE_S = 10.0
LOG_TAIL_BYTES = 2000

# Loopback only: never through an HTTP proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServiceError(RunFailedError, RuntimeError):
    """A service could not start, become ready or warm up, or died: the reason, one line."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK_HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _request(url: str, body: dict[str, Any] | None, timeout_s: float) -> int:
    """The HTTP status of GET `url` (POST of `body` as JSON when given)."""
    data = None if not body else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"} if data else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            response.read()
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code


class ServiceProcess:
    """A started (or, `external`, a probed) service of the benchmark."""

    def __init__(
        self,
        spec: ServiceSpec,
        service_type: ServiceType,
        model: str | None = None,
        log_path: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec
        self.service_type = service_type
        self.model = model
        self.log_path = log_path
        self.environ = dict(os.environ if environ is None else environ)
        self.port = spec.port
        self.popen: subprocess.Popen[bytes] | None = None
        self.spans: list[dict[str, Any]] = []
        self.stopped = False

    @property
    def base_url(self) -> str:
        return self.service_type.base_url(self.spec, self.port)

    def _span(self, what: str, start_ns: int) -> None:
        end_ns = time.monotonic_ns()
        span = {"what": what, "service": self.spec.name, "start_ns": start_ns, "end_ns": end_ns}
        self.spans.append(span)

    def start(self) -> None:
        """Start the server (nothing for `external`): own session and process group, the
        placement's CPU affinity, output to `log_path`."""
        if not self.service_type.starts_process or self.popen is not None:
            return
        started_ns = time.monotonic_ns()
        self.port = self.spec.port or free_port()
        argv = self.service_type.command(self.spec, self.port, self.model)
        environment = {**self.environ, **self.service_type.environment(self.spec, self.environ)}
        log: IO[bytes] | int = subprocess.DEVNULL
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_path.open("ab")
        try:
            self.popen = start_group(argv, stdout=log, env=environment)
        except OSError as error:
            raise ServiceError(
                f"service {self.spec.name}: cannot start {argv[0]}: {error}"
            ) from None
        finally:
            if not isinstance(log, int):
                log.close()
        self._pin_cpus()
        self._span("service_start", started_ns)

    def _pin_cpus(self) -> None:
        """CPU affinity of the new process (its threads not yet started inherit it)."""
        cpus = self.spec.placement.cpus
        if cpus is None or self.popen is None or not hasattr(os, "sched_setaffinity"):
            return
        try:
            os.sched_setaffinity(self.popen.pid, cpus)
        except OSError as error:
            self.stop()
            raise ServiceError(f"service {self.spec.name}: cpus {cpus}: {error}") from None

    def wait_ready(self) -> float:
        """Poll the health path until it answers 200; seconds waited. Raises ServiceError when
        the process exits first or `ready.timeout_s` passes."""
        started_ns = time.monotonic_ns()
        deadline = time.monotonic() + self.spec.ready.timeout_s
        url = self.base_url + self.service_type.ready_path(self.spec)
        last = "no answer"
        while True:
            self._raise_if_dead("before it was ready")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise ServiceError(
                    f"service {self.spec.name}: {url} not ready after "
                    f"{self.spec.ready.timeout_s:g} s (last: {last})"
                )
            try:
                status = _request(url, None, min(REQUEST_TIMEOUT_S, remaining))
                if status == 200:
                    break
                last = f"HTTP {status}"
            except (OSError, ValueError) as error:
                last = str(getattr(error, "reason", error))
            time.sleep(min(POLL_INTERVAL_S, max(0.0, deadline - time.monotonic())))
        self._span("service_ready", started_ns)
        return (time.monotonic_ns() - started_ns) / 1e9

    def warm_up(self) -> int:
        """Send `warmup_requests` requests, one at a time; each must answer 2xx."""
        count = self.spec.warmup_requests
        if count == 0:
            return 0
        started_ns = time.monotonic_ns()
        path, body = self.service_type.warmup_request(self.spec, self.model)
        for index in range(count):
            self._raise_if_dead("during warm-up")
            try:
                status = _request(self.base_url + path, body, self.spec.ready.timeout_s)
            except (OSError, ValueError) as error:
                reason = str(getattr(error, "reason", error))
                raise ServiceError(f"service {self.spec.name}: warm-up {index}: {reason}") from None
            if not 200 <= status < 300:
                raise ServiceError(f"service {self.spec.name}: warm-up {index}: HTTP {status}")
        self._span("service_warmup", started_ns)
        return count

    def alive(self) -> bool:
        """Whether the server process still runs (an `external` service: until stopped)."""
        if self.stopped:
            return False
        return self.popen is None or self.popen.poll() is None

    def exit_reason(self) -> str | None:
        """Why the process ended (exit status or signal, and the log's last line), or None."""
        if self.popen is None or self.popen.poll() is None:
            return None
        code = self.popen.returncode
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        tail = self.log_tail()
        return f"service {self.spec.name} {how}" + (f": {tail}" if tail else "")

    def _raise_if_dead(self, when: str) -> None:
        reason = self.exit_reason()
        if reason is not None:
            raise ServiceError(f"{reason} ({when})")

    def log_tail(self) -> str:
        """The last non-empty line of the service's log, or ''."""
        if self.log_path is None or not self.log_path.is_file():
            return ""
        with self.log_path.open("rb") as handle:
            handle.seek(max(0, self.log_path.stat().st_size - LOG_TAIL_BYTES))
            lines = handle.read().decode("utf-8", "replace").splitlines()
        last = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return "".join(char if char.isprintable() else " " for char in last)[:300]

    def pids(self) -> list[int]:
        """The server process and its descendants now (for host and NVML sampling)."""
        if self.popen is None or self.popen.poll() is not None:
            return []
        try:
            children = psutil.Process(self.popen.pid).children(recursive=True)
        except psutil.Error:
            return []
        return [self.popen.pid, *(child.pid for child in children)]

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the process group and the descendants that left it, wait up to `grace_s`,
        then SIGKILL what is left, and reap the process (stages.process_groups.end_group).
        Safe to call twice, and after the process died (what it left in its group is still
        ended)."""
        self.stopped = True
        if self.popen is None:
            return
        started_ns = time.monotonic_ns()
        end_group(self.popen, grace_s)
        self._span("service_stop", started_ns)
        self.popen = None
