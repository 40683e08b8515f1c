"""The soak (marker `soak`, run by `make soak`): ten consecutive collocated benchmarks, each run,
loaded and reported, through the long-lived processes a user keeps (`dagster dev`: its
webserver, daemon and code server), and through the CLI into one warehouse. Nothing may grow
from run to run in those processes, and the warehouse must hold exactly the runs' rows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest

from analysis.warehouse.reader import connect_read_only
from tests.dagster import server
from tests.dagster.specs import write_spec
from tests.helpers import REPO
from tests.reliability import figures

# Ten Dagster runs take 5-10 minutes on two shared cores: more than the suite's 300 s default.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(1800), pytest.mark.spawns]

RUNS = 10
TABLES = ("queries", "stage_events", "host_samples")
# Growth allowed between the end of run 1 (everything imported, caches warm) and the end of
# run 10, per long-lived process, chosen from a measurement (2026-11-23, 2 shared cores): RSS
# grew 0.6-4.3 MiB over the nine runs (Dagster's caches of run and event records, CPython's
# arenas), open files and threads not at all (one transient +2 fds mid-soak). A per-run leak of
# 2 MiB, of one file or of one thread would exceed these.
RSS_GROWTH_MIB = 15.0
OPEN_FILES_GROWTH = 3
THREADS_GROWTH = 2
SETTLE_S = 3.0  # after a run ends, for its run worker to exit and servers to go idle
# Steps in the run worker's process: the soak is about the long-lived processes, and a
# process per step would triple each run's time here without touching them.
RUN_CONFIG: dict[str, Any] = {"execution": {"config": {"in_process": {}}}}


def soak_spec() -> dict[str, Any]:
    """Two small pipelines collocated for 1 s (open loop with a sleep stage; closed loop with a
    noop), no solo baselines: a benchmark that exercises the whole path in a few seconds."""
    loadgen = {"duration_s": 1, "warmup_queries": 0, "timeout_s": 30}
    return {
        "name": "soak",
        "collocation": {"solo_baselines": False},
        "telemetry": {"host": {"period_ms": 200}},
        "pipelines": [
            {
                "name": "open",
                "loadgen": {"type": "server", "rate": 100, **loadgen},
                "stages": [{"id": "s", "type": "sleep", "config": {"ms": 1}}],
            },
            {
                "name": "closed",
                "loadgen": {"type": "closed_loop", "concurrency": 2, "think_time_ms": 5, **loadgen},
                "stages": [{"id": "n", "type": "noop"}],
            },
        ],
    }


@dataclass(frozen=True)
class Usage:
    """What one long-lived process holds."""

    rss_mib: float
    open_files: int  # file descriptors: files, sockets, pipes
    threads: int


def role(process: psutil.Process) -> str | None:
    """Which long-lived part of `dagster dev` a process is, None for a run's own processes."""
    command = " ".join(process.cmdline())
    if "execute_run" in command or "execute_step" in command:
        return None  # a run worker: it ends with its run
    for name, marks in (
        ("webserver", ("dagster-webserver", "dagster_webserver")),
        ("daemon", ("dagster-daemon", "dagster._daemon", "dagster_daemon")),
        ("code_server", ("api grpc", "code-server")),
        ("dagster_dev", (" dev ",)),
    ):
        if any(mark in f" {command} " for mark in marks):
            return name
    return None


def long_lived(dev: subprocess.Popen[bytes]) -> dict[str, psutil.Process]:
    """`dagster dev` and its long-lived descendants by role (a role with two processes, such as
    a code-server proxy and its gRPC child, gets `role`, `role.1`)."""
    root = psutil.Process(dev.pid)
    found: dict[str, psutil.Process] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            name = role(process)
        except psutil.Error:
            continue
        if name is None:
            continue
        key = name
        suffix = 0
        while key in found:
            suffix += 1
            key = f"{name}.{suffix}"
        found[key] = process
    return found


def usage(processes: dict[str, psutil.Process]) -> dict[str, Usage]:
    return {
        name: Usage(process.memory_info().rss / 2**20, process.num_fds(), process.num_threads())
        for name, process in processes.items()
    }


def growth(before: dict[str, Usage], after: dict[str, Usage]) -> dict[str, dict[str, float]]:
    """Per process: after minus before, for each measure."""
    return {
        name: {
            "rss_mib": round(after[name].rss_mib - before[name].rss_mib, 1),
            "open_files": after[name].open_files - before[name].open_files,
            "threads": after[name].threads - before[name].threads,
        }
        for name in before
    }


def parquet_rows(run_dirs: list[Path]) -> dict[str, dict[str, int]]:
    """Rows per table and run id, from the run directories' merged Parquet files."""
    counts: dict[str, dict[str, int]] = {table: {} for table in TABLES}
    for run_dir in run_dirs:
        for table in TABLES:
            path = run_dir / f"{table}.parquet"
            assert path.is_file(), f"{path} missing: the run was not merged"
            counts[table][run_dir.name] = pq.ParquetFile(path).metadata.num_rows
    return counts


