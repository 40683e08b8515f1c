"""`spec_files_sensor`: every new or changed spec file in the specs folder becomes a benchmark.

The cursor is a JSON map partition key (file stem) -> sha256 of the file's bytes, so a
repeated tick does nothing twice:
- a new file adds its partition and requests a `benchmark_job` run for it;
- a changed file (new hash) requests a new run (run key = key and hash, so Dagster would
  refuse a duplicate too);
- a deleted file removes its partition (its materialisations stay in the event log);
- an invalid file requests nothing: the tick is skipped with its validation errors (or, when
  other files did request runs, they are logged as warnings); it is validated again on the
  next tick, and runs once fixed.
On the first tick (no cursor) the files already there are taken as the baseline: their
partitions are added, but nothing runs, so turning the sensor on never launches every shipped
benchmark at once. Launch those from the UI.
"""

import json

import dagster as dg

from bench_defs.jobs import benchmark_job
from bench_defs.resources import CollobenchResource
from bench_defs.specs import (
    SPEC_HASH_TAG,
    SPEC_PARTITIONS,
    devices_of,
    file_hash,
    read_spec_state,
    run_tags,
    spec_files,
)


@dg.sensor(
    name="spec_files_sensor",
    job=benchmark_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A new or changed specs/*.yaml runs benchmark_job for its partition; a deleted "
    "one removes its partition; an invalid one is skipped with its validation errors.",
)
def spec_files_sensor(
    context: dg.SensorEvaluationContext, collobench: CollobenchResource
) -> dg.SensorResult:
    first_tick = context.cursor is None
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    existing = set(context.instance.get_dynamic_partitions(SPEC_PARTITIONS))
    files = spec_files(collobench.specs_path())
    cursor: dict[str, str] = {}
    to_add: list[str] = []
    requests: list[dg.RunRequest] = []
    problems: list[str] = []
    for key, path in files.items():
        try:
            digest = file_hash(path)
        except OSError as error:
            problems.append(f"{path}: cannot read: {error.strerror}")
            continue
        if seen.get(key) == digest:
            cursor[key] = digest
            if key not in existing:
                to_add.append(key)  # removed by hand: put it back, nothing to run
            continue
        state = read_spec_state(key, path)
        if state.normalized is None:
            problems += state.problems
            if key in seen:
                cursor[key] = seen[key]  # keep the last valid hash: a fix runs it
            continue
        cursor[key] = digest
        if key not in existing:
            to_add.append(key)
        if first_tick:
            continue
        requests.append(
            dg.RunRequest(
                run_key=f"{key}:{digest[:16]}",
                partition_key=key,
                tags={**run_tags(devices_of(state.normalized)), SPEC_HASH_TAG: digest},
            )
        )
    to_delete = sorted(existing - files.keys())
    partition_requests: list[
        dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest
    ] = []
    if to_add:
        partition_requests.append(
            dg.AddDynamicPartitionsRequest(SPEC_PARTITIONS, partition_keys=sorted(to_add))
        )
    if to_delete:
        partition_requests.append(
            dg.DeleteDynamicPartitionsRequest(SPEC_PARTITIONS, partition_keys=to_delete)
        )
    new_cursor = json.dumps(cursor, sort_keys=True)
    if requests or partition_requests:
        for problem in problems:
            context.log.warning(f"invalid spec skipped: {problem}")
        return dg.SensorResult(
            run_requests=requests, dynamic_partitions_requests=partition_requests, cursor=new_cursor
        )
    if problems:
        reason = "invalid spec file(s): " + "; ".join(problems)
    else:
        reason = "no new, changed or deleted spec files"
    return dg.SensorResult(skip_reason=dg.SkipReason(reason), cursor=new_cursor)
