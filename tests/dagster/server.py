"""Helpers of the tests that start processes of their own: `dagster dev` on a free loopback
port (from Python, in a new session, ended by process group: started from a shell in the
background it ignores SIGINT and SIGTERM), the process-group ending itself, a Dagster instance
prepared for it, and `benchmark_job` launched and awaited through GraphQL (as the Launchpad
does)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import psutil

from bench_defs.core.specs import SPEC_PARTITIONS
from stages.process_groups import end_group
from tests.helpers import REPO

START_TIMEOUT_S = 180.0
LOCATION = "collobench"
"""The code location's name in workspace.yaml."""
ENDED = frozenset({"SUCCESS", "FAILURE", "CANCELED"})


def prepare_instance(dagster_home: Path, partitions: Iterable[str]) -> None:
    """A fresh DAGSTER_HOME with the project's dagster.yaml and these spec partitions."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "bench_defs" / "dagster.yaml", dagster_home / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        instance.add_dynamic_partitions(SPEC_PARTITIONS, list(partitions))


def launch_benchmark(
    client: Any, partition: str, run_config: Mapping[str, Any] | None = None
) -> str:
    """Submit `benchmark_job` for one spec partition through GraphQL; returns the run id."""
    return str(
        client.submit_job_execution(
            "benchmark_job",
            repository_location_name=LOCATION,
            run_config=dict(run_config or {}),
            tags={"dagster/partition": partition},
        )
    )


def wait_for_run(client: Any, run_id: str, statuses: Iterable[str], timeout_s: float) -> str:
    """Poll a Dagster run until its status is one of `statuses`; returns that status."""
    wanted = set(statuses)
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get_run_status(run_id).value
        if status in wanted:
            return str(status)
        assert time.monotonic() < deadline, f"run {run_id} still {status} after {timeout_s} s"
        time.sleep(0.25)  # a quarter second: the run status is one cheap GraphQL query


def benchmark_processes(dev_group: int) -> list[psutil.Process]:
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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def dagster_dev(
    dagster_home: Path, env: Mapping[str, str], log_path: Path
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`dagster dev -w workspace.yaml` on 127.0.0.1 and a free port, with `dagster_home` as
    DAGSTER_HOME and `env` on top of this process's environment; yields (port, process) once
    /server_info answers, and ends the whole process group on exit."""
    port = free_port()
    full_env = {
        **os.environ,
        **env,
        "DAGSTER_HOME": str(dagster_home),
        "PYTHONPATH": str(REPO),
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *(str(Path(sys.executable).parent / "dagster"), "dev", "-w", "workspace.yaml"),
                *("-h", "127.0.0.1", "-p", str(port)),
            ],
            cwd=REPO,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                assert process.poll() is None, log_path.read_text()[-3000:]
                with contextlib.suppress(OSError):
                    url = f"http://127.0.0.1:{port}/server_info"
                    with urllib.request.urlopen(url, timeout=5) as response:
                        if response.status == 200:
                            break
                assert time.monotonic() < deadline, (
                    f"dagster dev did not answer in {START_TIMEOUT_S:g} s"
                )
                time.sleep(0.25)
            yield port, process
        finally:
            end_group(process, grace_s=30.0)
