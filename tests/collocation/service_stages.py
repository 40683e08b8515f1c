"""A test-only stage type for runs with services, and the way to make it known to spawned
workers: `install_service_probe(tmp_path)` writes a throw-away distribution's entry point
(`test.service_probe`) on sys.path, which `spawn` passes on to the workers, and registers the
class in this process's registry (already loaded)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from pydantic import Field

from stages.runtime.query import Query
from stages.runtime.registry import default_registry
from stages.runtime.stage import Route, Stage, StageConfig

PROBE_TYPE = "test.service_probe"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServiceProbeConfig(StageConfig):
    service: str = Field(..., description="The service whose URL the stage looks up.")
    report_to: str = Field(..., description="A JSON-lines file the stage appends what it saw to.")
    ms: float = Field(2.0, ge=0, description="Milliseconds each visit sleeps.")


class ServiceProbeStage(Stage[ServiceProbeConfig]):
    """At prepare: writes its pipeline, its `service_urls` and the health status of its
    service's URL to `report_to`. Each visit sleeps `ms` (never calls the service, so a
    dead service fails the pipeline only through the launcher)."""

    def prepare(self) -> None:
        url = self.context.service_urls.get(self.config.service)
        status = None
        if url is not None:
            with _OPENER.open(url + "/health", timeout=5) as response:
                status = response.status
        line = {
            "pipeline": self.context.pipeline,
            "service_urls": dict(self.context.service_urls),
            "health": status,
        }
        with open(self.config.report_to, "a", encoding="utf-8") as report:
            report.write(json.dumps(line) + "\n")

    def run(self, query: Query) -> Route:
        time.sleep(self.config.ms / 1000.0)
        return None


def install_service_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `test.service_probe` a stage type here and in every worker spawned after."""
    dist = tmp_path / "entry_points" / "collobench_test_probe-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: collobench-test-probe\nVersion: 0.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[collobench.stages]\n{PROBE_TYPE} = tests.collocation.service_stages:ServiceProbeStage\n"
    )
    monkeypatch.syspath_prepend(str(dist.parent))
    if PROBE_TYPE not in default_registry():
        default_registry().register(PROBE_TYPE, ServiceProbeStage)
