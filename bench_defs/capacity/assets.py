"""The `capacity` asset: one capacity search per dynamic partition `<spec>|<target>`
(keys).

Materialising a partition runs `collobench capacity` in a Pipes child in its own process group
(`bench_defs.capacity.runner`, started by `GroupPipesClient` as `benchmark_run` is), writing
`<capacity dir>/<search id>/capacity.json`; the asset reports that result as metadata
(certified_qps, estimate_qps, estimate_ci95, bracket, stop_reason, probes, the files) and
evaluates its two checks (bench_defs.capacity.checks). A solo target searches one pipeline
(search id `<spec>-<pipeline>-<root run id[:8]>`). A ray target (`A+B@ray<k>of<n>`) searches
the scale s along ray k of the region of A and B (`--region A,B --rays n --ray k --solo
A=QPS,B=QPS --search-id REGION_ID`, in `<REGION_ID>-ray<k>`); it needs A's and B's solo
capacities: certified_qps, else estimate_qps, of the latest materialisation of `<spec>|A`
and `<spec>|B`. The rays of one region share REGION_ID through the region request's run tag
(or the backfill id). Each partition is its own run, tagged with a device pool
(`collobench/gpu-pool`, bench_defs/core/pools.py), so the run queue runs at most a pool's device
count of searches at once and the rays of a region, spread over the pools, run on several hosts
at once. A re-executed run resumes its search (same root run id, same tags: the probes recorded
so far are kept).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from bench_defs.capacity.checks import (
    DEFAULT_PRECISION,
    bracket_check,
    capacity_check_specs,
    monotone_check,
    result_metadata,
)
from bench_defs.capacity.keys import (
    CapacityTarget,
    parse_capacity_key,
    ray_search_id,
    region_id_of,
    search_id_of,
)
from bench_defs.capacity.region_summary import write_region_summary
from bench_defs.core.pools import check_run_pool, default_pool
from bench_defs.core.resources import CollobenchResource, GroupPipesClient, WarehouseResource
from bench_defs.core.specs import DEFAULT_DEVICE, read_spec_state, run_tags
from stages import settings
from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    SEARCH_FILE,
    CapacityResult,
    SearchSettings,
)

CAPACITY_GROUP = "capacity"
CAPACITY_PARTITIONS = "capacity_targets"
capacity_partitions = dg.DynamicPartitionsDefinition(name=CAPACITY_PARTITIONS)
"""The `capacity` asset's partitions: `<spec>|<pipeline>` and `<spec>|<A>+<B>@ray<k>of<n>`."""
TARGET_TAG = "collobench/capacity_target"
"""Run tag: the partition a capacity run searches."""
REGION_TAG = "collobench/capacity_region"
"""Run tag shared by the runs of one region request (filter by it in the Runs page); the rays
of one region share their region id through it."""
BACKFILL_TAG = "dagster/backfill"


class CapacityConfig(dg.Config):
    """Launchpad options of one capacity search, passed to `collobench capacity`; a field left
    out keeps the CLI's default (the spec's slo_ms, p99, 5% precision, 14 probes)."""

    slo_ms: float | None = Field(default=None, description="Latency objective (ms).")
    percentile: float | None = Field(default=None, description="The percentile the SLO bounds.")
    precision: float | None = Field(default=None, description="Stop at hi / lo <= 1 + this.")
    max_probes: int | None = Field(default=None, description="Probe budget of the search.")
    probe_s: float | None = Field(default=None, description="Each probe's load window (s).")
    with_rates: dict[str, float] | None = Field(
        default=None,
        description="Solo searches only: co-runners at fixed rates (q/s), as --with NAME=RATE.",
    )

    def cli_options(self) -> list[str]:
        """The `collobench capacity` options these settings stand for."""
        options: list[str] = []
        for flag, value in (
            ("--slo-ms", self.slo_ms),
            ("--percentile", self.percentile),
            ("--precision", self.precision),
            ("--max-probes", self.max_probes),
            ("--probe-s", self.probe_s),
        ):
            if value is not None:
                options += [flag, f"{value:g}"]
        for name, rate in sorted((self.with_rates or {}).items()):
            options += ["--with", f"{name}={rate:g}"]
        return options


