"""runs.host (issue 21): the host id a run ran on, from its manifest, in the warehouse; the
migration 4 -> 5 that adds it; and `compare` across two hosts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from analysis.history.compare import compare_runs
from analysis.warehouse.loader import load_runs
from analysis.warehouse.migrations import CURRENT_VERSION
from analysis.warehouse.reader import connect_read_only, run_query
from stages.cli.app import app
from tests.analysis.rundirs import SECOND_NS, RunBuilder
from tests.analysis.test_migrations import table_columns, versions

runner = CliRunner()


@dataclass
class HostRun(RunBuilder):
    """A RunBuilder whose manifest names a host (or, `hostname`, only the probe's hostname)."""

    host: str | None = None
    hostname: str | None = None

    def manifest(self) -> dict[str, Any]:
        manifest = super().manifest()
        if self.host is not None:
            manifest["host"] = self.host
        if self.hostname is not None:
            manifest["environment"] = {"hostname": self.hostname}
        return manifest


def host_run(
    root: Path, run_id: str, host: str | None = None, hostname: str | None = None
) -> HostRun:
    run = HostRun(root, run_id, {"p": "server"}, host=host, hostname=hostname)
    run.uniform_queries(0, "solo", "p", 400, 4 * SECOND_NS, 0)
    return run


def hosts(db: Path) -> list[tuple[Any, ...]]:
    return run_query(db, "SELECT run_id, host FROM runs ORDER BY run_id")[1]


def test_runs_host_is_the_manifests_host_else_the_probes_hostname(
    tmp_path: Path, db_path: Path
) -> None:
    runs = [
        host_run(tmp_path, "20260101-000000-a", host="host-a", hostname="box-1").write(),
        host_run(tmp_path, "20260102-000000-b", hostname="box-2").write(),  # before issue 21
        host_run(tmp_path, "20260103-000000-c").write(),
    ]
    load_runs(runs, db_path)
    assert hosts(db_path) == [
        ("20260101-000000-a", "host-a"),
        ("20260102-000000-b", "box-2"),
        ("20260103-000000-c", None),
    ]


@pytest.mark.slow
def test_v4_warehouse_gains_runs_host_filled_from_the_stored_manifests(
    tmp_path: Path, db_path: Path
) -> None:
    """A warehouse at version 4 (no runs.host) migrates on the next load: the column is added
    where a new warehouse has it, and the runs loaded before get their host from the manifest
    stored with them."""
    old = [
        host_run(tmp_path, "20260101-000000-a", host="host-a").write(),
        host_run(tmp_path, "20260102-000000-b", hostname="box-2").write(),
    ]
    load_runs(old, db_path)
    connection = duckdb.connect(str(db_path))
    try:
        connection.execute("ALTER TABLE runs DROP COLUMN host")
        connection.execute("UPDATE schema_info SET version = 4")
    finally:
        connection.close()
    said: list[str] = []
    new = host_run(tmp_path, "20260103-000000-c", host="host-c").write()
    load_runs([new], db_path, notify=said.append)
    assert said == [f"{db_path}: upgraded the warehouse schema from version 4 to {CURRENT_VERSION}"]
    assert CURRENT_VERSION >= 5 and [v for v, _ in versions(db_path)][-1] == CURRENT_VERSION
    fresh = tmp_path / "fresh.duckdb"
    load_runs([*old, new], fresh)
    assert table_columns(db_path) == table_columns(fresh)
    assert (
        hosts(db_path)
        == hosts(fresh)
        == [
            ("20260101-000000-a", "host-a"),
            ("20260102-000000-b", "box-2"),
            ("20260103-000000-c", "host-c"),
        ]
    )
    connect_read_only(db_path).close()  # readable at the current version


@pytest.mark.slow
def test_compare_across_hosts_names_each_runs_host(tmp_path: Path, db_path: Path) -> None:
    a = host_run(tmp_path, "20260101-000000-a", host="host-a").write()
    b = host_run(tmp_path, "20260102-000000-b", host="host-b").write()
    load_runs([a, b], db_path)
    frame = compare_runs(db_path, a.name, b.name)
    assert not frame.empty
    assert set(frame["a_host"]) == {"host-a"} and set(frame["b_host"]) == {"host-b"}
    result = runner.invoke(app, ["compare", a.name, b.name, "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert f"{b.name} (B, host host-b) against {a.name} (A, host host-a)" in flat
