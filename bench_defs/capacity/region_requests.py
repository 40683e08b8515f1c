"""A two-pipeline capacity region in Dagster: its partitions, its request, and the sensor that
runs it as separate runs (the two solo searches first, then one run per ray).

A region is asked for by a small JSON file, `<capacity dir>/regions/<spec>__<A>+<B>.json`
(`RegionRequest`: spec, the two pipelines, the number of rays, the search options), written by
the `capacity_region_job` (Launchpad config: ops.plan_capacity_region.config) or by
`write_region_request` from Python. `capacity_region_sensor` reads every request each tick:
- it adds the region's partitions (`add_region_partitions`: `<spec>|A`, `<spec>|B` and
  `<spec>|A+B@ray<k>of<n>`, k = 1..n) to `capacity_targets`;
- it requests a `capacity_job` run for each solo partition that has no materialisation yet (a
  solo capacity already found is reused: materialise it again by hand to refresh it);
- once both solo partitions are materialised it requests one run per ray.
Run keys are `<request id>:<partition>` (request id = file name and content hash), so a tick
never requests a run twice and an edited request runs again. The runs go round-robin over the
device pools (bench_defs/core/pools.py) by their index: solo A on the first pool, solo B on the
second, ray k on pool k-1 (modulo the number of pools), so both solo searches and the rays run
on several hosts at once; a request asked again on a later tick gets the same pools. The run
queue then runs at most a pool's device count of searches at once.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field

from bench_defs.capacity.assets import (
    CAPACITY_PARTITIONS,
    REGION_TAG,
    TARGET_TAG,
    CapacityConfig,
    CapacitySearchResource,
    capacity,
    capacity_job,
    search_config,
)
from bench_defs.capacity.keys import region_keys
from bench_defs.core.pools import Pool, PoolError, load_pools, round_robin
from bench_defs.core.resources import CollobenchResource
from bench_defs.core.sensor_interval import sensor_interval_s
from bench_defs.core.specs import devices_of, read_spec_state, run_tags

REGIONS_FOLDER = "regions"


class RegionRequest(BaseModel):
    """One region to search (a file in `<capacity dir>/regions/`)."""

    model_config = ConfigDict(extra="forbid")

    spec: str = Field(description="The spec file's stem (specs/<spec>.yaml).")
    pipelines: tuple[str, str] = Field(description="The two pipelines, A and B.")
    rays: int = Field(5, ge=1, description="Rays between the two axes.")
    search: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of every search (CapacityConfig: percentile, precision, "
        "max_probes, probe_s; never slo_ms or with_rates: each pipeline keeps its spec's "
        "slo_ms).",
    )

    def keys(self) -> list[str]:
        return region_keys(self.spec, *self.pipelines, self.rays)


def add_region_partitions(
    instance: dg.DagsterInstance, spec: str, a: str, b: str, rays: int
) -> list[str]:
    """Add the region's partitions (two solo, `rays` rays) to the instance; returns them."""
    keys = region_keys(spec, a, b, rays)
    existing = set(instance.get_dynamic_partitions(CAPACITY_PARTITIONS))
    new = [key for key in keys if key not in existing]
    if new:
        instance.add_dynamic_partitions(CAPACITY_PARTITIONS, new)
    return keys


def region_search_config(options: dict[str, Any]) -> CapacityConfig:
    """A region's search options; ValueError for an unknown one, or for slo_ms or with_rates
    (a region decides each pipeline by its own spec slo_ms, alone or next to the other)."""
    config = search_config(options)
    if config.slo_ms is not None or config.with_rates:
        raise ValueError(
            "a region decides each pipeline by its spec's slo_ms: leave slo_ms and with_rates out"
        )
    return config


def write_region_request(capacity_dir: Path, request: RegionRequest) -> Path:
    """Write (or replace) the request file the sensor acts on; returns its path."""
    region_search_config(request.search)  # refuse bad search options here, not in a run
    request.keys()  # and names that make no partition key
    folder = capacity_dir / REGIONS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    a, b = request.pipelines
    path = folder / f"{request.spec}__{a}+{b}.json"
    path.write_text(request.model_dump_json(indent=2) + "\n")
    return path


def request_id(path: Path, text: str) -> str:
    """The file's stem and the first 12 hex digits of its content's sha256."""
    return f"{path.stem}@{hashlib.sha256(text.encode()).hexdigest()[:12]}"


