"""`warehouse`: loads a partition's latest benchmark run into DuckDB, then checks it.

The run directory comes from the `benchmark_run` materialisation of the same Dagster run when
there is one (on a cluster another host's run of the same partition may finish in between),
else the latest of the partition (its `run_dir` metadata); the one before it, when there is one,
is whose arrival schedule the reproducibility check compares with; both checks judge the run
against the benchmark's history in the warehouse (bench_defs.checks.history_checks), so the
partition's earlier runs (the last RECENT) are loaded too when the warehouse lacks them.
Loading goes through `analysis.warehouse.loader.load_runs` (idempotent, one writer at a time); the
checks and the report files read through read-only connections.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from bench_defs.assets.benchmark import BENCHMARK_GROUP, benchmark_run
from bench_defs.checks import history_checks, warehouse_checks
from bench_defs.core.resources import WarehouseResource
from bench_defs.core.specs import spec_partitions


@dataclass(frozen=True)
class MaterialisedRun:
    """What a `benchmark_run` materialisation recorded about its run."""

    run_id: str
    run_dir: Path
    dagster_run_id: str = ""
    """The Dagster run that materialised it."""


def metadata_value(metadata: dict[str, Any], key: str) -> Any:
    """A materialisation's metadata entry as a plain value."""
    entry = metadata.get(key)
    return getattr(entry, "value", entry)


def benchmark_runs(
    instance: dg.DagsterInstance, partition_key: str, limit: int = 2
) -> list[MaterialisedRun]:
    """The latest `limit` materialisations of `benchmark_run` for a partition, newest first."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=benchmark_run.key, asset_partitions=[partition_key]),
        limit=limit,
    ).records
    runs = []
    for record in records:
        materialization = record.asset_materialization
        if materialization is None:
            continue
        metadata = dict(materialization.metadata)
        run_id, run_dir = metadata_value(metadata, "run_id"), metadata_value(metadata, "run_dir")
        if run_id and run_dir:
            runs.append(MaterialisedRun(str(run_id), Path(str(run_dir)), record.run_id))
    return runs


def _no_benchmark_run(partition_key: str) -> dg.Failure:
    return dg.Failure(
        f"partition {partition_key!r} has no benchmark_run materialisation; "
        "materialise benchmark_run first"
    )


RECENT = 20
"""How many recent materialisations are searched for this Dagster run's own."""


def current_and_previous(
    context: dg.AssetExecutionContext,
) -> tuple[MaterialisedRun, MaterialisedRun | None]:
    """This Dagster run's own benchmark run when it materialised one, else the partition's
    latest; and the one materialised before it (or None). A Failure names the fix when the
    partition has none."""
    runs = benchmark_runs(context.instance, context.partition_key, limit=RECENT)
    if not runs:
        raise _no_benchmark_run(context.partition_key)
    own = [i for i, run in enumerate(runs) if run.dagster_run_id == context.run_id]
    index = own[0] if own else 0
    return runs[index], runs[index + 1] if index + 1 < len(runs) else None


def latest_run(context: dg.AssetExecutionContext) -> MaterialisedRun:
    """The benchmark run a report reads (see `current_and_previous`)."""
    return current_and_previous(context)[0]


def _load_history(
    context: dg.AssetExecutionContext, duckdb_warehouse: WarehouseResource, current: Any
) -> None:
    """Load the partition's earlier runs (the last RECENT materialisations) that the warehouse
    lacks, when their directories are there: the history the checks judge the run against (a
    pod's scratch warehouse on Kubernetes starts empty; a local one has them all already)."""
    earlier = [
        run
        for run in benchmark_runs(context.instance, context.partition_key, limit=RECENT)
        if run.run_id != current.run_id
    ]
    with duckdb_warehouse.reader() as connection:
        missing = [
            run.run_dir
            for run in earlier
            if warehouse_checks.loaded_run(connection, run.run_id) is None and run.run_dir.is_dir()
        ]
    if missing:
        duckdb_warehouse.load(missing)


@dg.asset(
    partitions_def=spec_partitions,
    deps=[benchmark_run],
    group_name=BENCHMARK_GROUP,
    kinds={"duckdb"},
    check_specs=warehouse_checks.check_specs("warehouse"),
    description="The partition's latest benchmark run loaded into the DuckDB warehouse "
    "(idempotent), with report.md, its plots and trace.json written beside the run; checks: "
    "validity, SLO verdicts, regression and reproducibility against the benchmark's history.",
)
def warehouse(
    context: dg.AssetExecutionContext, duckdb_warehouse: WarehouseResource
) -> dg.MaterializeResult:
    from analysis.reports.report_file import write_report
    from analysis.reports.trace import write_trace

    current, previous = current_and_previous(context)
    loaded = duckdb_warehouse.load([current.run_dir])[0]
    _load_history(context, duckdb_warehouse, current)
    files = write_report(duckdb_warehouse.db_path(), current.run_id)
    trace = write_trace(duckdb_warehouse.db_path(), current.run_id)
    previous_id = previous.run_id if previous else None
    with duckdb_warehouse.reader() as connection:
        results = [
            warehouse_checks.validity_result(connection, current.run_id),
            warehouse_checks.slo_result(connection, current.run_id),
            *history_checks.history_results(connection, previous_id, current.run_id),
        ]
    return dg.MaterializeResult(
        metadata={
            "run_id": current.run_id,
            "run_dir": dg.MetadataValue.path(str(current.run_dir)),
            "database": dg.MetadataValue.path(str(duckdb_warehouse.db_path())),
            "status": loaded.status,
            "replaced": loaded.replaced,
            "rows": dg.MetadataValue.json(dict(loaded.rows)),
            "report_md": dg.MetadataValue.path(str(files.report_md)),
            "trace": dg.MetadataValue.path(str(trace.path)),
            "previous_run_id": previous_id or "none",
        },
        data_version=dg.DataVersion(current.run_id),
        check_results=results,
    )
