"""Device pools (bench_defs/core/pools.py): the pools file, the tags of a run, who picks a run's
pool (the sensor and the schedule: least loaded; a capacity region: round-robin by index) and a run
whose pool tag names no pool failing with one line before anything runs."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._core.remote_origin import (
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.test_utils import create_run_for_test

from bench_defs.assets.benchmark import benchmark_run
from bench_defs.capacity.assets import CAPACITY_PARTITIONS, CapacitySearchResource, capacity
from bench_defs.capacity.region_requests import (
    RegionRequest,
    add_region_partitions,
    plan_tick,
    write_region_request,
)
from bench_defs.core.pools import (
    LOCAL_POOL,
    POOL_TAG,
    POOLS_FILE_ENV,
    QUEUE_TAG,
    Pool,
    PoolChooser,
    PoolError,
    load_pools,
    pool_of,
    pool_tags,
)
from bench_defs.core.specs import SPEC_PARTITIONS
from bench_defs.schedules import nightly_benchmarks
from tests.dagster.specs import tiny_spec, write_spec
from tests.dagster.test_sensor import tick

A = Pool(name="host-a", queue="host-a", host="host-a", devices=1)
B = Pool(name="host-b", queue="host-b", host="host-b", devices=2)
REMOTE_ORIGIN = RemoteJobOrigin(
    RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("collobench"), "__repository__"),
    "benchmark_job",
)


@pytest.fixture
def two_pools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Pool]:
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump({"pools": [A.model_dump(), B.model_dump()]}))
    monkeypatch.setenv(POOLS_FILE_ENV, str(path))
    return [A, B]


def test_the_pools_file(tmp_path: Path) -> None:
    assert load_pools(tmp_path / "absent.yaml") == [LOCAL_POOL]
    assert pool_tags(LOCAL_POOL) == {POOL_TAG: "local", QUEUE_TAG: "dagster"}
    path = tmp_path / "pools.yaml"
    for document, said in [
        ({"pools": [A.model_dump(), A.model_dump()]}, "duplicate names host-a"),
        ({"pools": [A.model_dump() | {"gpus": 2}]}, "pools.0.gpus: Extra inputs"),
        ({"pools": [A.model_dump() | {"name": "Host A"}]}, "pools.0.name: String should match"),
        ({"pools": []}, "pools: List should have at least 1 item"),
        ("pools: [\n", "while parsing"),
    ]:
        path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
        with pytest.raises(PoolError) as raised:
            load_pools(path)
        assert said in str(raised.value) and "\n" not in str(raised.value), raised.value


def test_the_tags_of_a_run_against_the_pools() -> None:
    assert pool_of(pool_tags(B), [A, B]) == (B, [])
    found, warnings = pool_of({POOL_TAG: "host-b", QUEUE_TAG: "host-a"}, [A, B])
    assert found == B and "not pool 'host-b'" in warnings[0]
    found, warnings = pool_of({}, [A, B])
    assert found is None and "no collobench/gpu-pool tag" in warnings[0]
    with pytest.raises(PoolError, match=r"'h100' names no pool \(pools: host-a, host-b\)"):
        pool_of({POOL_TAG: "h100"}, [A, B])


def test_the_chooser_takes_the_least_loaded_pool(instance: dg.DagsterInstance) -> None:
    # idle pools fill round-robin, weighted by their devices
    idle = PoolChooser([A, B], {})
    assert [idle.take().name for _ in range(5)] == [
        "host-a",
        "host-b",
        "host-b",
        "host-a",
        "host-b",
    ]
    # the instance's queued and running runs count; finished ones do not
    for status in (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTED):
        create_run_for_test(
            instance,
            job_name="benchmark_job",
            tags=pool_tags(A),
            status=status,
            remote_job_origin=REMOTE_ORIGIN,  # a queued run needs one
        )
    create_run_for_test(
        instance, job_name="benchmark_job", tags=pool_tags(B), status=dg.DagsterRunStatus.SUCCESS
    )
    loaded = PoolChooser.from_instance(instance, [A, B])
    assert loaded.load == {"host-a": 2, "host-b": 0}
    assert [loaded.take().name for _ in range(4)] == ["host-b", "host-b", "host-b", "host-b"]


def test_the_sensor_and_the_schedule_spread_runs_over_the_pools(
    two_pools: list[Pool],
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    resources: dict[str, Any],
    specs_dir: Path,
) -> None:
    first = tick(instance, defs, resources, None)
    for name in ("one", "two", "three"):
        write_spec(specs_dir, name, tiny_spec(name, nightly=True))
    requests = tick(instance, defs, resources, first.cursor).run_requests or []
    assert [(r.partition_key, r.tags[POOL_TAG], r.tags[QUEUE_TAG]) for r in requests] == [
        ("one", "host-a", "host-a"),
        ("three", "host-b", "host-b"),
        ("two", "host-b", "host-b"),
    ]
    context = dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=dt.datetime(2026, 1, 2, 2, 0, tzinfo=dt.UTC),
        resources=resources,
        repository_def=defs.get_repository_def(),
    )
    nightly = nightly_benchmarks(context)
    assert isinstance(nightly, list)
    assert [(r.partition_key, r.tags[POOL_TAG]) for r in nightly] == [
        ("one", "host-a"),
        ("three", "host-b"),
        ("two", "host-b"),
    ]


def test_a_regions_runs_go_round_robin_over_the_pools(
    two_pools: list[Pool],
    instance: dg.DagsterInstance,
    resources: dict[str, Any],
    specs_dir: Path,
    home: Path,
) -> None:
    spec = tiny_spec("pair")
    spec["pipelines"] = [spec["pipelines"][0], copy.deepcopy(spec["pipelines"][0]) | {"name": "b"}]
    write_spec(specs_dir, "pair", spec)
    folder = home / "capacity" / "regions"
    request = RegionRequest(spec="pair", pipelines=("p", "b"), rays=3)
    write_region_request(home / "capacity", request)
    solos = plan_tick(instance, resources["collobench"], folder)
    assert [(r.partition_key, r.tags[POOL_TAG]) for r in solos.requests] == [
        ("pair|p", "host-a"),
        ("pair|b", "host-b"),
    ]
    add_region_partitions(instance, "pair", "p", "b", 3)
    for key in ("pair|p", "pair|b"):
        instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key=capacity.key, partition=key)
        )
    rays = plan_tick(instance, resources["collobench"], folder)
    assert [(r.partition_key, r.tags[POOL_TAG], r.tags[QUEUE_TAG]) for r in rays.requests] == [
        ("pair|p+b@ray1of3", "host-a", "host-a"),
        ("pair|p+b@ray2of3", "host-b", "host-b"),
        ("pair|p+b@ray3of3", "host-a", "host-a"),
    ]


@pytest.mark.spawns
def test_a_run_on_an_unknown_pool_fails_with_one_line(
    instance: dg.DagsterInstance, resources: dict[str, Any], specs_dir: Path, home: Path
) -> None:
    write_spec(specs_dir, "tiny", tiny_spec())
    instance.add_dynamic_partitions(SPEC_PARTITIONS, ["tiny"])
    result = dg.materialize(
        [benchmark_run],
        partition_key="tiny",
        instance=instance,
        resources=resources,
        tags={POOL_TAG: "h100", QUEUE_TAG: "gpu-b"},
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    error = failure.step_failure_data.error
    assert error is not None
    assert "run tag collobench/gpu-pool='h100' names no pool (pools: local)" in error.message
    assert len(error.message.strip().splitlines()) == 1
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())  # nothing ran

    # a capacity search too, before its search folder is made
    instance.add_dynamic_partitions(CAPACITY_PARTITIONS, ["tiny|p"])
    search = dg.materialize(
        [capacity],
        partition_key="tiny|p",
        instance=instance,
        resources=resources | {"capacity_search": CapacitySearchResource()},
        tags={POOL_TAG: "h100"},
        raise_on_error=False,
    )
    assert not search.success
    failure = next(e for e in search.all_events if e.is_step_failure)
    assert "names no pool (pools: local)" in str(failure.step_failure_data.error)
    assert not (home / "capacity").exists()