def search_config(options: dict[str, Any]) -> CapacityConfig:
    """Search options (a region request's) as a CapacityConfig; ValueError naming any
    unknown option (the Launchpad refuses those itself)."""
    unknown = sorted(set(options) - set(CapacityConfig.model_fields))
    if unknown:
        raise ValueError(f"unknown search option(s) {', '.join(unknown)}")
    return CapacityConfig(**options)


class CapacitySearchResource(dg.ConfigurableResource):
    """How the `capacity` asset runs the CLI and where searches go."""

    cli: list[str] | None = Field(
        default=None,
        description="The command that runs collobench (default: this Python, -m stages.cli).",
    )
    mlflow: bool | None = Field(
        default=None,
        description="Pass --mlflow (true) or --no-mlflow (false); unset: the CLI's default "
        "($COLLOBENCH_MLFLOW, $MLFLOW_TRACKING_URI).",
    )
    out_dir: str | None = Field(
        default=None,
        description="Parent folder of the searches (default <home>/capacity when the collobench "
        "resource names a home, else the settings' <results dir>/capacity).",
    )

    def command(self, python: str) -> list[str]:
        return list(self.cli) if self.cli else [python, "-m", "stages.cli"]

    def out_path(self, collobench: CollobenchResource) -> Path:
        """`out_dir`, else `capacity/` under the collobench resource's home, else the settings'
        capacity folder (`$COLLOBENCH_RESULTS_DIR/capacity`, shared by a cluster's hosts)."""
        if self.out_dir:
            return Path(self.out_dir).absolute()
        if collobench.home:
            return collobench.home_path() / "capacity"
        return settings.capacity_dir()

    def mlflow_options(self) -> list[str]:
        if self.mlflow is None:
            return []
        return ["--mlflow"] if self.mlflow else ["--no-mlflow"]


def _metadata_float(entry: Any) -> float | None:
    value = getattr(entry, "value", entry)
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class MaterialisedSoloCapacity:
    """What a ray takes from a solo partition's latest materialisation."""

    capacity_qps: float
    search_id: str


def solo_capacity(instance: dg.DagsterInstance, key: str) -> MaterialisedSoloCapacity:
    """The capacity a ray scales by (as the region CLI does): the certified_qps of the latest
    materialisation of a solo partition, else its estimate_qps, and its search id; a Failure
    naming the partition to materialise first when there is none, or when it found neither."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("capacity"), asset_partitions=[key]),
        limit=1,
    ).records
    materialization = records[0].asset_materialization if records else None
    if materialization is None:
        raise dg.Failure(
            f"the ray needs the solo capacity of partition {key!r}: materialise capacity "
            f"partition {key!r} first"
        )
    metadata = materialization.metadata
    for name in ("certified_qps", "estimate_qps"):
        value = _metadata_float(metadata.get(name))
        if value is not None and value > 0:
            return MaterialisedSoloCapacity(
                value, str(getattr(metadata.get("search_id"), "value", ""))
            )
    raise dg.Failure(
        f"the latest solo search of {key!r} found no capacity (stop reason "
        f"{getattr(metadata.get('stop_reason'), 'value', '?')}): the region has no extent "
        "along that axis"
    )


def ray_group(tags: Mapping[str, str], root_run_id: str) -> str:
    """What ties the rays of one region together (their shared region id): the region
    request's tag (capacity_region_sensor), else the backfill's id, else this run's root id."""
    for tag in (REGION_TAG, BACKFILL_TAG):
        if tags.get(tag):
            return tags[tag]
    return root_run_id[:8]


def ray_options(target: CapacityTarget, solo_qps: Mapping[str, float]) -> list[str]:
    """`--region A,B --rays n --ray k --solo A=QPS,B=QPS`."""
    assert target.region is not None and target.ray is not None
    a, b = target.region
    return [
        "--region",
        f"{a},{b}",
        "--rays",
        str(target.rays),
        "--ray",
        str(target.ray),
        "--solo",
        f"{a}={solo_qps[a]:.6g},{b}={solo_qps[b]:.6g}",
    ]


