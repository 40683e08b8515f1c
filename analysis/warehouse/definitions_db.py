"""The loader's in-memory definitions database: where stored summaries are computed.

It holds some runs (their `runs` rows, raw views over their files), the objects of the view
files asked for, the summaries' definitions (`<view>_from_rows`) included, and summary tables
that `fill` computes. Definitions scan every raw row, so they live only here, never in the
warehouse (analysis.warehouse.stored_summaries.create_views drops them there). Setting a database's
views up costs about 0.15 s, so idle databases are kept for the next caller of the process.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from analysis.warehouse import registered_files
from analysis.warehouse.db import memory_limit
from analysis.warehouse.reader import connect_read_only
from analysis.warehouse.sql_files import sql_text, view_files
from analysis.warehouse.view_manifest import definition_of, guards, summary_tables
from analysis.warehouse.warehouse_runs import WarehouseRun, insert_runs, loaded_runs


@dataclass
class _Database:
    """An in-memory definitions database and the spill folder it lives with."""

    connection: duckdb.DuckDBPyConnection
    spill: tempfile.TemporaryDirectory[str]

    def close(self) -> None:
        self.connection.close()
        self.spill.cleanup()


# Idle definitions databases by (files, threads, spill parent, memory limit): setting a
# database's views up costs about 0.15 s, which every load of a process (a test session, a
# capacity search, a Dagster run) would otherwise pay again. At most one per core is kept.
_IDLE: dict[tuple[object, ...], list[_Database]] = {}
_IDLE_LOCK = threading.Lock()


def _new_database(
    temp_dir: Path | None, files: Sequence[str] | None, threads: int | None
) -> _Database:
    spill = tempfile.TemporaryDirectory(prefix="collobench-summaries-", dir=temp_dir)
    config: dict[str, str | bool | int | float | list[str]] = {
        "memory_limit": memory_limit(),
        "temp_directory": spill.name,
    }
    if threads is not None:
        config["threads"] = threads
    connection = duckdb.connect(":memory:", config=config)
    try:
        connection.execute("SET enable_progress_bar = false")  # not on a user's terminal
        # Summary rows are keyed, never read in insertion order: let DuckDB reorder.
        connection.execute("SET preserve_insertion_order = false")
        connection.execute(sql_text("schema.sql"))
        use_runs(connection, [])
        for name in view_files() if files is None else files:
            connection.execute(sql_text(f"views/{name}"))
    except BaseException:
        connection.close()
        spill.cleanup()
        raise
    return _Database(connection, spill)


@contextmanager
def definitions_database(
    runs: Sequence[WarehouseRun],
    temp_dir: Path | None = None,
    files: Sequence[str] | None = None,
    threads: int | None = None,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory database holding `runs` (runs rows, raw views over their files) and the
    objects of the view `files` (default: every view file), definitions included, with empty
    summary tables. What summaries are computed in, and what tests compare the stored
    summaries against. `threads`: DuckDB's worker threads (default: one per core). On exit it
    is emptied and kept for the next caller of this process (closed if the block failed)."""
    key = (None if files is None else tuple(files), threads, str(temp_dir), memory_limit())
    with _IDLE_LOCK:
        idle = _IDLE.get(key, [])
        database = idle.pop() if idle else None
    if database is None:
        database = _new_database(temp_dir, files, threads)
    try:
        use_runs(database.connection, runs)
        yield database.connection
        use_runs(database.connection, [])
    except BaseException:
        database.close()
        raise
    with _IDLE_LOCK:
        kept = _IDLE.setdefault(key, [])
        if len(kept) < (os.cpu_count() or 1):
            kept.append(database)
            return
    database.close()


def use_runs(connection: duckdb.DuckDBPyConnection, runs: Sequence[WarehouseRun]) -> None:
    """Make a definitions_database hold `runs` instead of the runs it held: their runs rows
    and files, raw views over those files, and empty summary tables. Cheaper than a new
    database per batch: the views, bound when queried, stay."""
    for table in ("runs", "run_files", *present_summary_tables(connection)):
        connection.execute(f"DELETE FROM {table}")
    insert_runs(connection, runs)
    registered_files.create_raw_views(connection)


def present_summary_tables(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """The summary tables this database has, in summary_tables' order."""
    present = {
        str(row[0])
        for row in connection.execute(
            "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'summary\\_%' ESCAPE '\\'"
        ).fetchall()
    }
    return [table for table in summary_tables() if table in present]


def fill(connection: duckdb.DuckDBPyConnection, guarded: bool = True) -> None:
    """Fill every summary table of a definitions_database from its definition, in order,
    skipping (when `guarded`) a definition whose guard says its result is empty."""
    for table in present_summary_tables(connection):
        guard = guards().get(table) if guarded else None
        if guard is not None:
            rows = connection.execute(guard).fetchall()
            if not (rows and rows[0][0]):
                continue
        connection.execute(f"INSERT INTO {table} SELECT * FROM {definition_of(table)}")


@contextmanager
def warehouse_definitions(db_path: Path | str) -> Iterator[duckdb.DuckDBPyConnection]:
    """The definitions (`*_from_rows`) over every run of the warehouse at `db_path`: a
    definitions_database of its loaded runs (read through a read-only connection). What the
    tests compare stored summaries with, and where an analyst can query a definition."""
    reader = connect_read_only(db_path)
    try:
        runs = loaded_runs(reader)
    finally:
        reader.close()
    with definitions_database(runs) as connection:
        fill(connection)  # a definition may read an earlier summary
        yield connection
