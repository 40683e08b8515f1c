"""The `capacity` asset, its checks, `capacity_job` and the region sensor, against a stand-in
CLI (tests/dagster/fake_capacity_cli.py) that writes valid capacity.json files in well under a
second; a slow test runs the real `collobench capacity` (the demo spec's solo search). A region
of real searches, solo first then its rays as separate runs through the sensor, runs in the
cluster test (tests/dagster/test_cluster.py), on two hosts."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from bench_defs.capacity.assets import (
    CAPACITY_PARTITIONS,
    TARGET_TAG,
    CapacityConfig,
    CapacitySearchResource,
    capacity,
)
from bench_defs.capacity.checks import BRACKET_CHECK, MONOTONE_CHECK
from bench_defs.capacity.region_requests import (
    REGION_TAG,
    RegionRequest,
    capacity_region_sensor,
    write_region_request,
)
from bench_defs.core.pools import POOL_TAG
from bench_defs.definitions import build_definitions
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import REPO

FAKE_CLI = Path(__file__).with_name("fake_capacity_cli.py")
SOLO_QPS = {"a": 120.0, "b": 60.0}


def two_pipeline_spec() -> dict[str, Any]:
    spec = tiny_spec("pair")
    first = spec["pipelines"][0]
    first["loadgen"]["slo_ms"] = 50
    spec["pipelines"] = [first | {"name": "a"}, copy.deepcopy(first) | {"name": "b"}]
    return spec


@pytest.fixture
def fake_resources(
    resources: dict[str, Any], specs_dir: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    write_spec(specs_dir, "pair", two_pipeline_spec())
    monkeypatch.setenv("FAKE_CAPACITY_QPS", json.dumps(SOLO_QPS))
    return resources | {
        "capacity_search": CapacitySearchResource(cli=[sys.executable, str(FAKE_CLI)], mlflow=False)
    }


def _materialize(
    key: str, instance: dg.DagsterInstance, resources: dict[str, Any], **kwargs: Any
) -> dg.ExecuteInProcessResult:
    if key not in instance.get_dynamic_partitions(CAPACITY_PARTITIONS):
        instance.add_dynamic_partitions(CAPACITY_PARTITIONS, [key])
    return dg.materialize(
        [capacity], partition_key=key, instance=instance, resources=resources, **kwargs
    )


def _metadata(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    (event,) = result.get_asset_materialization_events()
    return {key: value.value for key, value in event.materialization.metadata.items()}


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {check.check_name: check for check in result.get_asset_check_evaluations()}


def _argv(metadata: dict[str, Any]) -> list[str]:
    return json.loads((Path(str(metadata["search_dir"])) / "argv.json").read_text())["argv"]


@pytest.mark.spawns
def test_a_solo_partition_runs_the_cli_and_reports_its_result(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], home: Path, specs_dir: Path
) -> None:
    config = {"ops": {"capacity": {"config": {"probe_s": 3, "precision": 0.5}}}}
    result = _materialize("pair|a", instance, fake_resources, run_config=config)
    assert result.success
    metadata = _metadata(result)
    assert metadata["certified_qps"] == SOLO_QPS["a"] and metadata["stop_reason"] == "converged"
    assert metadata["bracket"] == [120.0, pytest.approx(124.8)] and metadata["probes"] == 2
    assert metadata["estimate_ci95"] == [120.0, pytest.approx(124.8)]
    assert "| 1 | search | 124.8 | - | 1 | 1000 | 40 | missed |" in metadata["probes_table"]
    search_dir = Path(str(metadata["search_dir"]))
    assert search_dir.parent == home / "capacity"
    assert search_dir.name == f"pair-a-{result.run_id[:8]}" == metadata["search_id"]
    assert Path(str(metadata["capacity_json"])).is_file()
    assert metadata["report"] == str(search_dir / "report.md")
    assert metadata["plot_path"] == str(search_dir / "p99_vs_rate.png")
    assert metadata["plot"].startswith("![p99 against offered rate](data:image/png;base64,iVBOR")
    argv = _argv(metadata)
    assert argv[:4] == ["capacity", str(specs_dir / "pair.yaml"), "--pipeline", "a"]
    assert argv[4:8] == ["--precision", "0.5", "--probe-s", "3"]
    assert argv[argv.index("--db") + 1] == str(home / "results.duckdb")
    assert "--no-mlflow" in argv and argv[argv.index("--search-id") + 1] == search_dir.name
    checks = _checks(result)
    assert checks[BRACKET_CHECK].passed and checks[MONOTONE_CHECK].passed


@pytest.mark.spawns
@pytest.mark.slow  # four in-process runs, each with its Pipes child
def test_a_ray_reads_the_solo_capacities_of_its_pipelines(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any]
) -> None:
    missing = _materialize("pair|a+b@ray2of3", instance, fake_resources, raise_on_error=False)
    assert not missing.success
    failure = next(event for event in missing.all_events if event.is_step_failure)
    assert "materialise capacity partition 'pair|a' first" in str(failure.step_failure_data.error)
    for name in SOLO_QPS:
        assert _materialize(f"pair|{name}", instance, fake_resources).success
    ray = _materialize("pair|a+b@ray2of3", instance, fake_resources)
    assert ray.success
    metadata = _metadata(ray)
    argv = _argv(metadata)
    assert argv[2:10] == ["--region", "a,b", "--rays", "3", "--ray", "2", "--solo", "a=120,b=60"]
    region_id = f"pair-a-b-3rays-{ray.run_id[:8]}"  # no region tag, no backfill: the run's id
    assert argv[argv.index("--search-id") + 1] == metadata["region_id"] == region_id
    assert Path(str(metadata["search_dir"])).name == f"{region_id}-ray2"
    assert metadata["solo_capacity_qps"] == SOLO_QPS
    solo_ids = metadata["solo_search_ids"]
    assert set(solo_ids) == {"a", "b"} and solo_ids["a"].startswith("pair-a-")
    assert (Path(str(metadata["search_dir"])).parent / solo_ids["a"] / "capacity.json").is_file()
    assert metadata["pipeline"] == "a+b" and metadata["certified_qps"] == 0.8
    with_slo = {"ops": {"capacity": {"config": {"slo_ms": 20}}}}
    refused = _materialize(
        "pair|a+b@ray1of3", instance, fake_resources, run_config=with_slo, raise_on_error=False
    )
    failure = next(event for event in refused.all_events if event.is_step_failure)
    assert "leave slo_ms and with_rates out" in str(failure.step_failure_data.error)


@pytest.mark.spawns
def test_an_unknown_pipeline_fails_before_any_search(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], home: Path
) -> None:
    result = _materialize("pair|c", instance, fake_resources, raise_on_error=False)
    failure = next(event for event in result.all_events if event.is_step_failure)
    assert "pair.yaml has no pipeline c" in str(failure.step_failure_data.error)
    assert not (home / "capacity").exists() or not any((home / "capacity").iterdir())


@pytest.mark.spawns
def test_checks_fail_on_a_wide_bracket_and_noisy_probes(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    crafted = {"stop_reason": "max_probes", "bracket": [50, 100], "monotonicity_violations": 2}
    monkeypatch.setenv("FAKE_CAPACITY_OVERRIDES", json.dumps(crafted))
    result = _materialize("pair|a", instance, fake_resources)
    assert result.success  # a failed check does not fail the search: the result is kept
    checks = _checks(result)
    bracket, monotone = checks[BRACKET_CHECK], checks[MONOTONE_CHECK]
    assert not bracket.passed and bracket.severity == dg.AssetCheckSeverity.WARN
    assert "max_probes after 2 probes with hi/lo 2" in str(bracket.description)
    assert not monotone.passed and monotone.metadata["monotonicity_violations"].value == 2


@pytest.mark.spawns
def test_a_failing_cli_fails_the_step(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_CAPACITY_EXIT", "2")
    result = _materialize("pair|a", instance, fake_resources, raise_on_error=False)
    assert not result.success
    failure = next(event for event in result.all_events if event.is_step_failure)
    assert "exited with code 2" in str(failure.step_failure_data.error)


def _tick(
    instance: dg.DagsterInstance, defs: dg.Definitions, resources: dict[str, Any]
) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance, definitions=defs, resources=resources
    ) as context:
        result = capacity_region_sensor(context)
    assert isinstance(result, dg.SensorResult)
    return result


def _requested(result: dg.SensorResult) -> list[dg.RunRequest]:
    return list(result.run_requests or [])


def run_region(
    instance: dg.DagsterInstance, resources: dict[str, Any], plan: dict[str, Any]
) -> list[tuple[dg.RunRequest, dg.ExecuteInProcessResult]]:
    """Plan a region with capacity_region_job, then run what capacity_region_sensor requests,
    each request as its own capacity_job run (as the run queue would launch them): the solo
    searches on the first tick, the rays on the next. Returns every request and its run."""
    defs = build_definitions(resources)
    planned = defs.resolve_job_def("capacity_region_job").execute_in_process(
        run_config={"ops": {"plan_capacity_region": {"config": plan}}}, instance=instance
    )
    assert planned.success
    job = defs.resolve_job_def("capacity_job")
    done = []
    for _tick_number in range(2):
        for request in _requested(_tick(instance, defs, resources)):
            assert request.partition_key is not None
            result = job.execute_in_process(
                partition_key=request.partition_key,
                run_config=request.run_config,
                tags=request.tags,
                instance=instance,
            )
            done.append((request, result))
    return done


@pytest.mark.spawns
@pytest.mark.slow  # five in-process runs, each with its Pipes child (~7 s)
def test_a_region_runs_as_separate_runs_solo_first_then_one_per_ray(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], home: Path
) -> None:
    plan = {"spec": "pair", "pipelines": ["a", "b"], "rays": 3, "search": {"probe_s": 3}}
    done = run_region(instance, fake_resources, plan)
    keys = ["pair|a", "pair|b", "pair|a+b@ray1of3", "pair|a+b@ray2of3", "pair|a+b@ray3of3"]
    assert instance.get_dynamic_partitions(CAPACITY_PARTITIONS) == keys
    request_file = home / "capacity" / "regions" / "pair__a+b.json"
    assert RegionRequest.model_validate_json(request_file.read_text()).rays == 3
    # solo searches first (the rays need their capacities), then one run per ray
    assert [request.partition_key for request, _ in done] == keys
    assert len({request.run_key for request, _ in done}) == 5
    assert len({result.run_id for _, result in done}) == 5
    for request, result in done:
        assert result.success
        assert request.run_config == {"ops": {"capacity": {"config": {"probe_s": 3.0}}}}
        assert request.tags[POOL_TAG] == "local"  # the run queue's limit: one pool, one run
        assert request.tags[TARGET_TAG] == request.partition_key
        assert request.tags[REGION_TAG] == done[0][0].tags[REGION_TAG]
        record = instance.get_run_by_id(result.run_id)
        assert record is not None and record.tags[TARGET_TAG] == request.partition_key
    # the rays share one region id (from the request's tag), each in its own folder
    ray_dirs = [Path(str(_metadata(result)["search_dir"])).name for _, result in done[2:]]
    region_id = str(_metadata(done[2][1])["region_id"])
    assert region_id.startswith("pair-a-b-3rays-pair__a-b-")
    assert ray_dirs == [f"{region_id}-ray{k}" for k in (1, 2, 3)]
    assert instance.get_materialized_partitions(capacity.key) == set(keys)
    # a third tick requests the same runs again: their run keys make Dagster skip them
    again = _requested(_tick(instance, build_definitions(fake_resources), fake_resources))
    assert {r.run_key for r in again} <= {request.run_key for request, _ in done}


def test_a_bad_region_request_is_reported_not_raised(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], home: Path
) -> None:
    folder = home / "capacity" / "regions"
    folder.mkdir(parents=True)
    (folder / "broken.json").write_text(json.dumps({"spec": "pair", "pipelines": ["a", "a"]}))
    result = _tick(instance, build_definitions(fake_resources), fake_resources)
    assert result.skip_reason is not None
    assert "a region needs two pipelines" in str(result.skip_reason.skip_message)


def test_a_region_request_refuses_unknown_search_options_and_an_slo(tmp_path: Path) -> None:
    request = RegionRequest(spec="pair", pipelines=("a", "b"), search={"probe_seconds": 3})
    with pytest.raises(ValueError, match=r"unknown search option\(s\) probe_seconds"):
        write_region_request(tmp_path, request)
    request = RegionRequest(spec="pair", pipelines=("a", "b"), search={"slo_ms": 20})
    with pytest.raises(ValueError, match="each pipeline by its spec's slo_ms"):
        write_region_request(tmp_path, request)


def test_search_options_become_cli_options() -> None:
    config = CapacityConfig(
        slo_ms=50, percentile=0.95, precision=0.1, max_probes=6, probe_s=2.5, with_rates={"t": 4}
    )
    assert config.cli_options() == [
        "--slo-ms", "50", "--percentile", "0.95", "--precision", "0.1",
        "--max-probes", "6", "--probe-s", "2.5", "--with", "t=4",
    ]  # fmt: skip
    assert CapacityConfig().cli_options() == []


def _real_resources(resources: dict[str, Any], specs_dir: Path) -> dict[str, Any]:
    from bench_defs.core.resources import CollobenchResource

    home = resources["collobench"].home
    return resources | {
        "collobench": CollobenchResource(home=home, specs_dir=str(specs_dir)),
        "capacity_search": CapacitySearchResource(mlflow=False),
    }


TINY_SEARCH = {"percentile": 0.9, "probe_s": 3, "max_probes": 4, "precision": 0.5}
"""p90, which LoadGen's rule decides from 44 queries, so every probe is a 3 s window (p99 needs
459 queries, and its confirming probe 4 x 459: 21 s at ~97 q/s): the ceiling probe, ~97 q/s
(met), ~194 (not met: near 10% of its queries over the SLO, in one burst, which the rule
leaves undecided), then the confirmation of ~97 q/s on a new seed (the last probe confirms):
about 25 s."""


@pytest.mark.spawns
@pytest.mark.slow
def test_the_real_cli_finds_the_demo_capacity(
    instance: dg.DagsterInstance, resources: dict[str, Any]
) -> None:
    """End to end: the shipped demo spec's `sleeper` pipeline, tiny probes."""
    real = _real_resources(resources, REPO / "specs")
    result = _materialize(
        "capacity_demo|sleeper",
        instance,
        real,
        run_config={"ops": {"capacity": {"config": TINY_SEARCH}}},
    )
    assert result.success
    metadata = _metadata(result)
    assert 2 <= metadata["probes"] <= 4
    result_file = json.loads(Path(str(metadata["capacity_json"])).read_text())
    assert metadata["stop_reason"] == result_file["stop_reason"]
    assert metadata["stop_reason"] in ("converged", "max_probes")
    assert result_file["percentile"] == TINY_SEARCH["percentile"]  # the config reached the CLI
    assert metadata["certified_qps"] == result_file["certified_qps"] > 0
    assert metadata["bracket"] == result_file["bracket"]
    assert metadata["probes_table"].count("\n") == 1 + metadata["probes"]
    assert Path(str(metadata["report"])).is_file() and Path(str(metadata["plot_path"])).is_file()
    assert set(_checks(result)) == {BRACKET_CHECK, MONOTONE_CHECK}


