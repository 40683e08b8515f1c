"""`spec_files_sensor` over a temporary specs folder: first sight, add, change, delete, an
invalid file and a repeated tick, each through `build_sensor_context` as Dagster runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.core.pools import POOL_TAG, QUEUE_TAG
from bench_defs.core.specs import SPEC_PARTITIONS, file_hash
from bench_defs.sensors import spec_files_sensor
from tests.dagster.specs import tiny_spec, write_spec


class Ticker:
    """Evaluates the sensor as the daemon does: definitions (for the partitioned job),
    resources, the last cursor; then applies its partition requests to the instance."""

    def __init__(
        self, instance: dg.DagsterInstance, defs: dg.Definitions, resources: dict[str, Any]
    ) -> None:
        self.instance, self.defs, self.resources = instance, defs, resources

    def __call__(self, cursor: str | None) -> dg.SensorResult:
        return tick(self.instance, self.defs, self.resources, cursor)


@pytest.fixture
def ticker(instance: dg.DagsterInstance, defs: dg.Definitions, resources: dict[str, Any]) -> Ticker:
    return Ticker(instance, defs, resources)


def tick(
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    resources: dict[str, Any],
    cursor: str | None,
) -> dg.SensorResult:
    """One evaluation; the partition requests are applied as the daemon applies them."""
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, resources=resources
    )
    result = spec_files_sensor(context)
    assert isinstance(result, dg.SensorResult)
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(SPEC_PARTITIONS, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(SPEC_PARTITIONS, key)
    return result


def partitions(instance: dg.DagsterInstance) -> list[str]:
    return sorted(instance.get_dynamic_partitions(SPEC_PARTITIONS))


def test_sensor_lifecycle(instance: dg.DagsterInstance, ticker: Ticker, specs_dir: Path) -> None:
    write_spec(specs_dir, "old", tiny_spec("old"))
    # first sight: the files already there become partitions, nothing runs
    first = ticker(None)
    assert not first.run_requests and partitions(instance) == ["old"]
    assert json.loads(first.cursor or "") == {"old": file_hash(specs_dir / "old.yaml")}

    # a new file: its partition is added and a run requested for it
    write_spec(specs_dir, "new", tiny_spec("new"))
    added = ticker(first.cursor)
    assert [
        (r.partition_key, r.tags[POOL_TAG], r.tags[QUEUE_TAG]) for r in added.run_requests or []
    ] == [("new", "local", "dagster")]
    assert partitions(instance) == ["new", "old"]

    # the same folder again: nothing to do, said so
    repeated = ticker(added.cursor)
    assert not repeated.run_requests and not repeated.dynamic_partitions_requests
    assert "no new, changed or deleted" in str(repeated.skip_reason)

    # a changed file: a new run, keyed by the new content hash
    write_spec(specs_dir, "new", tiny_spec("new", seed=7))
    changed = ticker(repeated.cursor)
    requests = changed.run_requests or []
    assert [r.partition_key for r in requests] == ["new"]
    assert requests[0].run_key != (added.run_requests or [])[0].run_key
    assert not changed.dynamic_partitions_requests

    # a deleted file: its partition goes, nothing runs
    (specs_dir / "old.yaml").unlink()
    deleted = ticker(changed.cursor)
    assert not deleted.run_requests and partitions(instance) == ["new"]
    assert "old" not in json.loads(deleted.cursor or "")
    assert not ticker(deleted.cursor).dynamic_partitions_requests


def test_invalid_file_is_a_skip_reason_then_runs_once_fixed(
    instance: dg.DagsterInstance, ticker: Ticker, specs_dir: Path
) -> None:
    cursor = ticker(None).cursor  # empty folder
    broken = tiny_spec("broken")
    broken["pipelines"][0]["loadgen"]["rtae"] = 5  # a typo
    write_spec(specs_dir, "broken", broken)
    write_spec(specs_dir, "garbage", "name: [unclosed\n")
    result = ticker(cursor)
    assert not result.run_requests and partitions(instance) == []
    reason = str(result.skip_reason)
    assert "broken.yaml" in reason and "rtae" in reason and "garbage.yaml" in reason
    # still broken: still skipped with the errors, never a crash, nothing requested
    again = ticker(result.cursor)
    assert not again.run_requests and "rtae" in str(again.skip_reason)
    # fixed: it runs
    write_spec(specs_dir, "broken", tiny_spec("broken"))
    fixed = ticker(again.cursor)
    assert [r.partition_key for r in fixed.run_requests or []] == ["broken"]
    assert partitions(instance) == ["broken"]
