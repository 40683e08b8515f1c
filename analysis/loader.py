"""Idempotent loading of run directories into the DuckDB warehouse.

Each run is loaded in one transaction: its run_id's rows are deleted from every table, then the
run's Parquet files are inserted again, so loading a run twice (or re-loading it after it grew)
leaves exactly one copy. DuckDB reads the Parquet itself (`read_parquet` with the file list as a
parameter): no pandas round trip, and column types come straight from the file contract.
The schema and views are (re)created on every load, so a new version of a view reaches an
existing warehouse the next time anything is loaded; an older warehouse's schema is migrated
first (analysis/migrations.py) and a newer one is refused. One writer at a time: load_runs
holds the warehouse's writer lock (analysis.db.writer_lock) from before it opens the file
until it has closed it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from analysis import migrations, summaries
from analysis.db import Notify, connect_writer, sql_text, to_stderr, view_files, writer_lock
from stages.rundir.layout import MANIFEST, TABLES, table_files
from stages.rundir.manifest import (
    Manifest,
    ManifestError,
    parse_manifest,
    read_manifest_document,
)


class LoadError(ValueError):
    """A run directory cannot be loaded; the message is one line: `<dir>: <reason>`."""


@dataclass(frozen=True)
class LoadResult:
    """What loading one run directory did."""

    run_id: str
    run_dir: Path
    status: str  # the manifest's run status: ok | failed | interrupted | running
    replaced: bool  # the run_id was already in the warehouse (its rows were replaced)
    from_parts: bool  # some rows came from parts/ chunk files (a run cut short before merging)
    rows: dict[str, int] = field(default_factory=dict)  # rows inserted per table


def _read_manifest(run_dir: Path) -> dict[str, Any]:
    """The run's manifest.json as parsed JSON (the warehouse keeps it verbatim), after checking
    that it fits stages.rundir.manifest.Manifest; LoadError (one line) otherwise."""
    path = run_dir / MANIFEST
    if not run_dir.is_dir():
        raise LoadError(f"{run_dir}: not a directory")
    try:
        manifest = read_manifest_document(run_dir)
    except ManifestError as error:
        raise LoadError(str(error)) from error
    if not isinstance(manifest, dict) or not isinstance(manifest.get("run_id"), str):
        raise LoadError(f"{path}: manifest has no run_id")
    try:
        parse_manifest(manifest, path)
    except ManifestError as error:
        raise LoadError(str(error)) from None
    return manifest


def run_host(manifest: Manifest) -> str | None:
    """`runs.host`: the manifest's host id, else (a run from before issue 21) the hostname the
    environment probe found (migration 005 fills older rows the same way)."""
    if manifest.host:
        return manifest.host
    return manifest.environment.hostname if manifest.environment else None


def ensure_schema(connection: duckdb.DuckDBPyConnection, db: Path | str = "warehouse") -> list[int]:
    """Bring the schema to the current version (create it, or migrate an older one; refuse a
    newer one with migrations.SchemaMismatch), then (re)create every view, in file order; stored
    summaries made by other view definitions are recomputed for every loaded run.
    Returns the versions migrated to (empty unless an older warehouse was upgraded)."""
    applied = migrations.prepare(connection, db)
    connection.execute(sql_text("schema.sql"))
    stale = summaries.prepare(connection)
    for name in view_files():
        connection.execute(sql_text(f"views/{name}"))
    if stale:
        summaries.rebuild_all(connection)
    return applied


def load_run(
    connection: duckdb.DuckDBPyConnection,
    run_dir: Path,
    manifest: dict[str, Any],
    tables: tuple[str, ...] = TABLES,
) -> LoadResult:
    """Load one run directory (its `tables`) into `connection`, replacing the run's rows;
    `manifest` is its manifest.json as parsed JSON (kept verbatim in `runs.manifest`)."""
    typed = parse_manifest(manifest, run_dir / MANIFEST)
    run_id = typed.run_id
    existing = connection.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id])
    replaced = bool((existing.fetchone() or (0,))[0])
    rows: dict[str, int] = {}
    from_parts = False
    connection.execute("BEGIN TRANSACTION")
    try:
        connection.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
        connection.execute(
            sql_text("insert_run.sql"),
            {
                "run_id": run_id,
                "name": typed.name,
                "spec_hash": typed.spec_hash,
                "status": typed.status,
                "started_at": typed.started_at,
                "ended_at": typed.ended_at,
                "manifest": json.dumps(manifest),
                "run_dir": str(run_dir.resolve()),
                "host": run_host(typed),
            },
        )
        for table in tables:
            if table not in TABLES:
                raise ValueError(f"unknown table {table!r}")
            connection.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
            files, used_parts = table_files(run_dir, table)
            from_parts = from_parts or used_parts
            if not files:
                rows[table] = 0
                continue
            paths = [str(path) for path in files]
            foreign = connection.execute(
                "SELECT count(*) FROM read_parquet(?, union_by_name = true) "
                "WHERE run_id IS DISTINCT FROM ?",
                [paths, run_id],
            ).fetchone()
            if foreign and foreign[0]:
                # Such rows would escape the DELETE above and break idempotence.
                raise LoadError(f"{run_dir}: {table} holds rows of a run_id other than {run_id}")
            connection.execute(
                f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?, union_by_name = true)",
                [paths],
            )
            rows[table] = _count(connection, table, run_id)
        summaries.refresh(connection, run_id)
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
    return LoadResult(
        run_id=run_id,
        run_dir=run_dir,
        status=str(typed.status),
        replaced=replaced,
        from_parts=from_parts,
        rows=rows,
    )


def _count(connection: duckdb.DuckDBPyConnection, table: str, run_id: str) -> int:
    row = connection.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def migrated_writer(
    db: Path, wait_s: float | None, notify: Notify
) -> Iterator[duckdb.DuckDBPyConnection]:
    """The warehouse's writer connection under its writer lock, its schema brought up to date
    (`notify` told of an upgrade); closed on exit."""
    with writer_lock(db, wait_s, notify):
        connection = connect_writer(db, wait_s, notify)
        try:
            applied = ensure_schema(connection, db)
            if applied:
                notify(
                    f"{db}: upgraded the warehouse schema from version {applied[0] - 1} "
                    f"to {applied[-1]}"
                )
            yield connection
        finally:
            connection.close()


def load_runs(
    run_dirs: list[Path] | list[str],
    db_path: Path | str,
    wait_s: float | None = None,
    notify: Notify = to_stderr,
) -> list[LoadResult]:
    """Load each run directory into the warehouse at `db_path` (created if missing).

    Every directory's manifest is checked before anything is written, so one bad argument
    loads nothing; a directory without manifest.json raises LoadError with a one-line reason.
    The writer lock is taken first: while another writer holds it, this waits up to wait_s
    (default `$COLLOBENCH_WAREHOUSE_WAIT_S`, 60 s), telling `notify` (default: stderr) once,
    then raises analysis.db.WarehouseBusy. An older warehouse is migrated (and `notify` told),
    a newer one refused (migrations.SchemaMismatch). Each run is one transaction: a failure
    part-way leaves that run as it was before."""
    directories = [Path(run_dir) for run_dir in run_dirs]
    manifests = [_read_manifest(directory) for directory in directories]
    db = Path(db_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    with migrated_writer(db, wait_s, notify) as connection:
        return [
            load_run(connection, directory, manifest)
            for directory, manifest in zip(directories, manifests, strict=True)
        ]
