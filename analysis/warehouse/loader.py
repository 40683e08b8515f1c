"""Idempotent loading of run directories into the DuckDB warehouse, in three steps.

1. Check: every directory's manifest, and every Parquet file's footer (rows, columns, and that
   each row is the run's: the run_id column's statistics), before anything is written.
2. Summarise, without the warehouse: the per-run summaries are computed from the files in the
   loader's own in-memory DuckDB, in batches (analysis/warehouse/stored_summaries.py), so several
   hosts can do this at once.
3. Publish, under the warehouse's writer lock (analysis.warehouse.db.writer_lock): in one
   transaction, each run's earlier rows are deleted, its `runs` row, its files (`run_files`) and its
   summary rows inserted, and the raw-table views regenerated over every registered file
   (analysis/warehouse/registered_files.py). The rows themselves stay in the run directories.
Loading a run twice (or again after it grew) leaves one copy. The schema and views are
(re)created when the warehouse was made by other SQL (a new collobench), so a new version of a
view reaches an existing warehouse the next time anything is loaded; an older warehouse is
migrated first (analysis/warehouse/migrations.py) and a newer one is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from analysis.warehouse import migrations, registered_files, stored_summaries
from analysis.warehouse.db import Notify, connect_writer, to_stderr, writer_lock
from analysis.warehouse.load_steps import LoadSteps
from analysis.warehouse.registered_files import RegisteredFileError
from analysis.warehouse.sql_files import sql_text
from analysis.warehouse.view_manifest import summary_tables
from analysis.warehouse.warehouse_runs import WarehouseRun, insert_runs
from stages.contracts.errors import InvalidInputError
from stages.rundir.layout import MANIFEST, PARTS
from stages.rundir.manifest import (
    Manifest,
    ManifestError,
    parse_manifest,
    read_manifest_document,
)
from stages.rundir.schemas import TABLES


class LoadError(InvalidInputError, ValueError):
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


def ensure_schema(
    connection: duckdb.DuckDBPyConnection, db: Path | str = "warehouse", notify: Notify = to_stderr
) -> list[int]:
    """Bring the schema to the current version (create it, or migrate an older one; refuse a
    newer one with migrations.SchemaMismatch), then, unless the warehouse was made by this
    collobench's SQL already (stored_summaries.is_current: the usual case, which skips it),
    (re)create the raw-table views and every view file's figures, in file order; stored summaries
    made by other view definitions are recomputed for every loaded run. Returns the versions
    migrated to (empty unless an older warehouse was upgraded)."""
    applied = migrations.prepare(connection, db)
    if not applied and stored_summaries.is_current(connection):
        return applied
    connection.execute(sql_text("schema.sql"))
    stale = stored_summaries.prepare(connection)
    registered_files.create_raw_views(connection)
    stored_summaries.create_views(connection, definitions=False)
    if stale:
        stored_summaries.rebuild_all(connection, db, _spill_parent(db), notify)
    return applied


def _spill_parent(db: Path | str) -> Path | None:
    """Where summary computations spill: beside the warehouse file (None: the system's)."""
    path = Path(db)
    return path.parent if path.parent.is_dir() and str(db) != "warehouse" else None


def prepare_run(
    run_dir: Path, manifest: dict[str, Any], tables: tuple[str, ...] = TABLES
) -> WarehouseRun:
    """A run directory's `runs` row and validated files (`tables` only), ready to summarise
    and publish; nothing is written. LoadError (one line) for a file that cannot be used."""
    typed = parse_manifest(manifest, run_dir / MANIFEST)
    try:
        files = registered_files.run_files(run_dir, typed.run_id, tables)
    except RegisteredFileError as error:
        raise LoadError(str(error)) from None
    return WarehouseRun(
        run_id=typed.run_id,
        name=typed.name,
        spec_hash=typed.spec_hash,
        status=str(typed.status),
        started_at=typed.started_at,
        ended_at=typed.ended_at,
        manifest=json.dumps(manifest),
        run_dir=str(run_dir.resolve()),
        host=run_host(typed),
        files=tuple(files),
    )


def publish(
    connection: duckdb.DuckDBPyConnection,
    runs: list[WarehouseRun],
    summary_rows: dict[str, Any],
    tables: tuple[str, ...] = TABLES,
) -> list[LoadResult]:
    """Record `runs` (their runs rows, files and computed summary rows) in the warehouse in one
    transaction, replacing any earlier load of the same run_ids, then regenerate the raw-table
    views: the short step that needs the writer lock."""
    run_ids = [run.run_id for run in runs]
    existing = {
        str(row[0])
        for row in connection.execute(
            "SELECT run_id FROM runs WHERE run_id IN (SELECT unnest(?))", [run_ids]
        ).fetchall()
    }
    connection.execute("BEGIN TRANSACTION")
    try:
        for table in ("runs", "run_files"):
            connection.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT unnest(?))", [run_ids])
        insert_runs(connection, runs)
        stored_summaries.store(connection, run_ids, summary_rows)
        registered_files.create_raw_views(connection)
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
    return [
        LoadResult(
            run_id=run.run_id,
            run_dir=Path(run.run_dir),
            status=str(run.status),
            replaced=run.run_id in existing,
            from_parts=any(
                Path(file.path).relative_to(run.run_dir).parts[0] == PARTS for file in run.files
            ),
            rows={
                table: sum(file.rows for file in run.files if file.table_name == table)
                for table in tables
            },
        )
        for run in runs
    ]


