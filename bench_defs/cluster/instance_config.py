"""The files `up` writes: the Dagster instance (`dagster_home/dagster.yaml`), the workspace
that points at the code server, and a pools file for N hosts unless one exists."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import yaml

from bench_defs.core.pools import DEFAULT_QUEUE, Pool, PoolsFile, load_pools, pool_limits

RUN_START_TIMEOUT_S = 180
"""Run monitoring fails a run its worker has not started within this (a dead or absent worker)."""
DEQUEUE_INTERVAL_S = 1
"""How often the queued run coordinator starts waiting runs (Dagster's default is 5 s); as
bench_defs/dagster.yaml's `run_queue`."""
LOCATION = "collobench"
"""The code location's name (as in the repository's workspace.yaml)."""
LAUNCHERS = ("celery", "default")
"""`up --launcher`: dagster-celery's run launcher (runs on the workers), or Dagster's
DefaultRunLauncher (each run a subprocess of the code server; no workers)."""


def host_names(count: int) -> list[str]:
    """`host-a`, `host-b`, ... (then `host-27`, ...)."""
    letters = string.ascii_lowercase
    return [f"host-{letters[i]}" if i < len(letters) else f"host-{i + 1}" for i in range(count)]


def write_pools(path: Path, workers: int) -> list[Pool]:
    """The pools file for `workers` hosts (each its own queue, one device), unless the file
    exists; returns the file's pools."""
    if not path.is_file():
        pools = [Pool(name=host, queue=host, host=host, devices=1) for host in host_names(workers)]
        document = PoolsFile(pools=pools).model_dump()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return load_pools(path)


def run_launcher(launcher: str, redis_url: str) -> dict[str, Any]:
    """The `run_launcher` entry for `launcher` (one of LAUNCHERS)."""
    if launcher == "default":
        return {"module": "dagster", "class": "DefaultRunLauncher"}
    if launcher != "celery":
        raise ValueError(f"launcher {launcher!r} is not one of {', '.join(LAUNCHERS)}")
    return {
        "module": "bench_defs.cluster.launcher",
        "class": "WatchedCeleryRunLauncher",
        "config": {"broker": redis_url, "backend": redis_url, "default_queue": DEFAULT_QUEUE},
    }


def instance_document(
    postgres_url: str, redis_url: str, pools: list[Pool], launcher: str = "celery"
) -> dict[str, Any]:
    """dagster.yaml: Postgres storage; dagster-celery's run launcher with a health check that
    notices a dead worker (`bench_defs.cluster.launcher`; runs execute in the worker with the
    in-process executor, never the Celery executor: dagster issue #32915), or
    with `launcher="default"` Dagster's DefaultRunLauncher; the queued coordinator with one
    limit per pool, starting waiting runs every DEQUEUE_INTERVAL_S; run monitoring that never
    resumes a benchmark; no telemetry and no onboarding dialog."""
    return {
        "storage": {"postgres": {"postgres_url": postgres_url}},
        "run_launcher": run_launcher(launcher, redis_url),
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {"dequeue_interval_seconds": DEQUEUE_INTERVAL_S},
        },
        "concurrency": {"runs": {"tag_concurrency_limits": pool_limits(pools)}},
        "run_monitoring": {
            "enabled": True,
            "start_timeout_seconds": RUN_START_TIMEOUT_S,
            "max_resume_run_attempts": 0,
            "poll_interval_seconds": 5,
        },
        "telemetry": {"enabled": False},
        "nux": {"enabled": False},
    }


def write_instance(
    dagster_home: Path,
    postgres_url: str,
    redis_url: str,
    pools: list[Pool],
    launcher: str = "celery",
) -> None:
    """Write dagster.yaml (always: the URLs change with every `up`)."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    document = instance_document(postgres_url, redis_url, pools, launcher)
    text = "# Written by `python -m bench_defs.cluster up`; rewritten on every up.\n"
    text += yaml.safe_dump(document, sort_keys=False)
    (dagster_home / "dagster.yaml").write_text(text, encoding="utf-8")


def write_workspace(path: Path, grpc_port: int) -> None:
    """workspace.yaml: the code server on 127.0.0.1."""
    entry = {"host": "127.0.0.1", "port": grpc_port, "location_name": LOCATION}
    document = {"load_from": [{"grpc_server": entry}]}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
