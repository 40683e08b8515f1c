"""The warehouse's registered files: the run directories' Parquet files stay the source of truth.

Loading a run registers its files in `run_files` (path, rows, size, modification time, columns;
analysis/sql/schema.sql) instead of copying their rows; each raw table (`queries`,
`stage_events`, ...: stages.rundir.schemas.TABLES) is a view over the registered files of every
run, generated here from its shape (`shapes`: the columns and types of its Arrow schema in
stages.rundir.schemas; a column a file lacks reads as NULL, so runs written before a column
existed still load). A reader checks the files before it opens the warehouse (`check_files`): a
run directory moved, deleted or rewritten since it was loaded is a one-line WarehouseError
naming it, never a query over other rows.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.warehouse.sql_files import WarehouseError, sql_literal
from stages.contracts.errors import InvalidInputError
from stages.rundir.layout import table_files
from stages.rundir.schemas import SCHEMAS, TABLES

# Characters read_parquet would read as a glob pattern: a path holding one is refused.
_GLOB = set("*?[")


class RegisteredFileError(InvalidInputError, ValueError):
    """A run's files cannot be registered; the message is one line: `<path>: <reason>`."""


@dataclass(frozen=True)
class RunFile:
    """One Parquet file of a run, as `run_files` records it."""

    run_id: str
    table_name: str
    path: str
    rows: int
    bytes: int
    mtime_ns: int
    columns: tuple[str, ...]

    def as_row(self) -> tuple[object, ...]:
        return (
            self.run_id,
            self.table_name,
            self.path,
            self.rows,
            self.bytes,
            self.mtime_ns,
            list(self.columns),
        )


# DuckDB's type for each Arrow type the schemas use (the one DuckDB itself gives a Parquet
# column of that type; tests/rundir/test_schemas.py holds the two together). A
# schema with a type not listed here fails at the first shapes() call, naming it.
DUCKDB_TYPES: dict[pa.DataType, str] = {
    pa.string(): "VARCHAR",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
}


@functools.cache
def shapes() -> dict[str, tuple[tuple[str, str], ...]]:
    """Each raw table's (column, DuckDB type) list, derived from its Arrow schema
    (stages.rundir.schemas.SCHEMAS), in the schema's order."""
    return {
        table: tuple((field.name, duckdb_type(table, field)) for field in SCHEMAS[table])
        for table in TABLES
    }


def duckdb_type(table: str, field: pa.Field) -> str:
    """The DuckDB type of `table`'s Arrow `field`; TypeError naming them when it has none."""
    try:
        return DUCKDB_TYPES[field.type]
    except KeyError:
        raise TypeError(
            f"{table}.{field.name}: Arrow type {field.type} has no DuckDB type in "
            "analysis.warehouse.registered_files.DUCKDB_TYPES"
        ) from None


def _only_run_id(path: Path, metadata: pq.FileMetaData, run_id: str) -> bool:
    """True when every row of the file has this run_id, from the row groups' statistics
    (min = max = run_id, no NULLs); None-safe: statistics missing means False."""
    names = metadata.schema.names
    if "run_id" not in names:
        return False
    column = names.index("run_id")
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return False
        if stats.min != run_id or stats.max != run_id:
            return False
    return True


def _scan_run_ids(path: Path, run_id: str) -> bool:
    """The slow check for a file without usable statistics: read its run_id column."""
    values = pq.read_table(path, columns=["run_id"]).column("run_id")
    return bool(values.null_count == 0 and all(value == run_id for value in values.unique()))


def register_file(run_dir: Path, table: str, path: Path, run_id: str) -> RunFile:
    """Validate one Parquet file of a run (readable, every row this run's) and describe it."""
    resolved = path.resolve()
    if _GLOB & set(str(resolved)):
        raise RegisteredFileError(f"{resolved}: a path with * ? or [ cannot be registered; move it")
    try:
        metadata = pq.read_metadata(resolved)
        status = resolved.stat()
    except (OSError, ValueError) as error:
        raise RegisteredFileError(f"{resolved}: not a readable Parquet file ({error})") from None
    if metadata.num_rows and not (
        _only_run_id(resolved, metadata, run_id) or _scan_run_ids(resolved, run_id)
    ):
        # Such rows would be counted as another run's, or twice.
        raise RegisteredFileError(f"{run_dir}: {table} holds rows of a run_id other than {run_id}")
    return RunFile(
        run_id=run_id,
        table_name=table,
        path=str(resolved),
        rows=int(metadata.num_rows),
        bytes=int(status.st_size),
        mtime_ns=int(status.st_mtime_ns),
        columns=tuple(metadata.schema.names),
    )


def run_files(run_dir: Path, run_id: str, tables: Sequence[str] = TABLES) -> list[RunFile]:
    """Every Parquet file of the run's `tables` (merged, or parts/ chunks of a run cut short),
    validated and described; empty files are registered too (they count 0 rows)."""
    found = []
    for table in tables:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        files, _ = table_files(run_dir, table)
        found += [register_file(run_dir, table, path, run_id) for path in files]
    return found


