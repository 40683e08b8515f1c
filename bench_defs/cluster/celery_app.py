"""The Celery app of the cluster's workers (`celery -A bench_defs.cluster.celery_app worker`).

Like dagster-celery's own `dagster_celery.app`, it registers the run launcher's tasks
(`execute_job`: the whole run, in-process executor; `resume_job`), but on a broker and result
backend from the environment `up` sets
(`COLLOBENCH_CELERY_BROKER`, `COLLOBENCH_CELERY_BACKEND`), with dagster-celery's defaults
(prefetch 1).

Routing: the launcher publishes to the exchange named after the queue with the routing key
`<queue>.execute_job` (or `.resume_job`); a queue Celery creates for `-Q <queue>` is bound with
the key `<queue>` alone, so over Redis the message would be undeliverable. The worker's queues
(`COLLOBENCH_CELERY_QUEUES`, comma-separated) are therefore declared bound with all three keys.

Cancelling: the launcher's `terminate` revokes the task with SIGTERM to the pool process that
executes the run. There, while a run executes, SIGTERM becomes SIGINT, which Dagster turns into
an interrupt of the running step, so the Pipes client ends the benchmark's process group (a
session of its own, which a plain kill of the pool process would leave running) and the run
ends as cancelled; an idle pool process dies of SIGTERM as before.
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_process_init
from dagster_celery.config import DEFAULT_CONFIG, TASK_EXECUTE_JOB_NAME, TASK_RESUME_JOB_NAME
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task
from kombu import Exchange, Queue, binding

from bench_defs.cluster.layout import BACKEND_ENV, BROKER_ENV, QUEUES_ENV
from bench_defs.core.pools import DEFAULT_QUEUE

_executing = {"run": False}


def worker_queues(names: list[str]) -> list[Queue]:
    """Each queue bound, on its own direct exchange, to the keys the run launcher uses."""
    queues = []
    for name in names:
        exchange = Exchange(name, type="direct")
        keys = (name, f"{name}.{TASK_EXECUTE_JOB_NAME}", f"{name}.{TASK_RESUME_JOB_NAME}")
        queues.append(Queue(name, bindings=[binding(exchange, routing_key=key) for key in keys]))
    return queues


app = make_app(
    app_args={
        "broker": os.environ.get(BROKER_ENV),
        "backend": os.environ.get(BACKEND_ENV),
        "include": [],
        "config_source": dict(DEFAULT_CONFIG),
        "task_default_queue": DEFAULT_QUEUE,
    }
)
app.conf.task_queues = worker_queues(
    [name for name in os.environ.get(QUEUES_ENV, DEFAULT_QUEUE).split(",") if name]
)
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)


def _on_sigterm(signum: int, _frame: FrameType | None) -> None:
    if _executing["run"]:
        os.kill(os.getpid(), signal.SIGINT)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@worker_process_init.connect
def _sigterm_interrupts_the_run(**_: Any) -> None:
    """In each pool process (after Celery reset its signals): SIGTERM handled as above."""
    signal.signal(signal.SIGTERM, _on_sigterm)


@task_prerun.connect
def _run_starts(**_: Any) -> None:
    _executing["run"] = True


@task_postrun.connect
def _run_ends(**_: Any) -> None:
    _executing["run"] = False