@pytest.mark.spawns
def test_a_run_whose_search_exists_resumes_it(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], home: Path
) -> None:
    """A re-executed run (same root run id) finds its search folder and passes --resume."""
    from stages.contracts.capacity_files import SearchSettings

    run_id = "0badcafe-0000-4000-8000-000000000000"
    search_dir = home / "capacity" / "pair-a-0badcafe"
    search_dir.mkdir(parents=True)
    kept = SearchSettings(
        search_id=search_dir.name, pipeline="a", slo_ms=50, probe_s=3, min_rate=0.01
    )
    (search_dir / "search.json").write_text(kept.model_dump_json(by_alias=True))
    instance.add_dynamic_partitions(CAPACITY_PARTITIONS, ["pair|a"])
    job = build_definitions(fake_resources).resolve_job_def("capacity_job")
    result = job.execute_in_process(partition_key="pair|a", instance=instance, run_id=run_id)
    assert result.success
    argv = _argv(_metadata(result))
    assert argv[2:4] == ["--resume", "pair-a-0badcafe"] and "--pipeline" not in argv
    assert _metadata(result)["search_id"] == "pair-a-0badcafe"


@pytest.mark.spawns
@pytest.mark.slow  # three in-process runs
def test_a_ray_refuses_a_solo_search_that_certified_nothing(
    instance: dg.DagsterInstance, fake_resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    infeasible = {
        "certified_qps": None,
        "estimate_qps": None,
        "estimate_ci95": None,
        "stop_reason": "infeasible",
        "bracket": [0, 1],
    }
    monkeypatch.setenv("FAKE_CAPACITY_OVERRIDES", json.dumps(infeasible))
    solo = _materialize("pair|a", instance, fake_resources)
    assert _metadata(solo)["certified_qps"] is None
    assert _checks(solo)[BRACKET_CHECK].passed  # infeasible explains the missing bracket
    monkeypatch.delenv("FAKE_CAPACITY_OVERRIDES")
    assert _materialize("pair|b", instance, fake_resources).success
    ray = _materialize("pair|a+b@ray1of2", instance, fake_resources, raise_on_error=False)
    failure = next(event for event in ray.all_events if event.is_step_failure)
    said = str(failure.step_failure_data.error)
    assert "latest solo search of 'pair|a' found no capacity" in said and "infeasible" in said
