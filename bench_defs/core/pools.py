"""Device pools: where benchmark runs may go, and how many at once (issue 21).

A pool is a set of interchangeable devices served by one Celery queue (one worker per host or
device group). A benchmark run carries the tag `collobench/gpu-pool` = its pool, and
`dagster-celery/queue` = the pool's queue, which routes it to that host's worker; the instance
caps the runs in flight per pool at its device count (`concurrency.runs.tag_concurrency_limits`),
so runs wait in Dagster's queue (visible, cancellable) rather than on a host. On each host,
`collobench run`'s per-device lock stays the last guarantee.

The pools live in a YAML file (`$COLLOBENCH_POOLS_FILE`, else `<home>/cluster/pools.yaml`);
without one there is one implicit pool, `local`, on Dagster's default queue, with a limit of one:
on one machine, one benchmark at a time, as before pools.

Who picks a run's pool: a Launchpad run (benchmark_job, capacity_job) gets the first pool as its
default tags; the spec sensor and the nightly schedule give each run the least-loaded pool
(queued and running runs per device, ties in file order, so an idle set of pools fills round-
robin); a capacity region's solo searches and rays go round-robin over the pools by their index,
so the rays of one region run on several hosts at once. `python -m bench_defs.core.pools` prints the
pools; `--write-instance DIR` writes their limits into `DIR/dagster.yaml` (`make ui`, `make demo`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stages import settings
from stages.contracts.errors import InvalidInputError

POOL_TAG = "collobench/gpu-pool"
"""The pool a benchmark run needs; the instance's run limit per value is the pool's size."""
QUEUE_TAG = "dagster-celery/queue"
"""dagster-celery's own tag: the Celery queue the run launcher sends the run to."""
POOLS_FILE_ENV = "COLLOBENCH_POOLS_FILE"
DEFAULT_QUEUE = "dagster"
"""dagster-celery's default queue (what a run without the queue tag goes to)."""
NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
OLD_DEVICE_TAG = "collobench/device"
"""The per-device tag pools replaced (one run per `cuda:N` value, whatever the host): an instance
limit on it is dropped when the pool limits are written."""
INSTANCE_TEMPLATE = Path(__file__).parent.parent / "dagster.yaml"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
"""The run statuses that count as a pool's load (waiting in the queue or running)."""


class PoolError(InvalidInputError, ValueError):
    """A pools file that cannot be used, or a run tag naming no pool: one line, the reason."""


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
    try:
        document: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        pools = PoolsFile.model_validate(document).pools
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise PoolError(f"{path}: {where}: {first['msg']}") from None
    except (OSError, yaml.YAMLError) as error:
        raise PoolError(f"{path}: {str(error).splitlines()[0]}") from None
    names = [pool.name for pool in pools]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PoolError(f"{path}: pools: duplicate names {', '.join(duplicates)}")
    return pools


def default_pool() -> Pool:
    """The Launchpad's pool (benchmark_job's and capacity_job's default tags, read when the
    code location loads): the first of the file. A file that cannot be read gives the local
    pool here, so the code location still loads; the run then fails on the file's error."""
    try:
        return load_pools()[0]
    except PoolError:
        return LOCAL_POOL


def pool_limits(pools: list[Pool]) -> list[dict[str, Any]]:
    """The instance's `concurrency.runs.tag_concurrency_limits` entries: one per pool."""
    return [{"key": POOL_TAG, "value": pool.name, "limit": pool.devices} for pool in pools]


def pool_tags(pool: Pool) -> dict[str, str]:
    """The tags that route a run to `pool` and count it against the pool's limit."""
    return {POOL_TAG: pool.name, QUEUE_TAG: pool.queue}


def pool_of(tags: Mapping[str, str], pools: list[Pool]) -> tuple[Pool | None, list[str]]:
    """The pool a run's tags name and warnings (no pool tag: the run is outside every pool
    limit, e.g. materialised from the asset catalog; a queue tag that is not the pool's).
    PoolError (one line) when the tag names no pool of `pools`."""
    name = tags.get(POOL_TAG)
    if name is None:
        return None, [
            f"this run has no {POOL_TAG} tag: no pool limit holds it back, only the device "
            f"lock of `collobench run`; launch benchmark_job or capacity_job to get one"
        ]
    found = next((pool for pool in pools if pool.name == name), None)
    if found is None:
        known = ", ".join(pool.name for pool in pools)
        raise PoolError(f"run tag {POOL_TAG}={name!r} names no pool (pools: {known})")
    queue = tags.get(QUEUE_TAG)
    if queue is not None and queue != found.queue:
        return found, [
            f"run tag {QUEUE_TAG}={queue!r} is not pool {name!r}'s queue {found.queue!r}: the "
            "run may have reached another host than its pool's"
        ]
    return found, []


