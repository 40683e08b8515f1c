"""A run as the warehouse records it: its `runs` row and its registered files.

The loader builds one from a run directory (analysis.warehouse.loader.prepare_run) and publishes it;
the summaries read one back from a warehouse (`loaded_runs`) to compute again. Both write it the
same way (`insert_runs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from analysis.warehouse import registered_files
from analysis.warehouse.registered_files import RunFile
from analysis.warehouse.sql_files import sql_text


@dataclass(frozen=True)
class WarehouseRun:
    """A run as the `runs` table records it (analysis/sql/insert_run.sql's parameters), with
    its registered files."""

    run_id: str
    name: str | None
    spec_hash: str | None
    status: str | None
    started_at: Any
    ended_at: Any
    manifest: str  # manifest.json as JSON text
    run_dir: str
    host: str | None
    files: tuple[RunFile, ...]

    def parameters(self) -> dict[str, Any]:
        """insert_run.sql's parameters: every field but the files."""
        return {
            "run_id": self.run_id,
            "name": self.name,
            "spec_hash": self.spec_hash,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "manifest": self.manifest,
            "run_dir": self.run_dir,
            "host": self.host,
        }

    @property
    def raw_rows(self) -> int:
        return sum(file.rows for file in self.files)


def insert_runs(connection: duckdb.DuckDBPyConnection, runs: Sequence[WarehouseRun]) -> None:
    """Record `runs`: their `runs` rows and their files (the caller deletes earlier rows)."""
    for run in runs:
        connection.execute(sql_text("insert_run.sql"), run.parameters())
    registered_files.insert_files(connection, (file for run in runs for file in run.files))


def _registered_files(connection: duckdb.DuckDBPyConnection) -> dict[str, list[RunFile]]:
    """Every registered file, by run_id."""
    files: dict[str, list[RunFile]] = {}
    for row in connection.execute(
        "SELECT run_id, table_name, path, rows, bytes, mtime_ns, columns FROM run_files "
        "ORDER BY run_id, table_name, path"
    ).fetchall():
        run_id, table, path, rows, size, mtime_ns, columns = row
        files.setdefault(str(run_id), []).append(
            RunFile(str(run_id), str(table), str(path), rows, size, mtime_ns, tuple(columns))
        )
    return files


def loaded_runs(connection: duckdb.DuckDBPyConnection) -> list[WarehouseRun]:
    """Every run of the warehouse as a WarehouseRun, with its registered files."""
    files = _registered_files(connection)
    return [
        WarehouseRun(
            run_id=str(run_id),
            name=name,
            spec_hash=spec_hash,
            status=status,
            started_at=started_at,
            ended_at=ended_at,
            manifest=str(manifest),
            run_dir=str(run_dir),
            host=host,
            files=tuple(files.get(str(run_id), [])),
        )
        for run_id, name, spec_hash, status, started_at, ended_at, manifest, run_dir, host in (
            connection.execute(
                "SELECT run_id, name, spec_hash, status, started_at, ended_at, "
                "CAST(manifest AS VARCHAR), run_dir, host FROM runs ORDER BY run_id"
            ).fetchall()
        )
    ]
