"""All the services of one run, as the launcher uses them: start them all before the first
phase (ready and warmed, outside every measured window), restart the `per_phase` ones between
phases, name the dead ones, list their processes for telemetry, stop them all at the end.

A failure to start stops whatever was already started and raises `ServiceError`: a run never
leaves a server behind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stages.services.lifecycle import ServiceError, ServiceProcess
from stages.services.registry import ServiceRegistry, default_service_registry
from stages.spec.services import ServiceModelSpec, ServiceSpec

ModelResolver = Callable[[ServiceModelSpec], str]
"""Turns a service's `model` into the path the server loads (an artefact is built if needed)."""


def resolve_model(model: ServiceModelSpec) -> str:
    """A `path` as given (already made absolute by `with_resolved_files`); an `artifact`'s
    folder, built if it is not yet."""
    if model.path is not None:
        return model.path
    from stages.artifacts.registry import ensure_artifact

    return str(ensure_artifact(str(model.artifact)).path)


class ServiceGroup:
    """The services of one run, by name."""

    def __init__(
        self,
        specs: list[ServiceSpec],
        log_dir: Path | None = None,
        registry: ServiceRegistry | None = None,
        resolver: ModelResolver = resolve_model,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._registry = registry or default_service_registry()
        self._specs = specs
        self._log_dir = log_dir
        self._resolver = resolver
        self._environ = environ
        self.services: dict[str, ServiceProcess] = {}
        self.spans: list[dict[str, Any]] = []
        """Every start, ready, warm-up and stop span of every service, for the timeline."""

    def _process(self, spec: ServiceSpec) -> ServiceProcess:
        model = self._resolver(spec.model) if spec.model is not None else None
        log_path = self._log_dir / f"{spec.name}.log" if self._log_dir is not None else None
        service_type = self._registry.get(spec.type)
        return ServiceProcess(spec, service_type, model, log_path, self._environ)

    def _bring_up(self, spec: ServiceSpec) -> None:
        service = self._process(spec)
        self.services[spec.name] = service
        service.start()
        service.wait_ready()
        service.warm_up()

    def start_all(self) -> None:
        """Start every service in spec order, each ready and warmed before the next."""
        try:
            for spec in self._specs:
                self._bring_up(spec)
        except BaseException:
            self.stop_all()
            raise

    def restart_per_phase(self) -> None:
        """Before a phase other than the first: stop and start again every `per_phase`
        service (the others stay up)."""
        try:
            for spec in self._specs:
                if spec.restart == "per_phase":
                    self._stop_one(spec.name)
                    self._bring_up(spec)
        except BaseException:
            self.stop_all()
            raise

    def base_urls(self) -> dict[str, str]:
        """name -> the base URL clients use (what a `service:` reference in a stage means)."""
        return {name: service.base_url for name, service in self.services.items()}

    def dead(self) -> dict[str, str]:
        """name -> why, for each service whose process ended."""
        reasons = {name: service.exit_reason() for name, service in self.services.items()}
        return {name: reason for name, reason in reasons.items() if reason is not None}

    def raise_if_dead(self) -> None:
        for reason in self.dead().values():
            raise ServiceError(reason)

    def pids(self) -> dict[str, int]:
        """`service:NAME` (and `service:NAME:N` for its descendants) -> pid, for the samplers."""
        found: dict[str, int] = {}
        for name, service in self.services.items():
            for index, pid in enumerate(service.pids()):
                found[f"service:{name}" if index == 0 else f"service:{name}:{index}"] = pid
        return found

    def _stop_one(self, name: str) -> None:
        service = self.services.pop(name, None)
        if service is not None:
            try:
                service.stop()
            finally:
                self.spans += service.spans

    def stop_all(self) -> None:
        """Stop every service, last started first."""
        for name in reversed(list(self.services)):
            self._stop_one(name)

    def __enter__(self) -> ServiceGroup:
        self.start_all()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_all()
