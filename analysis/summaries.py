"""Per-run stored summaries: the expensive views computed once per run at load, then read.

A summarised view's file defines `<view>_from_rows` (the definition, over the raw tables), a
table `summary_<view>` and the public view `<view>` reading that table (see
analysis/sql/views/20_latency.sql). The loader calls `refresh` for each run it loads, in that
run's transaction, so `latency` over 100 runs and 50M stage events reads a few hundred stored
rows instead of sorting every query again; views built on them (contention, phase_figures,
perf_per_watt...) get fast with them.

While one run is refreshed, the variable `collobench_summary_run` is set: the `in_scope` macro
then restricts every raw-table scan to that run's rows (one run's work and memory, however large
the warehouse). When any view file changes (a new collobench), the stored rows may no longer
match their definition: `prepare` drops the summary tables before the view files recreate them,
and `rebuild_all` recomputes them for every loaded run.
"""

from __future__ import annotations

import functools
import hashlib
import re

import duckdb

from analysis.db import sql_text, view_files

SCOPE_VARIABLE = "collobench_summary_run"
STATE_TABLE = "summaries_version"
_SUMMARY_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (summary_\w+)\s+AS", re.IGNORECASE)


# The view files are package data, fixed for the life of a process: read them once, not once
# per loaded run.
@functools.cache
def summary_tables() -> tuple[str, ...]:
    """The summary tables in view-file order (a summary may read an earlier one)."""
    return tuple(
        table
        for name in view_files()
        for table in _SUMMARY_TABLE.findall(sql_text(f"views/{name}"))
    )


@functools.cache
def views_hash() -> str:
    """sha256 of every view file, names and text: the version of the summaries' definitions."""
    digest = hashlib.sha256()
    for name in view_files():
        digest.update(name.encode())
        digest.update(sql_text(f"views/{name}").encode())
    return digest.hexdigest()


def prepare(connection: duckdb.DuckDBPyConnection) -> bool:
    """Before the view files run: drop stored summaries made by other view definitions.
    Returns True when they must be recomputed for every run (`rebuild_all`)."""
    connection.execute(f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (views_sha256 VARCHAR)")
    row = connection.execute(f"SELECT max(views_sha256) FROM {STATE_TABLE}").fetchone()
    if row is not None and row[0] == views_hash():
        return False
    existing = connection.execute(
        "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'summary\\_%' ESCAPE '\\'"
    ).fetchall()
    for (table,) in existing:
        connection.execute(f"DROP TABLE {table}")
    return True


def refresh(connection: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Recompute one run's rows in every summary table (inside the caller's transaction)."""
    connection.execute(f"SET VARIABLE {SCOPE_VARIABLE} = ?", [run_id])
    try:
        for table in summary_tables():
            definition = table.removeprefix("summary_") + "_from_rows"
            connection.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
            connection.execute(f"INSERT INTO {table} SELECT * FROM {definition}")
    finally:
        connection.execute(f"RESET VARIABLE {SCOPE_VARIABLE}")


def rebuild_all(connection: duckdb.DuckDBPyConnection) -> None:
    """Recompute every loaded run's summaries, one run at a time (bounded memory), and record
    the definitions' version."""
    run_ids = [row[0] for row in connection.execute("SELECT run_id FROM runs").fetchall()]
    connection.execute("BEGIN TRANSACTION")
    try:
        for run_id in run_ids:
            refresh(connection, run_id)
        connection.execute(f"DELETE FROM {STATE_TABLE}")
        connection.execute(f"INSERT INTO {STATE_TABLE} VALUES (?)", [views_hash()])
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
