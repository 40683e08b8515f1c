"""Submit a run to an up cluster through GraphQL, await it, and read when Dagster launched,
started and ended it (`perf/cluster_launch.py` times the launchers with it; perf/ imports no
Dagster)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlparse

from bench_defs.cluster.instance_config import LOCATION
from bench_defs.core.specs import SPEC_PARTITIONS


@dataclass(frozen=True)
class RunTimes:
    """One run's outcome and its instants, in wall-clock seconds (`time.time()`)."""

    run_id: str
    status: str
    submitted_s: float
    starting_s: float | None
    """RUN_STARTING: the daemon took the run off the queue and called the run launcher."""
    started_s: float | None
    """RUN_START: the run's process (a Celery worker's, or the code server's child) began."""
    ended_s: float | None
    failure: str
    """The failure events' messages (empty for a run that succeeded)."""


class ClusterClient:
    """The cluster's instance (opened in this process) and a GraphQL client on its webserver;
    use it in a `with` block."""

    def __init__(self, dagster_home: Path, webserver_url: str) -> None:
        import dagster as dg
        from dagster_graphql import DagsterGraphQLClient

        address = urlparse(webserver_url)
        self.client = DagsterGraphQLClient(str(address.hostname), port_number=address.port)
        self.instance = dg.DagsterInstance.from_config(str(dagster_home))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.instance.dispose()

    def add_spec_partition(self, key: str) -> None:
        if not self.instance.has_dynamic_partition(SPEC_PARTITIONS, key):
            self.instance.add_dynamic_partitions(SPEC_PARTITIONS, [key])

    def run(
        self, job: str, tags: dict[str, str], timeout_s: float, assets: list[str] | None = None
    ) -> RunTimes:
        """Submit `job` with `tags` (only `assets` of it, when named), poll until it ended
        (TimeoutError after `timeout_s`)."""
        submitted_s = time.time()
        run_id = str(
            self.client.submit_job_execution(
                job,
                repository_location_name=LOCATION,
                run_config={},
                tags=tags,
                asset_selection=assets,
            )
        )
        record = self._await_end(run_id, timeout_s)
        status = record.dagster_run.status.value
        return RunTimes(
            run_id=run_id,
            status=status,
            submitted_s=submitted_s,
            starting_s=self._starting(run_id),
            started_s=record.start_time,
            ended_s=record.end_time,
            failure="" if status == "SUCCESS" else self._failures(run_id),
        )

    def _await_end(self, run_id: str, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.instance.get_run_record_by_id(run_id)
            if record is not None and record.dagster_run.is_finished:
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} not ended after {timeout_s:g} s")
            time.sleep(0.2)

    def _starting(self, run_id: str) -> float | None:
        from dagster import DagsterEventType

        entries = self.instance.all_logs(run_id, of_type=DagsterEventType.RUN_STARTING)
        return float(entries[0].timestamp) if entries else None

    def _failures(self, run_id: str) -> str:
        lines = []
        for entry in self.instance.all_logs(run_id):
            event = entry.dagster_event
            if event is not None and event.is_failure:
                lines.append(f"{event.step_key}: {entry.message}"[:400])
        return " | ".join(lines) or "(no failure event)"