@dataclass(frozen=True)
class SearchPlan:
    """What one materialisation runs: the CLI's arguments after `capacity SPEC`, the folder
    its capacity.json lands in, and what the metadata should add (a ray's solo capacities)."""

    arguments: list[str]
    search_dir: Path
    extra_metadata: dict[str, Any]


def plan_search(
    context: dg.AssetExecutionContext, target: CapacityTarget, config: CapacityConfig, out: Path
) -> SearchPlan:
    """A solo search: new (`--pipeline NAME ... --search-id ID`) or, when the root run of this
    re-executed run started it, `--resume ID`. A ray: `--region ... --ray k --search-id
    REGION_ID`, searching in `<REGION_ID>-ray<k>` (the CLI resumes that folder itself)."""
    root = context.run.root_run_id or context.run.run_id
    if target.region is None:
        search_id = search_id_of(target, root)
        if (out / search_id / SEARCH_FILE).is_file():
            context.log.info(f"resuming search {search_id} (its probes so far are kept)")
            return SearchPlan(["--resume", search_id], out / search_id, {})
        arguments = ["--pipeline", target.pipeline, *config.cli_options()]
        return SearchPlan([*arguments, "--search-id", search_id], out / search_id, {})
    if config.slo_ms is not None or config.with_rates:
        raise dg.Failure(
            "a ray decides each pipeline by its own spec slo_ms, next to the other only: "
            "leave slo_ms and with_rates out of its config"
        )
    assert target.region is not None and target.ray is not None
    keys = target.solo_keys()
    solo = {
        name: solo_capacity(context.instance, key)
        for name, key in zip(target.region, keys, strict=True)
    }
    solo_qps = {name: found.capacity_qps for name, found in solo.items()}
    region_id = region_id_of(target, ray_group(context.run.tags, root))
    arguments = [*ray_options(target, solo_qps), *config.cli_options(), "--search-id", region_id]
    extra = {
        "region_id": region_id,
        "solo_capacity_qps": dg.MetadataValue.json(solo_qps),
        "solo_search_ids": dg.MetadataValue.json({n: f.search_id for n, f in solo.items()}),
    }
    return SearchPlan(arguments, out / ray_search_id(region_id, target.ray), extra)


def _check_spec(context: dg.AssetExecutionContext, target: CapacityTarget, spec_path: Path) -> None:
    """Fail with the reason when the spec is missing, invalid or lacks the target's pipelines."""
    if not spec_path.is_file():
        raise dg.Failure(f"{spec_path}: no such spec file (partition {context.partition_key!r})")
    state = read_spec_state(target.spec, spec_path)
    if state.normalized is None:
        raise dg.Failure("invalid spec: " + "; ".join(state.problems))
    names = {str(p.get("name")) for p in state.normalized.get("pipelines", [])}
    missing = [name for name in (target.region or (target.pipeline,)) if name not in names]
    if missing:
        raise dg.Failure(
            f"{spec_path.name} has no pipeline {', '.join(missing)} (it has {sorted(names)})"
        )


def search_command(
    context: dg.AssetExecutionContext,
    config: CapacityConfig,
    collobench: CollobenchResource,
    capacity_search: CapacitySearchResource,
    duckdb_warehouse: WarehouseResource,
) -> tuple[list[str], SearchPlan]:
    """The Pipes child's command line and the search's plan."""
    target = parse_capacity_key(context.partition_key)
    spec_path = collobench.spec_file(target.spec)
    _check_spec(context, target, spec_path)
    out = capacity_search.out_path(collobench)
    out.mkdir(parents=True, exist_ok=True)
    plan = plan_search(context, target, config, out)
    command = capacity_search.command(collobench.python_executable())
    command += ["capacity", str(spec_path), *plan.arguments, "--out", str(out)]
    command += ["--db", str(duckdb_warehouse.db_path()), *capacity_search.mlflow_options()]
    runner = [collobench.python_executable(), "-m", "bench_defs.capacity.runner", "--"]
    return runner + command, plan


