"""Checks of the `services:` block a model cannot express: registered types, unique names, what
each type needs, and the `command` opt-in (`COLLOBENCH_ALLOW_COMMANDS=1`)."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from urllib.parse import urlsplit

from stages.services.registry import ServiceRegistry, default_service_registry
from stages.spec.problems import SpecProblem, format_location
from stages.spec.services import ServiceSpec


def check_services(
    services: list[ServiceSpec],
    registry: ServiceRegistry | None = None,
    environ: Mapping[str, str] | None = None,
    pipeline_names: Collection[str] = (),
) -> list[SpecProblem]:
    """One problem per unknown type, duplicate name (a pipeline's included: telemetry names a
    service's processes by its name where it names a pipeline's), or field a type does not
    accept."""
    registry = registry or default_service_registry()
    environ = os.environ if environ is None else environ
    problems: list[SpecProblem] = []
    seen: dict[str, int] = {}
    for index, service in enumerate(services):
        at = ("services", index)
        if service.name in seen:
            problems.append(
                SpecProblem(
                    format_location((*at, "name")),
                    f"duplicate service name '{service.name}' "
                    f"(also services[{seen[service.name]}])",
                )
            )
        seen.setdefault(service.name, index)
        if service.name in pipeline_names:
            problems.append(
                SpecProblem(
                    format_location((*at, "name")),
                    f"service name '{service.name}' is also a pipeline's name; "
                    "telemetry names both alike",
                )
            )
        problems += _check_metrics_url(service, at)
        if service.type not in registry:
            message = registry.unknown_message(service.type)
            problems.append(SpecProblem(format_location((*at, "type")), message))
            continue
        if service.model is not None and service.model.artifact is not None:
            problems += _check_artifact(service.model.artifact, at)
        for field, message in registry.get(service.type).check(service, environ):
            location = (*at, *(int(p) if p.isdigit() else p for p in field.split(".")))
            problems.append(SpecProblem(format_location(location), message))
    return problems


def _check_artifact(name: str, at: tuple[int | str, ...]) -> list[SpecProblem]:
    from stages.artifacts.registry import ARTIFACTS

    if name in ARTIFACTS:
        return []
    where = format_location((*at, "model", "artifact"))
    return [SpecProblem(where, ARTIFACTS.unknown_message(name))]


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Where metrics are scraped: the services the benchmark starts listen there; an `external`
one must too (the scraper never leaves the machine)."""


def _check_metrics_url(service: ServiceSpec, at: tuple[int | str, ...]) -> list[SpecProblem]:
    if service.metrics is None or service.url is None:
        return []
    host = urlsplit(service.url).hostname
    if host in LOOPBACK_HOSTS:
        return []
    return [
        SpecProblem(
            format_location((*at, "metrics")),
            f"metrics are scraped over loopback only; url host {host!r} is not one of "
            + ", ".join(LOOPBACK_HOSTS),
        )
    ]
