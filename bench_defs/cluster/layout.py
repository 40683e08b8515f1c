"""Where the cluster lives and the environment variables that change it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from stages import settings

POSTGRES_URL_ENV = "COLLOBENCH_CLUSTER_POSTGRES_URL"
"""An existing Postgres (SQLAlchemy URL): `up` then starts none of its own."""
REDIS_URL_ENV = "COLLOBENCH_CLUSTER_REDIS_URL"
"""An existing Redis (`redis://host:port/db`): `up` then starts none of its own."""
PG_BIN_ENV = "COLLOBENCH_PG_BIN"
"""The folder of initdb, postgres, pg_ctl, pg_isready, createdb."""
DEFAULT_PG_BIN = "/usr/lib/postgresql/15/bin"
PG_OS_USER_ENV = "COLLOBENCH_PG_OS_USER"
"""The account Postgres runs as when `up` runs as root (Postgres refuses root)."""
HOST_ID_ENV = "COLLOBENCH_HOST_ID"
BROKER_ENV = "COLLOBENCH_CELERY_BROKER"
"""The Celery broker URL a worker's app reads (`up` sets it)."""
BACKEND_ENV = "COLLOBENCH_CELERY_BACKEND"
"""The Celery result backend URL a worker's app reads (`up` sets it)."""
QUEUES_ENV = "COLLOBENCH_CELERY_QUEUES"
"""The queues a worker's app declares (comma-separated; `up` sets the worker's one queue)."""
PG_PORT = 5432
"""Only names the socket file (`.s.PGSQL.5432`): Postgres listens on no TCP port."""
DB_NAME = "dagster"
DB_USER = "dagster"


@dataclass(frozen=True)
class Layout:
    """The cluster folder: `<root>/{pgdata,sockets,redis,dagster_home,hosts,results,logs}`,
    `state.json` and `pools.yaml`."""

    root: Path

    @property
    def pgdata(self) -> Path:
        return self.root / "pgdata"

    @property
    def sockets(self) -> Path:
        return self.root / "sockets"

    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    @property
    def workspace(self) -> Path:
        return self.dagster_home / "workspace.yaml"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def results(self) -> Path:
        """`COLLOBENCH_RESULTS_DIR` of every worker and Dagster process: `$COLLOBENCH_RESULTS_DIR`
        when `up` runs with it set (on a lab, a folder every host mounts), else `<root>/results`.
        Every host's run directories and capacity searches land here, and one warehouse."""
        named = os.environ.get(settings.RESULTS_DIR_ENV)
        return Path(named).absolute() if named else self.root / "results"

    def host_home(self, host: str) -> Path:
        """The worker's COLLOBENCH_HOME (cache, artefacts, device locks; its results go to
        `results`); a `fake_nvml.json` there becomes its fake GPU."""
        return self.root / "hosts" / host

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"


def cluster_layout() -> Layout:
    """`$COLLOBENCH_HOME/cluster` (default `.collobench/cluster`)."""
    return Layout(settings.home() / "cluster")


def pg_bin(tool: str) -> str:
    return str(Path(os.environ.get(PG_BIN_ENV, DEFAULT_PG_BIN)) / tool)


def repo_root() -> Path:
    """The checkout the processes import `bench_defs` from (their PYTHONPATH and cwd)."""
    return Path(__file__).resolve().parents[2]
