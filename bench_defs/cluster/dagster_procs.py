"""The Dagster processes (code server, webserver, daemon) and the Celery workers, with the
checks that say each is ready: the location loaded, the daemons healthy, the worker listening."""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench_defs.cluster.instance_config import LOCATION
from bench_defs.cluster.layout import (
    BACKEND_ENV,
    BROKER_ENV,
    HOST_ID_ENV,
    QUEUES_ENV,
    Layout,
    repo_root,
)
from bench_defs.cluster.procs import ProcRecord, env_with, spawn, wait_ready
from bench_defs.core.pools import POOLS_FILE_ENV, Pool
from stages import settings

START_TIMEOUT_S = 240.0
WANTED_DAEMONS = ("QUEUED_RUN_COORDINATOR", "MONITORING")
"""The daemons the cluster cannot work without: the run queue and run monitoring."""
FAKE_NVML_FILE = "fake_nvml.json"

LOCATION_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries {
  name loadStatus locationOrLoadError { __typename } } } } }"""
DAEMON_QUERY = """{ instance { daemonHealth { allDaemonStatuses { daemonType healthy required
  } } } }"""


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def dagster_env(layout: Layout, pools_file: Path, **extra: str) -> dict[str, Any]:
    """The environment of every Dagster-side process (and, through `worker_env`, of every
    worker): the cluster's DAGSTER_HOME, pools and shared results folder (the sensors read
    region requests there, the hosts write runs and searches there)."""
    path = os.environ.get("PYTHONPATH")
    pythonpath = f"{repo_root()}:{path}" if path else str(repo_root())
    return env_with(
        DAGSTER_HOME=str(layout.dagster_home),
        PYTHONPATH=pythonpath,
        **{POOLS_FILE_ENV: str(pools_file), settings.RESULTS_DIR_ENV: str(layout.results)},
        **extra,
    )


def graphql(url: str, query: str) -> dict[str, Any]:
    """POST a GraphQL query to the webserver; its `data`."""
    body = json.dumps({"query": query}).encode()
    request = urllib.request.Request(
        f"{url}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.loads(response.read())["data"])


def _listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


def start_code_server(layout: Layout, env: dict[str, Any], port: int) -> ProcRecord:
    argv = [_bin("dagster"), "api", "grpc", "-m", "bench_defs.definitions"]
    argv += ["-h", "127.0.0.1", "-p", str(port), "--location-name", LOCATION]
    argv += ["-d", str(repo_root())]
    return spawn("code-server", argv, env, layout.log("code-server"), repo_root())


def start_webserver(layout: Layout, env: dict[str, Any], port: int) -> ProcRecord:
    argv = [_bin("dagster-webserver"), "-h", "127.0.0.1", "-p", str(port)]
    argv += ["-w", str(layout.workspace)]
    return spawn("webserver", argv, env, layout.log("webserver"), repo_root())


def start_daemon(layout: Layout, env: dict[str, Any]) -> ProcRecord:
    argv = [_bin("dagster-daemon"), "run", "-w", str(layout.workspace)]
    return spawn("daemon", argv, env, layout.log("daemon"), repo_root())


def worker_env(layout: Layout, env: dict[str, Any], pool: Pool, redis_url: str) -> dict[str, Any]:
    """A worker's own COLLOBENCH_HOME, host id and queue (its results go to the shared folder
    `dagster_env` names); its fake GPU where the host's home holds a `fake_nvml.json`."""
    home = layout.host_home(pool.host)
    home.mkdir(parents=True, exist_ok=True)
    extra = {"COLLOBENCH_HOME": str(home), HOST_ID_ENV: pool.host, QUEUES_ENV: pool.queue}
    extra |= {BROKER_ENV: redis_url, BACKEND_ENV: redis_url}
    if (home / FAKE_NVML_FILE).is_file():
        extra["COLLOBENCH_FAKE_NVML"] = str(home / FAKE_NVML_FILE)
    return {**env, **extra}


def start_worker(layout: Layout, env: dict[str, Any], pool: Pool) -> ProcRecord:
    """`celery worker` on the pool's queue only: concurrency 1, prefetch 1, named after its
    host (prefork: the run executes in the pool child, which a revoke can end)."""
    argv = [sys.executable, "-m", "celery", "-A", "bench_defs.cluster.celery_app", "worker"]
    argv += ["-Q", pool.queue, "-c", "1", "--prefetch-multiplier", "1", "-P", "prefork"]
    argv += ["-n", f"{pool.host}@%h", "-l", "INFO", "--without-gossip", "--without-mingle"]
    name = f"worker-{pool.host}"
    return spawn(name, argv, env, layout.log(name), repo_root())


def wait_code_server(record: ProcRecord, port: int) -> None:
    wait_ready(record, lambda: _listening(port), START_TIMEOUT_S, "listening")


def _location_loaded(url: str) -> bool:
    entries = graphql(url, LOCATION_QUERY)["workspaceOrError"]["locationEntries"]
    return any(
        entry["name"] == LOCATION
        and entry["loadStatus"] == "LOADED"
        and entry["locationOrLoadError"]["__typename"] == "RepositoryLocation"
        for entry in entries
    )


def wait_webserver(record: ProcRecord, url: str) -> None:
    wait_ready(record, lambda: _location_loaded(url), START_TIMEOUT_S, "serving the location")


def _daemons_healthy(url: str) -> bool:
    statuses = graphql(url, DAEMON_QUERY)["instance"]["daemonHealth"]["allDaemonStatuses"]
    healthy = {status["daemonType"] for status in statuses if status["healthy"]}
    return all(daemon in healthy for daemon in WANTED_DAEMONS)


def wait_daemon(record: ProcRecord, url: str) -> None:
    wait_ready(record, lambda: _daemons_healthy(url), START_TIMEOUT_S, "healthy")


def wait_worker(record: ProcRecord, offset: int = 0) -> None:
    """Until the worker's log says ` ready.` after byte `offset` (a restarted worker appends
    to its predecessor's log)."""

    def ready() -> bool:
        with open(record.log, "rb") as log:
            log.seek(offset)
            return b" ready." in log.read()

    wait_ready(record, ready, START_TIMEOUT_S, "ready")
