"""The checked reader: the one way reports, `collobench sql`, `compare` and Dagster open the
warehouse (`connect_read_only`), and read-only querying on it.

A reader's connection is opened by `analysis.warehouse.db.open_read_only`, then checked (the schema
version: `migrations.check_readable`; the registered files: `registered_files.check_files`) and
hardened (`db.harden`: no external access but those files), so an ad-hoc query can never
change the warehouse or read past it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from analysis.warehouse.db import Notify, harden, open_read_only, to_stderr
from analysis.warehouse.migrations import check_readable, stored_version
from analysis.warehouse.registered_files import check_files, registered_paths
from stages.contracts.errors import InvalidInputError


def connect_read_only(
    db_path: Path | str, wait_s: float | None = None, notify: Notify = to_stderr
) -> duckdb.DuckDBPyConnection:
    """Open the warehouse read-only, checked and hardened; a missing file is a
    FileNotFoundError naming the fix.

    Waits as `db.open_read_only` does, then checks the schema version (an older warehouse says
    to run `collobench load`, a newer one is refused) and the registered files (a moved run is
    one line naming it). Failures are one-line WarehouseErrors."""
    connection = open_read_only(db_path, wait_s, notify)
    path = Path(db_path)
    try:
        check_readable(connection, path)
        readable: list[str] = []
        if stored_version(connection) is not None:
            check_files(connection, path)  # a moved run: one line naming it, not other numbers
            readable = registered_paths(connection)
        harden(connection, readable)
    except BaseException:
        connection.close()
        raise
    return connection


class ReadOnlyRequired(InvalidInputError, RuntimeError):
    """A query was about to run on a connection that could write to the warehouse."""


READ_ONLY_STATEMENTS = ("SELECT", "EXPLAIN")
"""Statement kinds an ad-hoc query (`collobench sql`) may be: SELECT (WITH, FROM t, VALUES,
SHOW, DESCRIBE and SUMMARIZE parse as SELECT) and EXPLAIN. COPY would still write into the
spill folder, which a reader's connection may touch; everything else is refused up front."""


def check_read_only_statement(sql: str) -> None:
    """Raise ReadOnlyRequired unless `sql` is exactly one SELECT or EXPLAIN statement (one line
    naming the kind found); duckdb.ParserException when it does not parse."""
    statements = duckdb.extract_statements(sql)
    if len(statements) != 1:
        raise ReadOnlyRequired(f"one read-only statement expected, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_ONLY_STATEMENTS:
        raise ReadOnlyRequired(f"only a read-only SELECT or EXPLAIN is allowed, not {kind}")


def is_read_only(connection: duckdb.DuckDBPyConnection) -> bool:
    """True when the connection's database was opened with access_mode = read_only."""
    row = connection.execute("SELECT current_setting('access_mode')").fetchone()
    return row is not None and str(row[0]).lower() == "read_only"


def require_read_only(connection: duckdb.DuckDBPyConnection) -> None:
    """Raise ReadOnlyRequired unless the connection is read-only (checked before any query)."""
    if not is_read_only(connection):
        raise ReadOnlyRequired("refusing to run a query on a writable connection")


def query_connection(
    connection: duckdb.DuckDBPyConnection, sql: str
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run `sql` on a read-only connection; returns (column names, rows).

    Raises ReadOnlyRequired on a writable connection, before running anything."""
    require_read_only(connection)
    result = connection.execute(sql)
    columns = [column[0] for column in result.description or []]
    return columns, result.fetchall()


def run_query(db_path: Path | str, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one ad-hoc SQL statement against the warehouse, read-only (what `collobench sql`
    does): anything but one SELECT raises ReadOnlyRequired before the warehouse is opened."""
    check_read_only_statement(sql)
    connection = connect_read_only(db_path)
    try:
        return query_connection(connection, sql)
    finally:
        connection.close()
