"""The cluster's run launcher's health check, against a stand-in Celery app: a started run
whose worker stops answering (or answers without the run's task) is FAILED on the second poll
in a row, never on one missed reply; a worker that answers keeps it RUNNING; the states
dagster-celery itself decides (SUCCESS, FAILURE, PENDING) pass through."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pytest
from dagster._core.launcher import WorkerStatus
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG

from bench_defs.cluster.launcher import LOST_CHECKS, WatchedCeleryRunLauncher

TASK = "task-1"
HOST = "host-b@box"


@dataclass
class FakeCelery:
    """`AsyncResult(id).state/.info` and `control.inspect(...).query_task(id)`."""

    state: str = "STARTED"
    replies: list[dict[str, Any] | None] = field(default_factory=list)
    asked: list[list[str]] = field(default_factory=list)

    def AsyncResult(self, task_id: str) -> Any:  # noqa: N802 (Celery's name)
        assert task_id == TASK
        info = {"pid": 7, "hostname": HOST} if self.state == "STARTED" else None
        return type("Result", (), {"state": self.state, "info": info})()

    @property
    def control(self) -> Any:
        return self

    def inspect(self, destination: list[str], timeout: float) -> Any:
        self.asked.append(destination)
        return self

    def query_task(self, task_id: str) -> dict[str, Any] | None:
        return self.replies.pop(0)


def check(launcher: WatchedCeleryRunLauncher) -> WorkerStatus:
    run = dg.DagsterRun(
        job_name="benchmark_job", run_id="r1", tags={DAGSTER_CELERY_TASK_ID_TAG: TASK}
    )
    return launcher.check_run_worker_health(run).status


@pytest.fixture
def launcher() -> WatchedCeleryRunLauncher:
    return WatchedCeleryRunLauncher(default_queue="dagster", broker="redis://127.0.0.1:9/0")


def test_a_worker_that_stops_answering_fails_the_run_on_the_second_poll(
    launcher: WatchedCeleryRunLauncher,
) -> None:
    active = {HOST: {TASK: ["active", {}]}}
    celery = FakeCelery(replies=[active, None, active, None, {HOST: {}}])
    launcher.celery = celery
    assert LOST_CHECKS == 2
    assert [check(launcher) for _ in range(5)] == [
        WorkerStatus.RUNNING,  # answers with the task
        WorkerStatus.RUNNING,  # one missed reply
        WorkerStatus.RUNNING,  # answers again: the count starts over
        WorkerStatus.RUNNING,  # a miss
        WorkerStatus.FAILED,  # a second miss in a row: a reply without the task (restarted)
    ]
    assert celery.asked == [[HOST]] * 5


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("SUCCESS", WorkerStatus.SUCCESS),
        ("FAILURE", WorkerStatus.FAILED),
        ("PENDING", WorkerStatus.UNKNOWN),
    ],
)
def test_states_the_backend_decides_pass_through(
    launcher: WatchedCeleryRunLauncher, state: str, status: WorkerStatus
) -> None:
    celery = FakeCelery(state=state)
    launcher.celery = celery
    assert check(launcher) == status
    assert celery.asked == []
