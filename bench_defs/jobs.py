"""Jobs: `artifacts_job` builds every dataset and model; `benchmark_job` (partitioned by spec
file, as its assets are) runs a benchmark, loads it into the warehouse and writes its reports."""

from __future__ import annotations

import dagster as dg

from bench_defs.assets.artifacts import ARTIFACTS_GROUP
from bench_defs.assets.benchmark import benchmark_run
from bench_defs.assets.reports import report_assets
from bench_defs.assets.warehouse import warehouse
from bench_defs.core.pools import default_pool
from bench_defs.core.specs import DEFAULT_DEVICE, run_tags

artifacts_job = dg.define_asset_job(
    "artifacts_job",
    selection=dg.AssetSelection.groups(ARTIFACTS_GROUP),
    description="Build (or find built) every dataset and model artefact.",
)

benchmark_job = dg.define_asset_job(
    "benchmark_job",
    selection=dg.AssetSelection.assets(benchmark_run, warehouse, *report_assets),
    # A Launchpad run goes to the first pool unless its tags say otherwise; the sensor and the
    # schedule pick the least-loaded pool (bench_defs/core/pools.py). The instance runs at most the
    # pool's device count at once (bench_defs/dagster.yaml, written by bench_defs.core.pools).
    tags=run_tags(DEFAULT_DEVICE, default_pool()),
    # In-process: the steps run one after another anyway (run, load, report), and a run that
    # dagster-celery's run launcher hands to a Celery worker executes in the worker's pool
    # process, which may not start multiprocessing children (the multiprocess executor fails
    # there: "daemonic processes are not allowed to have children").
    executor_def=dg.in_process_executor,
    description="One spec file's benchmark: run it (Pipes child), load it into DuckDB, check "
    "it and write its reports. Launchpad config: ops.benchmark_run.config "
    "{rate, duration_s, repeats, device}.",
)
