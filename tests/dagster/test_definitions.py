"""The code location: its names, `dg check defs`, and no torch in the code server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from bench_defs.core.specs import BenchmarkRunConfig
from bench_defs.definitions import defs
from stages.artifacts.registry import ARTIFACTS
from tests.helpers import REPO


def test_the_names_users_and_docs_rely_on() -> None:
    repository = defs.get_repository_def()
    keys = {key.to_user_string() for key in repository.asset_graph.get_all_asset_keys()}
    assert set(ARTIFACTS.names()) | {"benchmark_run", "warehouse"} <= keys
    assert {"throughput", "latency", "perf_per_watt", "contention"} <= keys
    assert {job.name for job in repository.get_all_jobs()} >= {"artifacts_job", "benchmark_job"}
    assert repository.get_sensor_def("spec_files_sensor").job_name == "benchmark_job"
    assert repository.get_schedule_def("nightly_benchmarks").cron_schedule == "0 2 * * *"
    graph = repository.asset_graph
    # lineage: the benchmark depends on every artefact (and the model files specs name), the
    # model on its dataset
    parents = graph.get(dg.AssetKey("benchmark_run")).parent_keys
    artefacts = {k.to_user_string() for k in parents if k.path[0] != "model_files"}
    assert artefacts == set(ARTIFACTS.names())
    assert dg.AssetKey("digits") in graph.get(dg.AssetKey("digits_cnn")).parent_keys
    checks = {(key.asset_key.to_user_string(), key.name) for key in graph.asset_check_keys}
    assert checks == {
        ("warehouse", "validity"),
        ("warehouse", "slo"),
        ("warehouse", "regression"),
        ("warehouse", "reproducibility"),
        ("capacity", "capacity_bracket_within_precision"),
        ("capacity", "capacity_probes_monotone"),
    }


def test_the_capacity_names_users_and_docs_rely_on() -> None:
    repository = defs.get_repository_def()
    capacity = repository.asset_graph.get(dg.AssetKey("capacity"))
    assert capacity.partitions_def == dg.DynamicPartitionsDefinition(name="capacity_targets")
    assert repository.get_job("capacity_job").partitions_def == capacity.partitions_def
    assert repository.get_job("capacity_region_job").name == "capacity_region_job"
    sensor = repository.get_sensor_def("capacity_region_sensor")
    assert sensor.job_name == "capacity_job"
    # every capacity run carries the pool tag the run queue limits (no pools file: `local`)
    assert repository.get_job("capacity_job").tags["collobench/gpu-pool"] == "local"
    assert "collobench/device" not in repository.get_job("capacity_job").tags


def test_launchpad_overrides_become_set_options() -> None:
    config = BenchmarkRunConfig(rate=50, duration_s=2.5, repeats=3, device="cuda:1")
    assert config.overrides(2) == [
        "repeats=3",
        "pipelines.0.loadgen.rate=50",
        "pipelines.0.loadgen.duration_s=2.5",
        "pipelines.0.device=cuda:1",
        "pipelines.1.loadgen.rate=50",
        "pipelines.1.loadgen.duration_s=2.5",
        "pipelines.1.device=cuda:1",
    ]
    assert BenchmarkRunConfig().overrides(3) == []


def test_launchpad_config_refuses_unknown_keys() -> None:
    job = defs.resolve_job_def("benchmark_job")
    bad = {"ops": {"benchmark_run": {"config": {"rate": 10, "rtae": 5}}}}
    good = {"ops": {"benchmark_run": {"config": {"rate": 10}}}}
    assert dg.validate_run_config(job, good)["ops"]["benchmark_run"]["config"]["rate"] == 10
    with pytest.raises(dg.DagsterInvalidConfigError, match="rtae"):
        dg.validate_run_config(job, bad)


@pytest.mark.spawns
def test_dg_check_defs(tmp_path: Path) -> None:
    dg_cli = Path(sys.executable).parent / "dg"
    if not dg_cli.exists():
        pytest.skip("dg (dagster-dg-cli, test extra) is not installed")
    completed = subprocess.run(
        [str(dg_cli), "check", "defs"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
    )
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-3000:]