def read_result(search_dir: Path) -> tuple[CapacityResult, float]:
    """The search's capacity.json and its precision (search.json; the default if absent)."""
    path = search_dir / CAPACITY_FILE
    if not path.is_file():
        raise dg.Failure(f"the search wrote no {path}")
    result = CapacityResult.model_validate_json(path.read_text())
    precision = DEFAULT_PRECISION
    if (search_dir / SEARCH_FILE).is_file():
        search = SearchSettings.model_validate_json((search_dir / SEARCH_FILE).read_text())
        precision = search.precision
    return result, precision


def load_probe_runs(context: dg.AssetExecutionContext, search_dir: Path, db_path: Path) -> None:
    """The search with its probes' run directories into the warehouse (the CLI loads the
    search's rows alone), so each probe's run, with the host it ran on, is queryable next to
    the benchmarks; nothing to do for a search without probe runs (simulated); a failure is a
    warning (the search's own result stands)."""
    from analysis.capacity.file_reader import read_search
    from analysis.capacity.warehouse_tables import load_capacity_dirs, probe_run_dirs

    try:
        if probe_run_dirs(read_search(search_dir)):
            load_capacity_dirs([search_dir], db_path, notify=context.log.warning)
    except Exception as error:
        context.log.warning(f"probe runs not loaded: {type(error).__name__}: {error}")


@dg.asset(
    partitions_def=capacity_partitions,
    group_name=CAPACITY_GROUP,
    kinds={"python"},
    check_specs=capacity_check_specs("capacity"),
    description="One capacity search: partition `<spec>|<pipeline>` (solo) or "
    "`<spec>|<A>+<B>@ray<k>of<n>` (one ray of a region; needs both solo partitions first). "
    "Runs `collobench capacity` in its own process group; metadata: certified_qps, "
    "estimate_qps, estimate_ci95, bracket, stop_reason, probes, capacity.json.",
)
def capacity(
    context: dg.AssetExecutionContext,
    config: CapacityConfig,
    collobench: CollobenchResource,
    capacity_search: CapacitySearchResource,
    duckdb_warehouse: WarehouseResource,
    pipes_client: GroupPipesClient,
) -> dg.MaterializeResult:
    pool = check_run_pool(context)  # an unknown pool fails here, before anything runs
    command, plan = search_command(context, config, collobench, capacity_search, duckdb_warehouse)
    context.log.info(f"capacity search {context.partition_key} in {plan.search_dir}")
    pipes_client.run(context=context, command=command, env=collobench.child_env())
    result, precision = read_result(plan.search_dir)
    load_probe_runs(context, plan.search_dir, duckdb_warehouse.db_path())
    metadata = result_metadata(result, plan.search_dir) | plan.extra_metadata
    target = parse_capacity_key(context.partition_key)
    if target.is_ray:
        try:
            metadata |= write_region_summary(
                collobench.spec_file(target.spec),
                target,
                plan.search_dir.parent,
                plan.extra_metadata,
                result.percentile,
                duckdb_warehouse.db_path(),
            )
        except Exception as error:  # the ray's own result stands without the summary
            context.log.warning(f"region summary not written: {type(error).__name__}: {error}")
    metadata["gpu_pool"] = pool
    return dg.MaterializeResult(
        metadata=metadata,
        data_version=dg.DataVersion(result.search_id),
        check_results=[bracket_check(result, precision), monotone_check(result)],
    )


capacity_job = dg.define_asset_job(
    "capacity_job",
    selection=dg.AssetSelection.assets(capacity),
    # capacity_region_sensor spreads a region's runs over the pools; a Launchpad run or a
    # backfill goes to the first pool unless its tags say otherwise.
    tags=run_tags(DEFAULT_DEVICE, default_pool()),
    executor_def=dg.in_process_executor,  # one step; runs in a Celery worker (see jobs.py)
    description="One capacity search per partition (<spec>|<pipeline> or "
    "<spec>|<A>+<B>@ray<k>of<n>). Launchpad config: ops.capacity.config {slo_ms, percentile, "
    "precision, max_probes, probe_s, with_rates}.",
)
