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

Each requested run goes to the least-loaded device pool (bench_defs/core/pools.py: queued and
running runs per device, ties in the pools file's order); a pools file that cannot be read
skips the tick with its error.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from bench_defs.core.pools import PoolChooser, PoolError, load_pools
from bench_defs.core.resources import CollobenchResource
from bench_defs.core.sensor_interval import sensor_interval_s
from bench_defs.core.specs import (
    SPEC_HASH_TAG,
    SPEC_PARTITIONS,
    devices_of,
    file_hash,
    read_spec_state,
    run_tags,
    spec_files,
)
from bench_defs.jobs import benchmark_job

PartitionsRequest = dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest


@dataclass
class _Tick:
    """One tick's walk over the spec files: the new cursor, the partitions to add, the runs
    to request and the problems of invalid files."""

    seen: dict[str, str]  # the previous cursor
    existing: set[str]  # the partitions there now
    first_tick: bool
    chooser: PoolChooser
    cursor: dict[str, str] = field(default_factory=dict)
    to_add: list[str] = field(default_factory=list)
    requests: list[dg.RunRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def visit(self, key: str, path: Path) -> None:
        """Take one spec file into account (see the module docstring for the rules)."""
        try:
            digest = file_hash(path)
        except OSError as error:
            self.problems.append(f"{path}: cannot read: {error.strerror}")
            return
        if self.seen.get(key) == digest:
            self.cursor[key] = digest
            if key not in self.existing:
                self.to_add.append(key)  # removed by hand: put it back, nothing to run
            return
        state = read_spec_state(key, path)
        if state.normalized is None:
            self.problems += state.problems
            if key in self.seen:
                self.cursor[key] = self.seen[key]  # keep the last valid hash: a fix runs it
            return
        self.cursor[key] = digest
        if key not in self.existing:
            self.to_add.append(key)
        if self.first_tick:
            return
        self.requests.append(
            dg.RunRequest(
                run_key=f"{key}:{digest[:16]}",
                partition_key=key,
                tags={
                    **run_tags(devices_of(state.normalized), self.chooser.take(), state.normalized),
                    SPEC_HASH_TAG: digest,
                },
            )
        )


def _partition_requests(to_add: list[str], to_delete: list[str]) -> list[PartitionsRequest]:
    requests: list[PartitionsRequest] = []
    if to_add:
        requests.append(
            dg.AddDynamicPartitionsRequest(SPEC_PARTITIONS, partition_keys=sorted(to_add))
        )
    if to_delete:
        requests.append(
            dg.DeleteDynamicPartitionsRequest(SPEC_PARTITIONS, partition_keys=to_delete)
        )
    return requests


@dg.sensor(
    name="spec_files_sensor",
    job=benchmark_job,
    minimum_interval_seconds=sensor_interval_s(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A new or changed specs/*.yaml runs benchmark_job for its partition; a deleted "
    "one removes its partition; an invalid one is skipped with its validation errors.",
)
def spec_files_sensor(
    context: dg.SensorEvaluationContext, collobench: CollobenchResource
) -> dg.SensorResult:
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    try:
        chooser = PoolChooser.from_instance(context.instance, load_pools())
    except PoolError as error:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"pools file: {error}"))
    existing = set(context.instance.get_dynamic_partitions(SPEC_PARTITIONS))
    files = spec_files(collobench.specs_path())
    tick = _Tick(seen, existing, first_tick=context.cursor is None, chooser=chooser)
    for key, path in files.items():
        tick.visit(key, path)
    partition_requests = _partition_requests(tick.to_add, sorted(existing - files.keys()))
    new_cursor = json.dumps(tick.cursor, sort_keys=True)
    if tick.requests or partition_requests:
        for problem in tick.problems:
            context.log.warning(f"invalid spec skipped: {problem}")
        return dg.SensorResult(
            run_requests=tick.requests,
            dynamic_partitions_requests=partition_requests,
            cursor=new_cursor,
        )
    if tick.problems:
        reason = "invalid spec file(s): " + "; ".join(tick.problems)
    else:
        reason = "no new, changed or deleted spec files"
    return dg.SensorResult(skip_reason=dg.SkipReason(reason), cursor=new_cursor)