def insert_files(connection: duckdb.DuckDBPyConnection, files: Iterable[RunFile]) -> None:
    """Record `files` in `run_files` (the caller deletes a run's earlier rows), in one
    statement: executemany costs about a millisecond a row."""
    rows = [file.as_row() for file in files]
    if not rows:
        return
    names = ["run_id", "table_name", "path", "rows", "bytes", "mtime_ns", "columns"]
    incoming = pa.Table.from_pylist([dict(zip(names, row, strict=True)) for row in rows])
    connection.register("incoming_files", incoming)
    try:
        connection.execute(
            f"INSERT INTO run_files BY NAME SELECT {', '.join(names)} FROM incoming_files"
        )
    finally:
        connection.unregister("incoming_files")


def view_sql(table: str, files: Iterable[tuple[str, Sequence[str]]]) -> str:
    """CREATE OR REPLACE VIEW `table` over `files` ((path, columns) pairs), in its shape: one
    read_parquet per set of files with the same columns, each column cast to the shape's type
    or NULL where those files lack it, UNION ALL; no files: an empty relation of that shape."""
    shape = shapes()[table]
    groups: dict[tuple[str, ...], list[str]] = {}
    for path, columns in files:
        groups.setdefault(tuple(columns), []).append(path)
    selects = []
    for columns, paths in groups.items():
        present = set(columns)
        projection = ", ".join(
            f'CAST("{name}" AS {kind}) AS "{name}"'
            if name in present
            else f'CAST(NULL AS {kind}) AS "{name}"'
            for name, kind in shape
        )
        listed = ", ".join(sql_literal(path) for path in paths)
        selects.append(f"SELECT {projection} FROM read_parquet([{listed}])")
    if not selects:
        empty = ", ".join(f'CAST(NULL AS {kind}) AS "{name}"' for name, kind in shape)
        selects.append(f"SELECT {empty} WHERE false")
    return f"CREATE OR REPLACE VIEW {table} AS\n" + "\nUNION ALL\n".join(selects)


def _unchanged(path: str, size: int, mtime_ns: int) -> bool:
    try:
        status = os.stat(path)
    except OSError:
        return False
    return status.st_size == size and status.st_mtime_ns == mtime_ns


def create_raw_views(connection: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every raw table's view over the files `run_files` lists now. A file missing
    or changed since it was registered is left out: DuckDB opens files when it creates a view,
    and a writer must still be able to load the run's new place (readers refuse such a
    warehouse outright: check_files)."""
    rows = connection.execute(
        "SELECT table_name, path, columns, bytes, mtime_ns FROM run_files "
        "ORDER BY run_id, table_name, path"
    ).fetchall()
    by_table: dict[str, list[tuple[str, Sequence[str]]]] = {table: [] for table in TABLES}
    for table, path, columns, size, mtime_ns in rows:
        if _unchanged(str(path), int(size), int(mtime_ns)):
            by_table.setdefault(str(table), []).append((str(path), list(columns)))
    for table in TABLES:
        connection.execute(view_sql(table, by_table[table]))


def registered_paths(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """Every registered file's path (what a reader's connection is allowed to read)."""
    return [str(row[0]) for row in connection.execute("SELECT path FROM run_files").fetchall()]


@dataclass(frozen=True)
class BrokenRun:
    """A loaded run one of whose registered files is missing or changed."""

    run_id: str
    run_dir: str
    path: str  # the first such file
    missing: bool  # False: the file is there but changed since it was loaded


def broken_runs(connection: duckdb.DuckDBPyConnection) -> list[BrokenRun]:
    """The loaded runs with a registered file missing or changed since the run was loaded
    (its directory moved, deleted or rewritten), in run_id order: one stat per file."""
    found: dict[str, BrokenRun] = {}
    rows = connection.execute(
        "SELECT f.run_id, f.path, f.bytes, f.mtime_ns, r.run_dir "
        "FROM run_files AS f LEFT JOIN runs AS r USING (run_id) ORDER BY f.run_id, f.path"
    ).fetchall()
    for run_id, path, size, mtime_ns, run_dir in rows:
        if run_id not in found and not _unchanged(path, size, mtime_ns):
            found[run_id] = BrokenRun(
                str(run_id), str(run_dir), str(path), missing=not os.path.exists(path)
            )
    return list(found.values())


def describe(broken: BrokenRun) -> str:
    """`run <id> (<dir>): <file> is missing; <the way out>`, one line."""
    if broken.missing:
        return (
            f"run {broken.run_id} ({broken.run_dir}): {broken.path} is missing; load the run "
            f"again from where it is now (collobench load DIR) or drop it (collobench load "
            f"--forget {broken.run_id}; --forget-missing drops every run whose files are gone)"
        )
    return (
        f"run {broken.run_id} ({broken.run_dir}): {broken.path} changed since it was loaded; "
        f"load the run again (collobench load {broken.run_dir})"
    )


def check_files(connection: duckdb.DuckDBPyConnection, db: Path | str) -> None:
    """Raise WarehouseError (one line) when a loaded run's files are missing or changed:
    names the first such run, its directory and file, how many runs are affected, and the way
    out. A reader calls this before any query, so a moved run never gives other numbers."""
    broken = broken_runs(connection)
    if broken:
        others = f" ({len(broken) - 1} more runs too)" if len(broken) > 1 else ""
        raise WarehouseError(f"{db}: {describe(broken[0])}{others}")
