"""The cluster's run launcher: dagster-celery's `CeleryRunLauncher` with a worker health check
that notices a dead worker.

Run monitoring asks the launcher, every poll, whether a started run's worker is healthy.
dagster-celery answers from the task's state in the result backend alone: `STARTED` is
"running". A worker that crashes (SIGKILL, OOM, a host that goes away) never writes another
state, so the run would stay "running" until its `dagster/max_runtime`. Here a `STARTED` task
is also asked after on the worker the state names (its `hostname`): `query_task` over Celery's
remote control (the prefork worker's main process answers while its pool process runs the
run). No reply, or a reply without the task (a worker restarted under the same name), on
`LOST_CHECKS` polls in a row makes the check say FAILED, and run monitoring
(`max_resume_run_attempts: 0`) marks the run failed: one missed reply on a loaded machine does
not.
"""

from __future__ import annotations

from typing import Any

from dagster import DagsterRun
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster_celery.launcher import CeleryRunLauncher
from dagster_celery.tags import DAGSTER_CELERY_TASK_ID_TAG

LOST_CHECKS = 2
"""Polls in a row on which the worker must miss the run's task before the run is failed."""
INSPECT_TIMEOUT_S = 3.0
"""How long a health check waits for the worker's reply."""


class WatchedCeleryRunLauncher(CeleryRunLauncher):
    """`CeleryRunLauncher` whose health check also asks the worker (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._misses: dict[str, int] = {}

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        result = super().check_run_worker_health(run)
        lost = self._lost(run) if result.status == WorkerStatus.RUNNING else None
        if lost is None:
            self._misses.pop(run.run_id, None)
            return result
        misses = self._misses.get(run.run_id, 0) + 1
        self._misses[run.run_id] = misses
        if misses < LOST_CHECKS:
            return result
        del self._misses[run.run_id]
        return CheckRunHealthResult(WorkerStatus.FAILED, lost)

    def _lost(self, run: DagsterRun) -> str | None:
        """Why the worker that started the run's task no longer runs it; None while it does
        (or when the task's state names no worker)."""
        task_id = run.tags[DAGSTER_CELERY_TASK_ID_TAG]
        info = self.celery.AsyncResult(task_id).info
        hostname = info.get("hostname") if isinstance(info, dict) else None
        if not hostname:
            return None
        inspect = self.celery.control.inspect(destination=[hostname], timeout=INSPECT_TIMEOUT_S)
        reply = (inspect.query_task(task_id) or {}).get(hostname)
        if reply is None:
            return (
                f"Celery worker {hostname} does not answer (gone?): the run's task {task_id} "
                "is lost."
            )
        if task_id not in reply:
            return f"Celery worker {hostname} no longer runs the run's task {task_id}."
        return None
