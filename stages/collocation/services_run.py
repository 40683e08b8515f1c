"""The run's services, as the launcher sequences them: up after the idle baseline and before
the first phase (ready and warmed outside every measured window), `per_phase` ones restarted
between phases, a dead one failing the pipelines that use it, all stopped at the end, every
start, ready, warm-up and stop span in the manifest's `timeline`.

Each phase's workers get the services' base URLs (`base_urls`, in `WorkerTask.service_urls`),
its samplers the servers' pids (`root_pids`: the host sampler follows each server's
descendants, the GPU sampler attributes them to the service) and the metrics endpoints to
scrape (`metric_targets`). A service that dies during a
load window stops the pipelines that use it at once (`dead_users`, polled by the supervisor's
wait), not only after the phase."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from stages.collocation.results import PipelineOutcome
from stages.services.group import ServiceGroup
from stages.services.lifecycle import ServiceError
from stages.spec.models import BenchmarkSpec
from stages.telemetry.server_metrics import MetricsTarget

SERVICE_CONFIG_KEY = "service"
"""The stage config key that names a service of the spec (`http.openai`'s `service`)."""


def pipelines_using(spec: BenchmarkSpec) -> dict[str, set[str]]:
    """service name -> the pipelines with a stage whose config names it."""
    users: dict[str, set[str]] = {service.name: set() for service in spec.services}
    for pipeline in spec.pipelines:
        for stage in pipeline.stages:
            name = stage.config.get(SERVICE_CONFIG_KEY)
            if isinstance(name, str) and name in users:
                users[name].add(pipeline.name)
    return users


class RunServices:
    """The services of one run (none: every method does nothing)."""

    def __init__(self, spec: BenchmarkSpec, run_dir: Path, timeline: list[dict[str, Any]]):
        self._group = ServiceGroup(spec.services, log_dir=run_dir / "services")
        self._users = pipelines_using(spec)
        self._timeline = timeline
        self._phases_run = 0
        self._reported: set[str] = set()

    def start(self, warnings: list[str]) -> bool:
        """Start every service; False (the reason in `warnings`) when one cannot start."""
        try:
            self._group.start_all()
        except ServiceError as error:
            warnings.append(str(error))
            self._timeline.extend(self._group.spans)
            return False
        return True

    def before_phase(self, warnings: list[str]) -> bool:
        """Restart the `per_phase` services before every phase but the first; False (the
        reason in `warnings`, every service stopped) when one cannot start again."""
        self._phases_run += 1
        if self._phases_run == 1:
            return True
        try:
            self._group.restart_per_phase()
        except ServiceError as error:
            warnings.append(str(error))
            return False
        return True

    def after_phase(self, outcomes: list[PipelineOutcome], warnings: list[str]) -> None:
        """A service that died fails the phase's pipelines that use it, with its reason."""
        for name, reason in self._group.dead().items():
            for outcome in outcomes:
                if outcome.pipeline in self._users.get(name, set()):
                    outcome.status = "failed"
                    outcome.error = reason if outcome.error is None else outcome.error
            if name not in self._reported:
                self._reported.add(name)
                warnings.append(reason)

    def base_urls(self) -> dict[str, str]:
        """name -> base URL of every service up now (a `per_phase` one: this phase's port)."""
        return self._group.base_urls()

    def root_pids(self) -> dict[str, int]:
        """name -> the server's pid, for every service whose process runs now (none for an
        `external` one); the samplers follow its descendants themselves."""
        roots: dict[str, int] = {}
        for name, service in self._group.services.items():
            if service.popen is not None and service.popen.poll() is None:
                roots[name] = service.popen.pid
        return roots

    def metric_targets(self) -> list[MetricsTarget]:
        """The endpoints to scrape this phase: each service with `metrics`, at its base URL's
        scheme, host and port (any path of an `external` url dropped) plus `metrics.path`."""
        targets = []
        for name, service in self._group.services.items():
            metrics = service.spec.metrics
            if metrics is None:
                continue
            origin = urlsplit(service.base_url)
            url = urlunsplit((origin.scheme, origin.netloc, metrics.path, "", ""))
            targets.append(
                MetricsTarget(name, url, metrics.period_ms, metrics.timeout_ms, metrics.buckets)
            )
        return targets

    def dead_users(self) -> dict[str, str]:
        """pipeline -> the reason of a dead service it uses (empty while every service is up);
        cheap (one waitpid per service), so the supervisor polls it during the load window."""
        stopped: dict[str, str] = {}
        for name, reason in self._group.dead().items():
            for pipeline in self._users.get(name, set()):
                stopped.setdefault(pipeline, reason)
        return stopped

    def stop(self) -> None:
        """Stop every service (idempotent); their spans join the timeline."""
        self._group.stop_all()
        spans, self._group.spans = self._group.spans, []
        self._timeline.extend(spans)
