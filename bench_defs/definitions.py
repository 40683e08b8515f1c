"""Dagster definitions of collobench (`dagster dev -w workspace.yaml` loads them).

Assets: one per dataset and model builder (group `artifacts`); `benchmark_run` (one dynamic
partition per spec file), `warehouse` with its checks (group `benchmark`); the report assets
(group `reports`); `capacity` (one dynamic partition per search target `<spec>|<pipeline>` or
`<spec>|<A>+<B>@ray<k>of<n>`, with its checks; group `capacity`). Jobs `artifacts_job`,
`benchmark_job`, `capacity_job`, `capacity_region_job`; sensors `spec_files_sensor`,
`capacity_region_sensor`; schedule `nightly_benchmarks`. Nothing here imports torch: models
load in the Pipes child's workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from bench_defs.artifacts import artifact_assets
from bench_defs.benchmark import benchmark_run
from bench_defs.capacity_assets import CapacitySearchResource, capacity, capacity_job
from bench_defs.capacity_region import capacity_region_job, capacity_region_sensor
from bench_defs.jobs import artifacts_job, benchmark_job
from bench_defs.reports import report_assets
from bench_defs.resources import CollobenchResource, GroupPipesClient, WarehouseResource
from bench_defs.schedules import nightly_benchmarks
from bench_defs.sensors import spec_files_sensor
from bench_defs.warehouse import warehouse


def default_resources() -> dict[str, Any]:
    """The resources a deployment gets: everything from `stages.settings` and the env."""
    return {
        "collobench": CollobenchResource(),
        "duckdb_warehouse": WarehouseResource(),
        "pipes_client": GroupPipesClient(),
        "capacity_search": CapacitySearchResource(),
    }


def build_definitions(resources: Mapping[str, Any] | None = None) -> dg.Definitions:
    """The code location's definitions; `resources` replace the defaults by key (tests point
    them at temporary folders)."""
    return dg.Definitions(
        assets=[*artifact_assets, benchmark_run, warehouse, *report_assets, capacity],
        jobs=[artifacts_job, benchmark_job, capacity_job, capacity_region_job],
        sensors=[spec_files_sensor, capacity_region_sensor],
        schedules=[nightly_benchmarks],
        resources={**default_resources(), **(resources or {})},
    )


defs = build_definitions()
