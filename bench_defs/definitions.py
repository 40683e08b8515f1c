"""Dagster definitions of collobench (`dagster dev -w workspace.yaml` loads them).

Assets: one per dataset and model builder (group `artifacts`); one per model file a spec
names (group `model_files`, bench_defs/assets/model_files.py); `benchmark_run` (one dynamic
partition per spec file), `warehouse` with its checks (group `benchmark`); the report assets
(group `reports`); `capacity` (one dynamic partition per search target `<spec>|<pipeline>` or
`<spec>|<A>+<B>@ray<k>of<n>`, with its checks; group `capacity`); `ab_report` (one
`collobench ab` session per run; group `ab`). Jobs `artifacts_job`, `benchmark_job`,
`capacity_job`, `capacity_region_job`, `ab_comparison` (an A/B session from the Launchpad);
sensors `spec_files_sensor`, `capacity_region_sensor` (and `model_files_sensor` when a spec
names a model file); schedule `nightly_benchmarks`. Nothing here imports torch: models load in
the Pipes child's workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from bench_defs.ab.assets import ab_comparison, ab_report
from bench_defs.assets.artifacts import artifact_assets
from bench_defs.assets.benchmark import benchmark_run
from bench_defs.assets.model_files import model_file_definitions, with_model_file_deps
from bench_defs.assets.reports import report_assets
from bench_defs.assets.warehouse import warehouse
from bench_defs.capacity.assets import CapacitySearchResource, capacity, capacity_job
from bench_defs.capacity.region_requests import capacity_region_job, capacity_region_sensor
from bench_defs.core.resources import (
    CollobenchResource,
    GroupPipesClient,
    WarehouseResource,
    default_specs_dir,
)
from bench_defs.jobs import artifacts_job, benchmark_job
from bench_defs.schedules import nightly_benchmarks
from bench_defs.sensors import spec_files_sensor


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
    them at temporary folders). The model files the specs name become assets when it loads."""
    merged = {**default_resources(), **(resources or {})}
    collobench = merged["collobench"]
    specs_dir = default_specs_dir()
    if isinstance(collobench, CollobenchResource):
        specs_dir = collobench.specs_path()
    model = model_file_definitions(specs_dir)
    return dg.Definitions(
        assets=[
            *artifact_assets,
            *model.assets,
            with_model_file_deps(benchmark_run, model.files),
            warehouse,
            *report_assets,
            capacity,
            ab_report,
        ],
        jobs=[artifacts_job, benchmark_job, capacity_job, capacity_region_job, ab_comparison],
        sensors=[spec_files_sensor, capacity_region_sensor, *model.sensors],
        schedules=[nightly_benchmarks],
        resources=merged,
    )


defs = build_definitions()
