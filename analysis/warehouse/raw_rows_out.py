"""Migration 6's Python step: the raw rows a warehouse of version 5 or older holds move out of
it, into files the warehouse registers (`move_rows_out`, run by `analysis.warehouse.migrations`
inside the migration's transaction).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from analysis.warehouse.registered_files import (
    RegisteredFileError,
    RunFile,
    insert_files,
    register_file,
)
from analysis.warehouse.sql_files import sql_literal
from stages.rundir.layout import table_files
from stages.rundir.schemas import TABLES


def exported_rows_dir(db: Path | str) -> Path:
    """Where migration 6 writes the rows of a run whose directory it could not find:
    `<db>.rows/<run_id>/<table>.parquet`, beside the warehouse (then registered like any run's
    files)."""
    path = Path(db)
    return path.with_name(path.name + ".rows")


def _base_tables(connection: duckdb.DuckDBPyConnection) -> set[str]:
    rows = connection.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_type = 'BASE TABLE'"
    ).fetchall()
    return {str(row[0]) for row in rows}


def _count(connection: duckdb.DuckDBPyConnection, table: str, run_id: str) -> int:
    # fetchall: a result left unfinished would block the connection's next register()
    rows = connection.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [run_id]).fetchall()
    return int(rows[0][0]) if rows else 0


def move_rows_out(connection: duckdb.DuckDBPyConnection, db: Path | str) -> None:
    """Migration 6 (inside its transaction): the raw rows a warehouse of version 5 or older
    holds move out of it. For each loaded run and raw table, the run directory's files are
    registered when they hold exactly the rows the warehouse has; otherwise (the directory is
    gone or differs) the warehouse's own rows are written to exported_rows_dir and registered.
    Then the raw tables are dropped (ensure_schema recreates them as views)."""
    raw = [table for table in TABLES if table in _base_tables(connection)]
    runs = connection.execute("SELECT run_id, run_dir FROM runs ORDER BY run_id").fetchall()
    for run_id, run_dir in runs:
        for table in raw:
            count = _count(connection, table, run_id)
            if count == 0:
                continue
            registered = _registered_in_place(run_dir, table, run_id)
            if registered is None or sum(file.rows for file in registered) != count:
                target = exported_rows_dir(db) / run_id / f"{table}.parquet"
                target.parent.mkdir(parents=True, exist_ok=True)
                connection.execute(
                    f"COPY (SELECT * FROM {table} WHERE run_id = {sql_literal(run_id)}) "
                    f"TO {sql_literal(str(target))} (FORMAT parquet)"
                )
                registered = [register_file(target.parent, table, target, run_id)]
            insert_files(connection, registered)
    for table in raw:
        connection.execute(f"DROP TABLE {table}")


def _registered_in_place(run_dir: str | None, table: str, run_id: str) -> list[RunFile] | None:
    """The run directory's files of `table`, registered; None when there are none usable."""
    if not run_dir or not Path(run_dir).is_dir():
        return None
    files, _ = table_files(Path(run_dir), table)
    if not files:
        return None
    try:
        return [register_file(Path(run_dir), table, path, run_id) for path in files]
    except RegisteredFileError:
        return None
