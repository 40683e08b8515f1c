"""Device pools: where benchmark runs may go, and how many at once (issue 21).

A pool is a set of interchangeable devices served by one Celery queue (one worker per host or
device group). A benchmark run carries the tag `collobench/gpu-pool` = its pool, and
`dagster-celery/queue` = the pool's queue, which routes it to that host's worker; the instance
caps the runs in flight per pool at its device count (`concurrency.runs.tag_concurrency_limits`),
so runs wait in Dagster's queue (visible, cancellable) rather than on a host. On each host,
`collobench run`'s per-device lock stays the last guarantee.

The pools live in a YAML file (`$COLLOBENCH_POOLS_FILE`, else `<home>/cluster/pools.yaml`);
without one there is one implicit pool, `local`, on Dagster's default queue.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from stages import settings

POOL_TAG = "collobench/gpu-pool"
"""The pool a benchmark run needs; the instance's run limit per value is the pool's size."""
QUEUE_TAG = "dagster-celery/queue"
"""dagster-celery's own tag: the Celery queue the run launcher sends the run to."""
POOLS_FILE_ENV = "COLLOBENCH_POOLS_FILE"
DEFAULT_QUEUE = "dagster"
"""dagster-celery's default queue (what a run without the queue tag goes to)."""
NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"


class Pool(BaseModel):
    """One device pool: a Celery queue, the host its worker runs as, how many devices."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, description="The pool's name (the tag's value).")
    queue: str = Field(pattern=NAME_PATTERN, description="The Celery queue of its worker.")
    host: str = Field(
        pattern=NAME_PATTERN, description="The host id its worker runs as (COLLOBENCH_HOST_ID)."
    )
    devices: int = Field(1, ge=1, le=1024, description="Benchmark runs it takes at once.")


class PoolsFile(BaseModel):
    """The pools file: `pools: [{name, queue, host, devices}, ...]`."""

    model_config = ConfigDict(extra="forbid")

    pools: list[Pool] = Field(min_length=1, description="The device pools, names unique.")


LOCAL_POOL = Pool(name="local", queue=DEFAULT_QUEUE, host="local", devices=1)


def pools_file() -> Path:
    """Where the pools file is: `$COLLOBENCH_POOLS_FILE`, else `<home>/cluster/pools.yaml`."""
    named = os.environ.get(POOLS_FILE_ENV)
    return Path(named) if named else settings.home() / "cluster" / "pools.yaml"


def load_pools(path: Path | None = None) -> list[Pool]:
    """The pools of the file (validated; a duplicate name is an error), or [LOCAL_POOL] when
    there is no file."""
    path = path or pools_file()
    if not path.is_file():
        return [LOCAL_POOL]
    document: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    pools = PoolsFile.model_validate(document).pools
    names = [pool.name for pool in pools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"{path}: pools: duplicate names {', '.join(duplicates)}")
    return pools


def pool_limits(pools: list[Pool]) -> list[dict[str, Any]]:
    """The instance's `concurrency.runs.tag_concurrency_limits` entries: one per pool."""
    return [{"key": POOL_TAG, "value": pool.name, "limit": pool.devices} for pool in pools]


def pool_tags(pool: Pool) -> dict[str, str]:
    """The tags that route a run to `pool` and count it against the pool's limit."""
    return {POOL_TAG: pool.name, QUEUE_TAG: pool.queue}
