"""The warehouse's schema version, and the migrations that bring an older warehouse up to it.

`schema_info` (analysis/sql/schema.sql) holds one row per version the warehouse has been at;
its max(version) is the warehouse's version. A warehouse without that table but with `runs` was
written before versions were recorded: version 1 (the first schema, frozen in
tests/analysis/data/schema_v1.sql). The migrations are `analysis/sql/migrations/NNN_what.sql`,
NNN the version each one reaches, applied in order, each in its own transaction together with
the schema_info row recording its version, so a failure leaves the warehouse at the last version
it fully reached.

The writer (the loader, holding the one-writer lock) calls `prepare` before loading: a new file
gets the current schema, an older one is migrated, a newer one is refused (SchemaMismatch).
Readers cannot migrate (their connections are read-only): `check_readable` refuses an older
warehouse with "run `collobench load` to upgrade it" instead of letting a view fail to bind.
"""

from __future__ import annotations

import re
from importlib import metadata, resources
from pathlib import Path

import duckdb

from analysis.warehouse.raw_rows_out import move_rows_out
from analysis.warehouse.sql_files import WarehouseError, sql_text

# The schema version this collobench writes and reads: the highest migration's number.
CURRENT_VERSION = 8
# The version of a warehouse that has tables but no schema_info (written before it existed).
UNVERSIONED = 1
# The migration that moves raw rows out to Parquet: its SQL file, then Python
# (analysis.warehouse.registered_files.move_rows_out), in the same transaction.
RAW_ROWS_OUT = 6
_MIGRATION_NAME = re.compile(r"^(\d{3})_[a-z0-9_]+\.sql$")


class SchemaMismatch(WarehouseError):
    """The warehouse's schema version is not the one this collobench reads (one line)."""


def migration_files() -> list[tuple[int, str]]:
    """(version reached, file name) of every migration, in order of version."""
    folder = resources.files("analysis").joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name))
    return sorted(found)


def collobench_version() -> str:
    """The installed collobench distribution's version (what `written_by` records)."""
    try:
        return metadata.version("collobench")
    except metadata.PackageNotFoundError:
        return "unknown"


def _tables(connection: duckdb.DuckDBPyConnection) -> set[str]:
    rows = connection.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_type = 'BASE TABLE'"
    ).fetchall()
    return {str(row[0]) for row in rows}


def stored_version(connection: duckdb.DuckDBPyConnection) -> int | None:
    """The warehouse's schema version; None for an empty database (nothing created yet)."""
    tables = _tables(connection)
    if "schema_info" in tables:
        # fetchall, not fetchone: an unfinished result would keep a reader's connection busy
        # for connection.sql() (DuckDB's "Resource In Use")
        rows = connection.execute("SELECT max(version) FROM schema_info").fetchall()
        return int(rows[0][0]) if rows and rows[0][0] is not None else UNVERSIONED
    if "runs" in tables:
        return UNVERSIONED
    return None


def too_new_message(db: Path | str, version: int) -> str:
    return (
        f"{db}: warehouse schema version {version} is newer than this collobench "
        f"({CURRENT_VERSION}); upgrade collobench or load into a new file"
    )


def _record(connection: duckdb.DuckDBPyConnection, version: int) -> None:
    connection.execute(
        "INSERT INTO schema_info (version, written_by, migrated_at) VALUES (?, ?, now())",
        [version, collobench_version()],
    )


def prepare(connection: duckdb.DuckDBPyConnection, db: Path | str) -> list[int]:
    """Bring a writable warehouse to CURRENT_VERSION; returns the versions migrated to (empty
    when it was current, or new: a new file gets schema.sql and a version row at once).
    Raises SchemaMismatch for a warehouse newer than this collobench, before changing it."""
    version = stored_version(connection)
    if version is not None and version > CURRENT_VERSION:
        raise SchemaMismatch(too_new_message(db, version))
    if version is None:
        connection.execute("BEGIN TRANSACTION")
        try:
            connection.execute(sql_text("schema.sql"))
            _record(connection, CURRENT_VERSION)
            connection.execute("COMMIT")
        except Exception:
            connection.execute("ROLLBACK")
            raise
        return []
    applied = []
    for target, name in migration_files():
        if target <= version:
            continue
        connection.execute("BEGIN TRANSACTION")
        try:
            connection.execute(sql_text(f"migrations/{name}"))
            if target == RAW_ROWS_OUT:
                move_rows_out(connection, db)
            _record(connection, target)
            connection.execute("COMMIT")
        except Exception as error:
            connection.execute("ROLLBACK")
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise WarehouseError(
                f"{db}: migration {name} (to version {target}) failed, the warehouse is left "
                f"at version {version}: {first}"
            ) from error
        applied.append(target)
        version = target
    return applied


def check_readable(connection: duckdb.DuckDBPyConnection, db: Path | str) -> None:
    """Raise SchemaMismatch unless the warehouse is at CURRENT_VERSION (or still empty):
    readers cannot migrate, and an old warehouse would fail with a DuckDB binder error."""
    version = stored_version(connection)
    if version is None or version == CURRENT_VERSION:
        return
    if version > CURRENT_VERSION:
        raise SchemaMismatch(too_new_message(db, version))
    raise SchemaMismatch(
        f"{db}: warehouse schema version {version} is older than this collobench "
        f"({CURRENT_VERSION}); run `collobench load RUN_DIR` (any run, one already loaded "
        "will do) to upgrade it"
    )
