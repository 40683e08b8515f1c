"""The real path, as a user meets it: `dagster dev` on a loopback port with a temporary
DAGSTER_HOME; `benchmark_job` launched for a tiny spec through the GraphQL API (as the
Launchpad does, the partition as the `dagster/partition` tag) and the report metadata found;
the same launch again, reproduced by the `reproducibility` check; a spec file dropped into the
specs folder, run by the daemon's `spec_files_sensor`; then a long run cancelled, and no process
of it left. The server is ended by process group."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import psutil
import pytest

from bench_defs.specs import SPEC_PARTITIONS
from tests.dagster import server
from tests.dagster.conftest import tiny_spec, write_spec
from tests.helpers import REPO

pytestmark = pytest.mark.slow

LOCATION = "collobench"
CANCEL_WITHIN_S = 30.0

MATERIALIZATIONS = """
query ($key: AssetKeyInput!, $partition: String!) {
  assetOrError(assetKey: $key) {
    ... on Asset {
      assetMaterializations(partitions: [$partition], limit: 1) {
        runId
        metadataEntries {
          label
          ... on MarkdownMetadataEntry { mdStr }
          ... on PathMetadataEntry { path }
        }
      }
    }
  }
}
"""


@pytest.fixture
def dagster_dev(tmp_path: Path, specs_dir: Path) -> Iterator[tuple[Any, subprocess.Popen[bytes]]]:
    from dagster_graphql import DagsterGraphQLClient

    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO / "bench_defs" / "dagster.yaml", dagster_home / "dagster.yaml")
    write_spec(specs_dir, "tiny", tiny_spec())
    long = tiny_spec("long")
    long["pipelines"][0]["loadgen"].update(duration_s=120, timeout_s=300)
    write_spec(specs_dir, "long", long)
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.add_dynamic_partitions(SPEC_PARTITIONS, ["tiny", "long"])
    env = {"COLLOBENCH_SPECS_DIR": str(specs_dir)}
    with server.dagster_dev(dagster_home, env, tmp_path / "dagster_dev.log") as (port, process):
        yield DagsterGraphQLClient("127.0.0.1", port_number=port), process


CHECK_EXECUTIONS = """
query ($key: AssetKeyInput!, $check: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $check, limit: 5) {
    runId
    evaluation {
      success
      description
      metadataEntries { label ... on TextMetadataEntry { text } }
    }
  }
}
"""

SENSOR_TICKS = """
query ($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    ... on Sensor { sensorState { ticks(limit: 5) { status } } }
  }
}
"""

PARTITION_RUNS = """
query ($partition: String!) {
  runsOrError(filter: {tags: [{key: "dagster/partition", value: $partition}]}) {
    ... on Runs { results { runId status tags { key value } } }
  }
}
"""


def _sensor_ticked(client: Any) -> bool:
    selector = {
        "repositoryLocationName": LOCATION,
        "repositoryName": "__repository__",
        "sensorName": "spec_files_sensor",
    }
    data = client._execute(SENSOR_TICKS, {"selector": selector})
    ticks = data["sensorOrError"]["sensorState"]["ticks"]
    return any(tick["status"] in ("SKIPPED", "SUCCESS") for tick in ticks)


def _partition_runs(client: Any, partition: str) -> list[dict[str, Any]]:
    data = client._execute(PARTITION_RUNS, {"partition": partition})
    return list(data["runsOrError"]["results"])


def _wait_for(client: Any, run_id: str, statuses: set[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get_run_status(run_id).value
        if status in statuses:
            return str(status)
        assert time.monotonic() < deadline, f"run {run_id} still {status} after {timeout_s} s"
        time.sleep(1)


def _benchmark_processes(dev_group: int) -> list[psutil.Process]:
    """Processes of this test's benchmarks: they carry its COLLOBENCH_HOME and are not part of
    dagster dev's own process group (the Pipes child starts its own session)."""
    home = os.environ["COLLOBENCH_HOME"]
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get("COLLOBENCH_HOME") == home and (
                os.getpgid(process.pid) != dev_group
            ):
                found.append(process)
    return found


