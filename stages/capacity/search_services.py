"""The searched spec's services, up for the whole search: started once before the first probe
and stopped after the last, so a server's start-up (seconds for `transformers serve`, minutes
for a large model on vLLM) is paid once, not once per probe. Each probe's spec names them as
`external` services at their URLs, so its run uses them without starting or stopping them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.services.group import ServiceGroup
from stages.services.registry import default_service_registry
from stages.validation.loading import LoadedSpec

PROBE_READY_TIMEOUT_S = 30.0
"""How long a probe waits for a search-wide service to answer its ready path: it is already up,
so this only has to cover a server busy with the previous probe's last requests."""


@dataclass(frozen=True)
class SharedService:
    """A service up for the whole search: where clients reach it, and its health path."""

    base_url: str
    ready_path: str


@dataclass
class SearchServices:
    """The services up for one search (none: `shared` is empty and nothing can die)."""

    shared: dict[str, SharedService]
    group: ServiceGroup | None = None

    def raise_if_dead(self) -> None:
        """Raise ServiceError (with the exit status and the log's last line) when one of them
        ended: a probe that ran against a dead server measured the failure, not the load, so
        the search stops instead of recording it."""
        if self.group is not None:
            self.group.raise_if_dead()


@contextmanager
def search_services(loaded: LoadedSpec, log_dir: Path) -> Iterator[SearchServices]:
    """Start the spec's services (not `external` ones: the user runs those) for the search,
    and stop them all by process group on the way out."""
    started = [service for service in loaded.spec.services if service.type != "external"]
    if not started:
        yield SearchServices({})
        return
    registry = default_service_registry()
    with ServiceGroup(started, log_dir=log_dir) as group:
        urls = group.base_urls()
        shared = {
            spec.name: SharedService(urls[spec.name], registry.get(spec.type).ready_path(spec))
            for spec in started
        }
        yield SearchServices(shared, group)


def as_external(
    services: list[dict[str, Any]], shared: Mapping[str, SharedService]
) -> tuple[list[dict[str, Any]], list[str]]:
    """A probe's `services`: each search-wide one replaced by an `external` service at its URL
    (polled on its own ready path, not warmed again); with the overrides that say so."""
    replaced, overrides = [], []
    for service in services:
        up = shared.get(service["name"])
        if up is None:
            replaced.append(service)
            continue
        replaced.append(
            {
                "name": service["name"],
                "type": "external",
                "url": up.base_url,
                "ready": {"path": up.ready_path, "timeout_s": PROBE_READY_TIMEOUT_S},
                # Each probe scrapes the server's metrics as a run does.
                **({"metrics": service["metrics"]} if service.get("metrics") else {}),
            }
        )
        overrides.append(f"services.{service['name']}.type=external")
        overrides.append(f"services.{service['name']}.url={up.base_url}")
    return replaced, overrides