def warehouse_rows(db: Path) -> dict[str, dict[str, int]]:
    """Rows per table and run id in the warehouse (through a read-only connection)."""
    connection = connect_read_only(db)
    try:
        return {
            table: dict(
                connection.execute(
                    f"SELECT run_id, count(*) FROM {table} GROUP BY run_id"
                ).fetchall()
            )
            for table in TABLES
        }
    finally:
        connection.close()


def assert_rows_match(run_dirs: list[Path], db: Path) -> dict[str, int]:
    """The warehouse holds each run's Parquet rows exactly once; returns total rows per table."""
    assert len(run_dirs) == RUNS
    expected = parquet_rows(run_dirs)
    loaded = warehouse_rows(db)
    for table in TABLES:
        assert all(count > 0 for count in expected[table].values()), (table, expected[table])
        assert loaded[table] == expected[table], table
    return {table: sum(expected[table].values()) for table in TABLES}


@pytest.fixture
def dagster_soak(tmp_path: Path) -> Iterator[tuple[Any, subprocess.Popen[bytes]]]:
    from dagster_graphql import DagsterGraphQLClient

    specs_dir = tmp_path / "specs"
    write_spec(specs_dir, "soak", soak_spec())
    dagster_home = tmp_path / "dagster_home"
    server.prepare_instance(dagster_home, ["soak"])
    env = {"COLLOBENCH_SPECS_DIR": str(specs_dir)}
    with server.dagster_dev(dagster_home, env, tmp_path / "dagster_dev.log") as (port, process):
        yield DagsterGraphQLClient("127.0.0.1", port_number=port), process


def test_ten_dagster_benchmarks_grow_nothing_and_sum_up(
    dagster_soak: tuple[Any, subprocess.Popen[bytes]],
) -> None:
    client, dev = dagster_soak
    home = Path(os.environ["COLLOBENCH_HOME"])
    series: list[dict[str, Usage]] = []
    started = time.monotonic()
    for index in range(RUNS):
        run_id = server.launch_benchmark(client, "soak", RUN_CONFIG)
        status = server.wait_for_run(client, run_id, server.ENDED, 300)
        assert status == "SUCCESS", f"run {index + 1} of {RUNS}: {status}"
        time.sleep(SETTLE_S)
        assert not server.benchmark_processes(dev.pid), f"run {index + 1} left processes"
        series.append(usage(long_lived(dev)))
    elapsed_s = time.monotonic() - started
    assert {"webserver", "daemon", "code_server"} <= set(series[0]), sorted(series[0])
    assert set(series[-1]) == set(series[0]), "a long-lived process was replaced"
    change = growth(series[0], series[-1])
    figures.count("processes_left", "soak_dagster", len(server.benchmark_processes(dev.pid)))
    figures.record("soak", "runs", RUNS)
    figures.record(
        "soak",
        "tolerance",
        {
            "rss_growth_mib": RSS_GROWTH_MIB,
            "open_files_growth": OPEN_FILES_GROWTH,
            "threads_growth": THREADS_GROWTH,
        },
    )
    figures.record("soak", "dagster_seconds", round(elapsed_s, 1))
    figures.record("soak", "rss_growth_mib", {n: g["rss_mib"] for n, g in change.items()})
    figures.record("soak", "open_files_growth", {n: g["open_files"] for n, g in change.items()})
    figures.record("soak", "threads_growth", {n: g["threads"] for n, g in change.items()})
    figures.record(
        "soak",
        "dagster_series",
        {n: [asdict(point[n]) for point in series] for n in series[0]},
    )
    run_dirs = sorted(path for path in (home / "runs").iterdir() if path.is_dir())
    totals = assert_rows_match(run_dirs, home / "results.duckdb")
    figures.record("soak", "dagster_warehouse_rows", totals)
    for name, measured in change.items():
        assert measured["rss_mib"] <= RSS_GROWTH_MIB, (name, change)
        assert measured["open_files"] <= OPEN_FILES_GROWTH, (name, change)
        assert measured["threads"] <= THREADS_GROWTH, (name, change)


def collobench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stages.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def test_ten_cli_runs_loads_and_reports_sum_up_in_one_warehouse(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "specs", "soak", soak_spec())
    out = tmp_path / "runs"
    db = tmp_path / "results.duckdb"
    for index in range(RUNS):
        run_id = f"soak-{index:02d}"
        steps = (
            ("run", str(spec), "--out", str(out), "--run-id", run_id, "--no-mlflow", "--no-load"),
            ("load", str(out / run_id), "--db", str(db)),
            ("report", run_id, "--db", str(db)),
        )
        for step in steps:
            completed = collobench(*step)
            assert completed.returncode == 0, (index, step[0], completed.stderr[-2000:])
        assert (out / run_id / "report.md").is_file()
    totals = assert_rows_match(sorted(out.iterdir()), db)
    figures.record("soak", "cli_warehouse_rows", totals)