def test_launch_rerun_sensor_then_cancel(
    dagster_dev: tuple[Any, subprocess.Popen[bytes]], specs_dir: Path
) -> None:
    client, server = dagster_dev
    run_id = client.submit_job_execution(
        "benchmark_job",
        repository_location_name=LOCATION,
        run_config={"ops": {"benchmark_run": {"config": {"rate": 60}}}},
        tags={"dagster/partition": "tiny"},
    )
    assert _wait_for(client, run_id, {"SUCCESS", "FAILURE", "CANCELED"}, 300) == "SUCCESS"
    data = client._execute(MATERIALIZATIONS, {"key": {"path": ["latency"]}, "partition": "tiny"})
    materialization = data["assetOrError"]["assetMaterializations"][0]
    assert materialization["runId"] == run_id
    entries = {entry["label"]: entry for entry in materialization["metadataEntries"]}
    assert "p99 ms" in entries["table"]["mdStr"]
    assert entries["plot_latency_cdf"]["mdStr"].startswith("![latency_cdf](data:image/png;base64,")
    assert Path(entries["plot_latency_cdf_path"]["path"]).is_file()

    # Drop a new spec once the daemon's sensor has taken its baseline (its first tick), so the
    # file is new to it; its next tick (30 s later at most) runs the file's benchmark.
    deadline = time.monotonic() + 120
    while not _sensor_ticked(client):
        assert time.monotonic() < deadline, "spec_files_sensor never ticked"
        time.sleep(1)
    write_spec(specs_dir, "dropped", tiny_spec("dropped"))

    # Rerun the partition as the Launchpad would: the reproducibility check compares the two.
    rerun_id = client.submit_job_execution(
        "benchmark_job",
        repository_location_name=LOCATION,
        run_config={"ops": {"benchmark_run": {"config": {"rate": 60}}}},
        tags={"dagster/partition": "tiny"},
    )
    assert _wait_for(client, rerun_id, {"SUCCESS", "FAILURE", "CANCELED"}, 300) == "SUCCESS"
    checks = client._execute(
        CHECK_EXECUTIONS,
        {"key": {"path": ["warehouse"]}, "check": "reproducibility"},
    )["assetCheckExecutions"]
    latest = next((e for e in checks if e["runId"] == rerun_id), None)
    assert latest is not None, (rerun_id, checks)
    evaluation = latest["evaluation"]
    compared = {entry["label"]: entry.get("text") for entry in evaluation["metadataEntries"]}
    assert compared["compared_with"].endswith(f"-tiny-{run_id[:8]}"), evaluation
    # The schedule is the deterministic half of reproducing; the figures may disagree on a
    # machine as loaded as CI's (then the description names which), never the schedule.
    assert "scheduled arrivals differ" not in evaluation["description"], evaluation
    assert evaluation["success"] == (evaluation["description"] == "reproduced"), evaluation

    deadline = time.monotonic() + 180
    while not (runs := _partition_runs(client, "dropped")):
        assert time.monotonic() < deadline, "the sensor did not run the dropped spec"
        time.sleep(2)
    (sensor_run,) = runs
    tags = {tag["key"]: tag["value"] for tag in sensor_run["tags"]}
    assert tags["dagster/sensor_name"] == "spec_files_sensor"
    assert tags["collobench/device"] == "cpu"
    assert _wait_for(client, sensor_run["runId"], {"SUCCESS", "FAILURE", "CANCELED"}, 300) == (
        "SUCCESS"
    )

    long_id = client.submit_job_execution(
        "benchmark_job", repository_location_name=LOCATION, tags={"dagster/partition": "long"}
    )
    deadline = time.monotonic() + 240
    while not any(
        "stages.collocation.worker" in " ".join(p.cmdline())
        or "spawn_main" in " ".join(p.cmdline())
        for p in _benchmark_processes(server.pid)
    ):
        assert client.get_run_status(long_id).value in (
            "QUEUED",
            "NOT_STARTED",
            "STARTING",
            "STARTED",
        )
        assert time.monotonic() < deadline, "the long benchmark's workers never started"
        time.sleep(1)
    started = time.monotonic()
    client.terminate_run(long_id)
    while _benchmark_processes(server.pid):
        assert time.monotonic() - started < CANCEL_WITHIN_S, [
            " ".join(p.cmdline())[:120] for p in _benchmark_processes(server.pid)
        ]
        time.sleep(0.5)
    assert _wait_for(client, long_id, {"CANCELED", "FAILURE", "SUCCESS"}, 60) == "CANCELED"
