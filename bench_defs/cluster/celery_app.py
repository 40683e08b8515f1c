"""The Celery app of the cluster's workers (`celery -A bench_defs.cluster.celery_app worker`).

dagster-celery's own `dagster_celery.app` registers only the step task of its Celery *executor*;
the run launcher sends `execute_job` (the whole run, in-process executor). This app registers
the launcher's tasks on a broker and result backend from the environment `up` sets
(`COLLOBENCH_CELERY_BROKER`, `COLLOBENCH_CELERY_BACKEND`), with dagster-celery's defaults
(prefetch 1)."""

from __future__ import annotations

import os

from dagster_celery.config import DEFAULT_CONFIG
from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_execute_job_task, create_resume_job_task

from bench_defs.cluster.layout import BACKEND_ENV, BROKER_ENV
from bench_defs.pools import DEFAULT_QUEUE

app = make_app(
    app_args={
        "broker": os.environ.get(BROKER_ENV),
        "backend": os.environ.get(BACKEND_ENV),
        "include": [],
        "config_source": dict(DEFAULT_CONFIG),
        "task_default_queue": DEFAULT_QUEUE,
    }
)
execute_job = create_execute_job_task(app)
resume_job = create_resume_job_task(app)