def check_run_pool(context: dg.AssetExecutionContext) -> str:
    """The pool of this run (its name, or `none`), after checking its tags against the pools
    file; a dg.Failure of one line for an unreadable pools file or an unknown pool."""
    try:
        pool, warnings = pool_of(context.run.tags, load_pools())
    except PoolError as error:
        raise dg.Failure(str(error)) from None
    for warning in warnings:
        context.log.warning(warning)
    return pool.name if pool else "none"


def round_robin(pools: Sequence[Pool], index: int) -> Pool:
    """The pool of the `index`-th run of a group (a region's solo searches and rays)."""
    return pools[index % len(pools)]


class PoolChooser:
    """Gives each new run the least-loaded pool: runs in flight per device (ties: file order),
    counting the runs it has handed out itself, so one tick's runs spread over the pools."""

    def __init__(self, pools: Sequence[Pool], load: Mapping[str, int]) -> None:
        self.pools = list(pools)
        self.load = {pool.name: load.get(pool.name, 0) for pool in self.pools}

    @classmethod
    def from_instance(cls, instance: dg.DagsterInstance, pools: Sequence[Pool]) -> PoolChooser:
        """The load of each pool now: its queued, starting and running runs."""
        load = {
            pool.name: instance.get_runs_count(
                dg.RunsFilter(statuses=IN_FLIGHT, tags={POOL_TAG: pool.name})
            )
            for pool in pools
        }
        return cls(pools, load)

    def take(self) -> Pool:
        """The pool for the next run (counted as loaded from now on)."""
        chosen = min(self.pools, key=lambda pool: self.load[pool.name] / pool.devices)
        self.load[chosen.name] += 1
        return chosen


def merge_pool_limits(config: dict[str, Any], pools: list[Pool]) -> dict[str, Any]:
    """An instance configuration whose run limits are the pools': any limit on the pool tag or
    on the old per-device tag is replaced, other tags' limits are kept."""
    merged = dict(config)
    concurrency = dict(merged.get("concurrency") or {})
    runs = dict(concurrency.get("runs") or {})
    kept = [
        limit
        for limit in runs.get("tag_concurrency_limits") or []
        if limit.get("key") not in (POOL_TAG, OLD_DEVICE_TAG)
    ]
    runs["tag_concurrency_limits"] = kept + pool_limits(pools)
    concurrency["runs"] = runs
    merged["concurrency"] = concurrency
    return merged


def write_instance_config(folder: Path, pools: list[Pool] | None = None) -> Path:
    """Write `folder/dagster.yaml` with the pools' run limits: from bench_defs/dagster.yaml when
    the file is missing or empty, else the file there with its limits replaced (everything else
    kept; rewritten only when they change). Returns the file."""
    pools = load_pools() if pools is None else pools
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "dagster.yaml"
    existing = path.read_text(encoding="utf-8") if path.is_file() else ""
    text = existing if existing.strip() else INSTANCE_TEMPLATE.read_text(encoding="utf-8")
    config = yaml.safe_load(text) or {}
    merged = merge_pool_limits(config, pools)
    if merged != config:
        header = (
            f"# collobench: run limits of the pools of {pools_file()} (bench_defs.core.pools)\n"
        )
        text = header + yaml.safe_dump(merged, sort_keys=False)
    if text != existing:
        path.write_text(text, encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m bench_defs.core.pools [--write-instance DIR]`: the pools and their run limits."""
    parser = argparse.ArgumentParser(description="The device pools and their run limits.")
    parser.add_argument(
        "--write-instance",
        type=Path,
        metavar="DIR",
        help="Write the pools' limits into DIR/dagster.yaml (DAGSTER_HOME).",
    )
    args = parser.parse_args(argv)
    try:
        pools = load_pools()
    except PoolError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    source = pools_file() if pools_file().is_file() else "no pools file: the local pool"
    print(f"pools ({source}):")
    for pool in pools:
        print(f"  {pool.name}: queue {pool.queue}, host {pool.host}, {pool.devices} at once")
    if args.write_instance:
        print(f"instance config: {write_instance_config(args.write_instance.absolute(), pools)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