@dataclass
class RegionTick:
    """One tick's plan over every request file."""

    existing: set[str]
    materialized: set[str]
    pools: list[Pool]
    to_add: list[str] = field(default_factory=list)
    requests: list[dg.RunRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)

    def visit(self, identifier: str, request: RegionRequest, devices: str) -> None:
        """Plan one request: its missing partitions, its solo runs, then its rays (each on the
        pool of its index in its group)."""
        keys = request.keys()
        self.to_add += [key for key in keys if key not in self.existing and key not in self.to_add]
        run_config = {"ops": {capacity.op.name: {"config": request.search}}}
        solos, rays = keys[:2], keys[2:]
        pending = [key for key in solos if key not in self.materialized]
        planned = [(solos.index(key), key) for key in pending] if pending else list(enumerate(rays))
        for index, key in planned:
            tags = run_tags(devices, round_robin(self.pools, index))
            self.requests.append(
                dg.RunRequest(
                    run_key=f"{identifier}:{key}",
                    partition_key=key,
                    run_config=run_config,
                    tags={**tags, TARGET_TAG: key, REGION_TAG: identifier},
                )
            )
        if pending:
            self.waiting.append(f"{identifier}: rays wait for {', '.join(pending)}")


def _read_request(path: Path, tick: RegionTick) -> tuple[str, RegionRequest] | None:
    try:
        text = path.read_text()
        request = RegionRequest.model_validate(json.loads(text))
        request.keys()
        region_search_config(request.search)
    except Exception as error:  # a bad file must never crash the sensor
        tick.problems.append(f"{path}: {type(error).__name__}: {str(error).splitlines()[0]}")
        return None
    return request_id(path, text), request


def plan_tick(
    instance: dg.DagsterInstance, collobench: CollobenchResource, folder: Path
) -> RegionTick:
    """What the sensor does this tick for the request files in `folder`."""
    tick = RegionTick(
        existing=set(instance.get_dynamic_partitions(CAPACITY_PARTITIONS)),
        materialized=set(instance.get_materialized_partitions(capacity.key)),
        pools=load_pools(),
    )
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        found = _read_request(path, tick)
        if found is None:
            continue
        identifier, request = found
        state = read_spec_state(request.spec, collobench.spec_file(request.spec))
        if state.normalized is None:
            tick.problems += [f"{path.name}: {problem}" for problem in state.problems]
            continue
        tick.visit(identifier, request, devices_of(state.normalized))
    return tick


@dg.sensor(
    name="capacity_region_sensor",
    job=capacity_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="For each region request in <capacity dir>/regions/*.json: adds its "
    "partitions, runs the two solo searches, then one capacity_job run per ray.",
)
def capacity_region_sensor(
    context: dg.SensorEvaluationContext,
    collobench: CollobenchResource,
    capacity_search: CapacitySearchResource,
) -> dg.SensorResult:
    folder = capacity_search.out_path(collobench) / REGIONS_FOLDER
    try:
        tick = plan_tick(context.instance, collobench, folder)
    except PoolError as error:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"pools file: {error}"))
    for note in tick.waiting + tick.problems:
        context.log.info(note)
    added = (
        [dg.AddDynamicPartitionsRequest(CAPACITY_PARTITIONS, partition_keys=tick.to_add)]
        if tick.to_add
        else []
    )
    if tick.requests or added:
        return dg.SensorResult(run_requests=tick.requests, dynamic_partitions_requests=added)
    reason = "; ".join(tick.problems) or f"no region request in {folder} needs a run"
    return dg.SensorResult(skip_reason=dg.SkipReason(reason))


class RegionPlanConfig(dg.Config):
    """Launchpad config of `capacity_region_job`: which region to search, and how."""

    spec: str = Field(description="The spec file's stem (specs/<spec>.yaml).")
    pipelines: list[str] = Field(description="The two pipelines, A and B.")
    rays: int = Field(default=5, description="Rays between the two axes.")
    search: CapacityConfig = Field(
        default_factory=CapacityConfig,
        description="Options of every search of the region (percentile, precision, max_probes, "
        "probe_s; slo_ms and with_rates are refused: each pipeline keeps its spec's slo_ms).",
    )


@dg.op(name="plan_capacity_region")
def plan_capacity_region(
    context: dg.OpExecutionContext,
    config: RegionPlanConfig,
    collobench: CollobenchResource,
    capacity_search: CapacitySearchResource,
) -> None:
    """Add the region's partitions and write its request; capacity_region_sensor runs it."""
    if len(config.pipelines) != 2:
        raise dg.Failure(f"a region needs exactly two pipelines, got {config.pipelines}")
    search = config.search.model_dump(exclude_none=True)
    try:
        region_search_config(search)
    except ValueError as error:
        raise dg.Failure(str(error)) from None
    request = RegionRequest(
        spec=config.spec,
        pipelines=(config.pipelines[0], config.pipelines[1]),
        rays=config.rays,
        search=search,
    )
    keys = add_region_partitions(context.instance, config.spec, *request.pipelines, config.rays)
    path = write_region_request(capacity_search.out_path(collobench), request)
    context.log.info(
        f"region request {path}: capacity_region_sensor runs {keys[0]} and {keys[1]}, then "
        f"{len(keys) - 2} ray(s)"
    )


@dg.job(
    name="capacity_region_job",
    description="Plan a two-pipeline capacity region: adds its capacity partitions and writes "
    "its request; capacity_region_sensor then runs the solo searches and one run per ray.",
)
def capacity_region_job() -> None:
    plan_capacity_region()
