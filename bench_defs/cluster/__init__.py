"""A real multi-process Dagster instance for scale-out trials and tests (issue 21).

`python -m bench_defs.cluster up|down|status [--workers N]` runs, under
`$COLLOBENCH_HOME/cluster/`: PostgreSQL (a unix socket only) for Dagster's storage, Redis
(loopback, no persistence) as Celery's broker and result backend, the code server
(`dagster api grpc`), `dagster-webserver`, `dagster-daemon run`, and one Celery worker per device
pool (`bench_defs.cluster.celery_app`, each its own queue, concurrency 1, prefetch 1, its own
`COLLOBENCH_HOME` and `COLLOBENCH_HOST_ID`). Runs go out through dagster-celery's
`CeleryRunLauncher` and execute in the worker with the in-process executor.

Modules: `layout` (folders, env vars), `procs` (process groups and the state file),
`services` (Postgres and Redis), `instance_config` (dagster.yaml, workspace.yaml, pools.yaml),
`dagster_procs` (the Dagster processes and the workers), `control` (up, down, status),
`celery_app` (the workers' Celery app).
"""
