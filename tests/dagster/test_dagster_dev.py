"""The real path, as a user meets it: `dagster dev` on a loopback port with a temporary
DAGSTER_HOME; `benchmark_job` launched for a tiny spec through the GraphQL API (as the
Launchpad does, the partition as the `dagster/partition` tag) and the report metadata found;
the same launch again, reproduced by the `reproducibility` check; a spec file dropped into the
specs folder, run by the daemon's `spec_files_sensor`; then a long run cancelled, and no process
of it left. The server is ended by process group."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dagster import server
from tests.dagster.specs import tiny_spec, write_spec
from tests.helpers import LOOPBACK, listening_addresses
from tests.reliability import figures
from tests.reliability.faults import (
    fresh_warehouse,
    is_gone,
    manifest,
    query_rows,
    validity,
    warehouse_reasons,
)

pytestmark = [pytest.mark.slow, pytest.mark.spawns]

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
        "repositoryLocationName": server.LOCATION,
        "repositoryName": "__repository__",
        "sensorName": "spec_files_sensor",
    }
    data = client._execute(SENSOR_TICKS, {"selector": selector})
    ticks = data["sensorOrError"]["sensorState"]["ticks"]
    return any(tick["status"] in ("SKIPPED", "SUCCESS") for tick in ticks)


def _partition_runs(client: Any, partition: str) -> list[dict[str, Any]]:
    data = client._execute(PARTITION_RUNS, {"partition": partition})
    return list(data["runsOrError"]["results"])


@pytest.fixture
def dagster_dev(tmp_path: Path, specs_dir: Path) -> Iterator[tuple[Any, subprocess.Popen[bytes]]]:
    from dagster_graphql import DagsterGraphQLClient

    dagster_home = tmp_path / "dagster_home"
    write_spec(specs_dir, "tiny", tiny_spec())
    long = tiny_spec("long")
    long["pipelines"][0]["loadgen"].update(duration_s=120, timeout_s=300)
    write_spec(specs_dir, "long", long)
    server.prepare_instance(dagster_home, ["tiny", "long"])
    # the sensor's ticks 5 s apart, not 30: the dropped spec runs on its second tick
    env = {"COLLOBENCH_SPECS_DIR": str(specs_dir), "COLLOBENCH_SENSOR_INTERVAL_S": "5"}
    with server.dagster_dev(dagster_home, env, tmp_path / "dagster_dev.log") as (port, process):
        yield DagsterGraphQLClient("127.0.0.1", port_number=port), process


def test_launch_rerun_sensor_then_cancel(
    dagster_dev: tuple[Any, subprocess.Popen[bytes]], specs_dir: Path
) -> None:
    client, server_process = dagster_dev
    # Every socket dagster dev's tree listens on (webserver, code server, daemon) is loopback.
    listening = listening_addresses(server_process.pid)
    assert listening and all(address in LOOPBACK for address, _ in listening), listening
    figures.count("security_checks", "dagster_dev_binds_loopback")
    run_id = server.launch_benchmark(
        client, "tiny", {"ops": {"benchmark_run": {"config": {"rate": 60}}}}
    )
    assert server.wait_for_run(client, run_id, server.ENDED, 300) == "SUCCESS"
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
    rerun_id = server.launch_benchmark(
        client, "tiny", {"ops": {"benchmark_run": {"config": {"rate": 60}}}}
    )
    assert server.wait_for_run(client, rerun_id, server.ENDED, 300) == "SUCCESS"
    checks = client._execute(
        CHECK_EXECUTIONS, {"key": {"path": ["warehouse"]}, "check": "reproducibility"}
    )["assetCheckExecutions"]
    latest = next((e for e in checks if e["runId"] == rerun_id), None)
    assert latest is not None, (rerun_id, checks)
    evaluation = latest["evaluation"]
    compared = {entry["label"]: entry.get("text") for entry in evaluation["metadataEntries"]}
    assert compared["schedule_compared_with"].endswith(f"-tiny-{run_id[:8]}"), evaluation
    # The schedule is the deterministic half of reproducing; the figures are judged against
    # the partition's history, two runs here: too short to judge, so they pass as undecided.
    assert "scheduled arrivals differ" not in evaluation["description"], evaluation
    assert evaluation["success"], evaluation
    assert evaluation["description"].startswith("undecided: 2 run(s) in the history"), evaluation

    deadline = time.monotonic() + 180
    while not (sensor_runs := _partition_runs(client, "dropped")):
        assert time.monotonic() < deadline, "the sensor did not run the dropped spec"
        time.sleep(2)
    (sensor_run,) = sensor_runs
    tags = {tag["key"]: tag["value"] for tag in sensor_run["tags"]}
    assert tags["dagster/sensor_name"] == "spec_files_sensor"
    assert tags["collobench/gpu-pool"] == "local"  # the sensor's pick: the only pool
    assert server.wait_for_run(client, sensor_run["runId"], server.ENDED, 300) == "SUCCESS"

    long_id = server.launch_benchmark(client, "long")
    deadline = time.monotonic() + 240
    runs = Path(os.environ["COLLOBENCH_HOME"], "runs")
    # Cancelled once the workers run and have flushed rows (what the cancel must keep).
    while not any(
        "stages.collocation.worker" in " ".join(p.cmdline())
        or "spawn_main" in " ".join(p.cmdline())
        for p in server.benchmark_processes(server_process.pid)
    ) or not list(runs.glob(f"*-long-{long_id[:8]}/parts/queries/*.parquet")):
        assert client.get_run_status(long_id).value in (
            "QUEUED",
            "NOT_STARTED",
            "STARTING",
            "STARTED",
        )
        assert time.monotonic() < deadline, "the long benchmark's workers never started"
        time.sleep(1)
    # The cancel is one fault of the reliability suite (tests/reliability/test_faults.py
    # asserts the same four things of every fault; one dagster dev per suite, so it is here).
    fault = "dagster_run_cancel"
    benchmark = server.benchmark_processes(server_process.pid)
    started = time.monotonic()
    client.terminate_run(long_id)
    figures.count("faults_injected", fault)
    # 1. bounded: everything of the benchmark ends within CANCEL_WITHIN_S of the cancel
    while server.benchmark_processes(server_process.pid):
        assert time.monotonic() - started < CANCEL_WITHIN_S, [
            " ".join(p.cmdline())[:120] for p in server.benchmark_processes(server_process.pid)
        ]
        time.sleep(0.5)
    assert server.wait_for_run(client, long_id, server.ENDED, 60) == "CANCELED"
    # 2. no process left: the benchmark's processes seen before the cancel are all gone
    left = [process for process in benchmark if not is_gone(process)]
    figures.count("processes_left", fault, len(left))
    assert not left
    # 3. what was measured is kept and loads; 4. the manifest, the warehouse and the
    # validity check say the run was interrupted
    (run_dir,) = runs.glob(f"*-long-{long_id[:8]}")
    assert manifest(run_dir)["status"] == "interrupted"
    assert len(query_rows(run_dir)) > 0
    with fresh_warehouse(run_dir.parent / "cancelled.duckdb", run_dir) as connection:
        assert "run status interrupted" in warehouse_reasons(connection, run_dir.name)
        loaded = connection.execute("SELECT count(*) FROM queries").fetchone()
        passed, said = validity(connection, run_dir.name)
    assert loaded == (len(query_rows(run_dir)),)
    assert not passed and "run status is interrupted" in said
    figures.count("faults_survived", fault)