def load_run(
    connection: duckdb.DuckDBPyConnection,
    run_dir: Path,
    manifest: dict[str, Any],
    tables: tuple[str, ...] = TABLES,
) -> LoadResult:
    """Load one run directory (its `tables`) into `connection`, replacing the run's rows;
    `manifest` is its manifest.json as parsed JSON (kept verbatim in `runs.manifest`)."""
    run = prepare_run(run_dir, manifest, tables)
    return publish(connection, [run], stored_summaries.compute([run]), tables)[0]


def forget_runs(
    run_ids: list[str],
    db_path: Path | str,
    forget_missing: bool = False,
    wait_s: float | None = None,
    notify: Notify = to_stderr,
) -> list[str]:
    """Remove these runs from the warehouse (their runs row, registered files and summaries;
    the run directories are not touched), and with `forget_missing` every run whose registered
    files are gone; returns the run_ids removed, sorted. A run_id that is not loaded is a
    LoadError naming it, and nothing is removed."""
    with migrated_writer(Path(db_path), wait_s, notify) as connection:
        loaded = {
            str(row[0])
            for row in connection.execute(
                "SELECT run_id FROM runs WHERE run_id IN (SELECT unnest(?))", [run_ids]
            ).fetchall()
        }
        unknown = [run_id for run_id in run_ids if run_id not in loaded]
        if unknown:
            raise LoadError(f"{db_path}: no run {', '.join(unknown)} is loaded; nothing forgotten")
        if forget_missing:
            loaded |= {
                run.run_id for run in registered_files.broken_runs(connection) if run.missing
            }
        found = sorted(loaded)
        publish_forget(connection, found)
        return found


def publish_forget(connection: duckdb.DuckDBPyConnection, run_ids: list[str]) -> None:
    """Delete these runs' rows from every stored table and regenerate the raw views."""
    connection.execute("BEGIN TRANSACTION")
    try:
        for table in ("runs", "run_files", *summary_tables()):
            connection.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT unnest(?))", [run_ids])
        registered_files.create_raw_views(connection)
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise


@contextmanager
def migrated_writer(
    db: Path, wait_s: float | None, notify: Notify, steps: LoadSteps | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """The warehouse's writer connection under its writer lock, its schema brought up to date
    (`notify` told of an upgrade); closed on exit. `steps` hears how long the lock wait, the
    connection and the schema took."""
    timer = steps or LoadSteps()
    with ExitStack() as held:
        with timer.step("writer_lock"):
            held.enter_context(writer_lock(db, wait_s, notify))
        with timer.step("connect"):
            connection = connect_writer(db, wait_s, notify)
        held.callback(connection.close)
        with timer.step("schema"):
            applied = ensure_schema(connection, db, notify)
        if applied:
            notify(
                f"{db}: upgraded the warehouse schema from version {applied[0] - 1} "
                f"to {applied[-1]}"
            )
        yield connection


def load_runs(
    run_dirs: list[Path] | list[str],
    db_path: Path | str,
    wait_s: float | None = None,
    notify: Notify = to_stderr,
    steps: LoadSteps | None = None,
) -> list[LoadResult]:
    """Load each run directory into the warehouse at `db_path` (created if missing).

    Every directory's manifest and files are checked before anything is written, so one bad
    argument loads nothing; a directory without manifest.json raises LoadError with a one-line
    reason. The runs' summaries are then computed from their files WITHOUT the warehouse (so
    several hosts can do that at once), and only the short publishing step takes the writer
    lock: while another writer holds it, this waits up to wait_s (default
    `$COLLOBENCH_WAREHOUSE_WAIT_S`, 60 s), telling `notify` (default: stderr) once, then
    raises analysis.warehouse.db.WarehouseBusy. An older warehouse is migrated (and `notify` told),
    a newer one refused (migrations.SchemaMismatch). Publishing is one transaction: a failure
    part-way leaves the warehouse as it was before. `steps` hears how long each step took
    (analysis/warehouse/load_steps.py)."""
    timer = steps or LoadSteps()
    directories = [Path(run_dir) for run_dir in run_dirs]
    with timer.step("read_manifests"):
        manifests = [_read_manifest(directory) for directory in directories]
    with timer.step("register_files"):
        prepared = [
            prepare_run(directory, manifest)
            for directory, manifest in zip(directories, manifests, strict=True)
        ]
    # A run_id given twice is loaded once, from the last directory naming it (as if the
    # later load replaced the earlier).
    runs = list({run.run_id: run for run in prepared}.values())
    db = Path(db_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    with timer.step("summaries"):
        rows = stored_summaries.compute(runs, db.parent, notify)
    with migrated_writer(db, wait_s, notify, timer) as connection, timer.step("publish"):
        return publish(connection, runs, rows)
