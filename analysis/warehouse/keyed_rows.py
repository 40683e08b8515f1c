"""Rows keyed by one id (a capacity search, an A/B session), replaced as a whole: the loaders
of the tables that are not per run share this so that a reload never leaves half a key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from analysis.warehouse import migrations
from analysis.warehouse.sql_files import sql_text


def schema_has_views(connection: duckdb.DuckDBPyConnection, views: Sequence[str]) -> bool:
    """The warehouse is at the current version and has every one of `views`."""
    if migrations.stored_version(connection) != migrations.CURRENT_VERSION:
        return False
    placeholders = ", ".join("?" for _ in views)
    found = connection.execute(
        f"SELECT count(*) FROM duckdb_views() WHERE view_name IN ({placeholders})", list(views)
    ).fetchall()
    return bool(found) and found[0][0] == len(views)


def replace_keyed_rows(
    connection: duckdb.DuckDBPyConnection,
    deletes: Sequence[tuple[str, str]],
    key: str,
    inserts: Sequence[tuple[str, Sequence[dict[str, Any]]]],
) -> None:
    """In one transaction: delete `key`'s rows from each (table, key column) of `deletes`,
    then run each insert file (a path under analysis/sql/) once per row."""
    connection.execute("BEGIN TRANSACTION")
    try:
        for table, column in deletes:
            connection.execute(f"DELETE FROM {table} WHERE {column} = ?", [key])
        for name, rows in inserts:
            statement = sql_text(name)
            for row in rows:
                connection.execute(statement, row)
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
