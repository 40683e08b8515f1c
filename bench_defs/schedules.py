"""`nightly_benchmarks`: every night, one `benchmark_job` run per spec file with
`nightly: true`.

The cron is `0 2 * * *` (02:00) in UTC unless `$COLLOBENCH_NIGHTLY_CRON` and
`$COLLOBENCH_NIGHTLY_TIMEZONE` say otherwise (read when the code location loads). A plain
schedule, not one built from the partitioned job: Dagster refuses dynamic partitions there.
A spec whose partition does not exist yet (the sensor adds partitions) is skipped and logged.
Each run goes to the least-loaded device pool (bench_defs/core/pools.py), counting the runs this
evaluation requested, so a night's specs spread over every pool.
"""

import os

import dagster as dg

from bench_defs.core.pools import PoolChooser, PoolError, load_pools
from bench_defs.core.resources import CollobenchResource
from bench_defs.core.specs import (
    SPEC_HASH_TAG,
    SPEC_PARTITIONS,
    devices_of,
    read_spec_state,
    run_tags,
    spec_files,
)
from bench_defs.jobs import benchmark_job

CRON_ENV = "COLLOBENCH_NIGHTLY_CRON"
TIMEZONE_ENV = "COLLOBENCH_NIGHTLY_TIMEZONE"
DEFAULT_CRON = "0 2 * * *"


@dg.schedule(
    name="nightly_benchmarks",
    cron_schedule=os.environ.get(CRON_ENV, DEFAULT_CRON),
    execution_timezone=os.environ.get(TIMEZONE_ENV, "UTC"),
    job=benchmark_job,
    description="Runs every spec with `nightly: true` (cron from $COLLOBENCH_NIGHTLY_CRON, "
    "default 0 2 * * *).",
)
def nightly_benchmarks(
    context: dg.ScheduleEvaluationContext, collobench: CollobenchResource
) -> list[dg.RunRequest] | dg.SkipReason:
    try:
        chooser = PoolChooser.from_instance(context.instance, load_pools())
    except PoolError as error:
        return dg.SkipReason(f"pools file: {error}")
    partitions = set(context.instance.get_dynamic_partitions(SPEC_PARTITIONS))
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    requests = []
    for key, path in spec_files(collobench.specs_path()).items():
        state = read_spec_state(key, path)
        if state.normalized is None or not state.normalized.get("nightly"):
            continue
        if key not in partitions:
            context.log.warning(f"{path}: nightly, but no partition {key!r} yet; skipped")
            continue
        requests.append(
            dg.RunRequest(
                run_key=f"nightly:{key}:{day}",
                partition_key=key,
                tags={
                    **run_tags(devices_of(state.normalized), chooser.take(), state.normalized),
                    SPEC_HASH_TAG: state.content_hash,
                },
            )
        )
    return requests or dg.SkipReason("no spec file opts in with `nightly: true`")
