"""The real path, as a user meets it: `dagster dev` on a loopback port with a temporary
DAGSTER_HOME; `benchmark_job` launched for a tiny spec through the GraphQL API (as the
Launchpad does, the partition as the `dagster/partition` tag); the report metadata found; then a
long run cancelled, and no process of it left. The server is ended by process group."""

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
from tests.helpers import LOOPBACK, REPO, listening_addresses
from tests.reliability import figures

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


def test_launch_from_graphql_then_cancel(dagster_dev: tuple[Any, subprocess.Popen[bytes]]) -> None:
    client, server = dagster_dev
    # Every socket dagster dev's tree listens on (webserver, code server, daemon) is loopback.
    listening = listening_addresses(server.pid)
    assert listening and all(address in LOOPBACK for address, _ in listening), listening
    figures.count("security_checks", "dagster_dev_binds_loopback")
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
