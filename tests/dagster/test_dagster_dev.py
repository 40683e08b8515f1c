"""The real path, as a user meets it: `dagster dev` on a loopback port with a temporary
DAGSTER_HOME; `benchmark_job` launched for a tiny spec through the GraphQL API (as the
Launchpad does, the partition as the `dagster/partition` tag); the report metadata found; then a
long run cancelled, and no process of it left. The server is ended by process group."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dagster import server
from tests.dagster.conftest import tiny_spec, write_spec

pytestmark = pytest.mark.slow

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
    write_spec(specs_dir, "tiny", tiny_spec())
    long = tiny_spec("long")
    long["pipelines"][0]["loadgen"].update(duration_s=120, timeout_s=300)
    write_spec(specs_dir, "long", long)
    server.prepare_instance(dagster_home, ["tiny", "long"])
    env = {"COLLOBENCH_SPECS_DIR": str(specs_dir)}
    with server.dagster_dev(dagster_home, env, tmp_path / "dagster_dev.log") as (port, process):
        yield DagsterGraphQLClient("127.0.0.1", port_number=port), process


def test_launch_from_graphql_then_cancel(dagster_dev: tuple[Any, subprocess.Popen[bytes]]) -> None:
    client, server_process = dagster_dev
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

    long_id = server.launch_benchmark(client, "long")
    deadline = time.monotonic() + 240
    while not any(
        "stages.collocation.worker" in " ".join(p.cmdline())
        or "spawn_main" in " ".join(p.cmdline())
        for p in server.benchmark_processes(server_process.pid)
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
    while server.benchmark_processes(server_process.pid):
        assert time.monotonic() - started < CANCEL_WITHIN_S, [
            " ".join(p.cmdline())[:120] for p in server.benchmark_processes(server_process.pid)
        ]
        time.sleep(0.5)
    assert server.wait_for_run(client, long_id, server.ENDED, 60) == "CANCELED"
