"""DuckDB access for analysis: the SQL files shipped with the package, and read-only querying.

Readers (reports, `collobench sql`) only ever get a read-only connection, so an ad-hoc query can
never change or lock the warehouse for the loader; writing is the loader's job alone.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import duckdb


class ReadOnlyRequired(RuntimeError):
    """A query was about to run on a connection that could write to the warehouse."""


def sql_text(name: str) -> str:
    """The text of `analysis/sql/<name>` (a path relative to the sql folder), read through
    importlib.resources so it works from an installed wheel as well as from a checkout."""
    return resources.files("analysis").joinpath("sql", name).read_text(encoding="utf-8")


def view_files() -> list[str]:
    """Names of the view files, in load order: sorted by name, so the numeric prefixes put a
    view after the views it reads (throughput and latency before contention)."""
    folder = resources.files("analysis").joinpath("sql", "views")
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))


def connect_read_only(db_path: Path | str) -> duckdb.DuckDBPyConnection:
    """Open the warehouse read-only; a missing file is a FileNotFoundError naming the fix."""
    path = Path(db_path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such database; load a run first (collobench load)")
    return duckdb.connect(str(path), read_only=True)


def is_read_only(connection: duckdb.DuckDBPyConnection) -> bool:
    """True when the connection's database was opened with access_mode = read_only."""
    row = connection.execute("SELECT current_setting('access_mode')").fetchone()
    return row is not None and str(row[0]).lower() == "read_only"


def query_connection(
    connection: duckdb.DuckDBPyConnection, sql: str
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run `sql` on a read-only connection; returns (column names, rows).

    Raises ReadOnlyRequired on a writable connection, before running anything."""
    if not is_read_only(connection):
        raise ReadOnlyRequired("refusing to run a query on a writable connection")
    result = connection.execute(sql)
    columns = [column[0] for column in result.description or []]
    return columns, result.fetchall()


def run_query(db_path: Path | str, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one ad-hoc SQL statement against the warehouse, read-only (what `collobench sql`
    does): writes fail inside DuckDB with duckdb.InvalidInputException."""
    connection = connect_read_only(db_path)
    try:
        return query_connection(connection, sql)
    finally:
        connection.close()
