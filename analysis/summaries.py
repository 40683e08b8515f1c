"""Per-run stored summaries: the expensive figures computed once per run at load, then read.

A summarised view's file defines `<view>_from_rows` (the definition, over the raw rows), a
table `summary_<view>` and the public view `<view>` reading that table (see
analysis/sql/views/20_latency.sql). Every view named `*_from_rows` is a definition, not a
figure: it exists only in the loader's own in-memory database (`definitions_database`), never
in the warehouse, where a user would meet a view that scans every raw row.

Computing is done before the warehouse's writer lock is taken: runs are summarised in batches
(BATCH_ROWS raw rows at most: bounded memory, many runs per pass) in an in-memory DuckDB that
sees only the batch's Parquet files and uses every core; the warehouse then receives a few
hundred summary rows per run in a short transaction (analysis.loader.publish). When any view
file changes (a new collobench), the stored rows may no longer match their definition:
`prepare` drops the summary tables before the view files recreate them, and `rebuild_all`
recomputes them for every loaded run from its registered files.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from analysis import catalogue
from analysis.catalogue import RunFile
from analysis.db import Notify, connect_read_only, memory_limit, sql_text, view_files

STATE_TABLE = "summaries_version"
DEFINITION_SUFFIX = "_from_rows"
# Raw rows (queries + stage events + samples) summarised in one pass at most: the batch's
# aggregates and sorts stay within memory_limit (DuckDB spills the rest), and one pass over
# several small runs costs less than one pass each.
BATCH_ROWS = 4_000_000
_SUMMARY_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (summary_\w+)\s+AS", re.IGNORECASE)
# A summary file's guard: "-- empty unless: SELECT <boolean> ...", a cheap query that is false
# only when the definition's result is empty (no row it reads exists); the loader then skips
# the definition for that batch. tests/analysis/test_summaries.py checks each guard's claim.
_GUARD = re.compile(r"^-- empty unless: (SELECT .+)$", re.MULTILINE)
_DEFINED = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:VIEW|MACRO|TABLE\s+IF\s+NOT\s+EXISTS)\s+(\w+)", re.IGNORECASE
)


@dataclass(frozen=True)
class RunRecord:
    """A run as the `runs` table records it (analysis/sql/insert_run.sql's parameters), with
    its registered files."""

    run_id: str
    name: str | None
    spec_hash: str | None
    status: str | None
    started_at: Any
    ended_at: Any
    manifest: str  # manifest.json as JSON text
    run_dir: str
    host: str | None
    files: tuple[RunFile, ...]

    def parameters(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "spec_hash": self.spec_hash,
            "status": self.status,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "manifest": self.manifest,
            "run_dir": self.run_dir,
            "host": self.host,
        }

    @property
    def raw_rows(self) -> int:
        return sum(file.rows for file in self.files)


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
def files_defining(names: frozenset[str]) -> tuple[str, ...]:
    """The view files that define `names`, and every file defining a name one of those reads
    (transitively), in view-file order: what a database needs to answer queries on `names`
    without setting up every other view."""
    texts = {  # comments dropped: a comment naming a view does not read it
        name: re.sub(r"--[^\n]*", "", sql_text(f"views/{name}")) for name in view_files()
    }
    defines = {name: set(_DEFINED.findall(text)) for name, text in texts.items()}
    needed = {name for name, defined in defines.items() if defined & names}
    pending = list(needed)
    while pending:
        text = texts[pending.pop()]
        for other, defined in defines.items():
            if other not in needed and any(re.search(rf"\b{n}\b", text) for n in defined):
                needed.add(other)
                pending.append(other)
    return tuple(name for name in view_files() if name in needed)


def summary_files() -> tuple[str, ...]:
    """The view files computing the summaries needs: the figures built on summaries
    (contention, energy, ...) are left out of the loader's database, which saves setting them
    up once per batch."""
    return files_defining(frozenset(summary_tables()))


@functools.cache
def views_hash() -> str:
    """sha256 of the SQL that defines the warehouse (schema.sql, raw_tables.sql and every view
    file, names and text): the version of the summaries' definitions and of the views."""
    digest = hashlib.sha256()
    for name in ["schema.sql", "raw_tables.sql", *(f"views/{name}" for name in view_files())]:
        digest.update(name.encode())
        digest.update(sql_text(name).encode())
    return digest.hexdigest()


def is_current(connection: duckdb.DuckDBPyConnection) -> bool:
    """True when the warehouse's views and stored summaries were made by this collobench's
    SQL (views_hash): then nothing needs recreating before a load."""
    exists = connection.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [STATE_TABLE]
    ).fetchall()[0][0]
    if not exists:
        return False
    row = connection.execute(f"SELECT max(views_sha256) FROM {STATE_TABLE}").fetchall()
    return bool(row and row[0][0] == views_hash())


def create_views(connection: duckdb.DuckDBPyConnection, definitions: bool) -> None:
    """Run every view file, in order; without `definitions` (the warehouse), drop the
    `*_from_rows` views afterwards, so only figures are listed."""
    for name in view_files():
        connection.execute(sql_text(f"views/{name}"))
    if definitions:
        return
    names = connection.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND view_name LIKE ?",
        [f"%{DEFINITION_SUFFIX}"],
    ).fetchall()
    for (view,) in names:
        connection.execute(f"DROP VIEW {view}")


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
    runs: Sequence[RunRecord],
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


def use_runs(connection: duckdb.DuckDBPyConnection, runs: Sequence[RunRecord]) -> None:
    """Make a definitions_database hold `runs` instead of the runs it held: their runs rows
    and files, raw views over those files, and empty summary tables. Cheaper than a new
    database per batch: the views, bound when queried, stay."""
    for table in ("runs", "run_files", *present_summary_tables(connection)):
        connection.execute(f"DELETE FROM {table}")
    for run in runs:
        connection.execute(sql_text("insert_run.sql"), run.parameters())
    catalogue.insert_files(connection, (file for run in runs for file in run.files))
    catalogue.create_raw_views(connection)


def present_summary_tables(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """The summary tables this database has, in summary_tables' order."""
    present = {
        str(row[0])
        for row in connection.execute(
            "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'summary\\_%' ESCAPE '\\'"
        ).fetchall()
    }
    return [table for table in summary_tables() if table in present]


@functools.cache
def guards() -> dict[str, str]:
    """Summary table -> its guard query (the files that declare one)."""
    found = {}
    for name in view_files():
        text = sql_text(f"views/{name}")
        guard = _GUARD.search(text)
        if guard:
            (table,) = _SUMMARY_TABLE.findall(text)
            found[table] = guard.group(1)
    return found


def fill(connection: duckdb.DuckDBPyConnection, guarded: bool = True) -> None:
    """Fill every summary table of a definitions_database from its definition, in order,
    skipping (when `guarded`) a definition whose guard says its result is empty."""
    for table in present_summary_tables(connection):
        guard = guards().get(table) if guarded else None
        if guard is not None:
            rows = connection.execute(guard).fetchall()
            if not (rows and rows[0][0]):
                continue
        definition = table.removeprefix("summary_") + DEFINITION_SUFFIX
        connection.execute(f"INSERT INTO {table} SELECT * FROM {definition}")


def batches(runs: Sequence[RunRecord], limit_rows: int = BATCH_ROWS) -> list[list[RunRecord]]:
    """`runs` in order, cut into batches of at most limit_rows raw rows (a larger run alone)."""
    found: list[list[RunRecord]] = []
    size = 0
    for run in runs:
        if found and size + run.raw_rows <= limit_rows:
            found[-1].append(run)
            size += run.raw_rows
        else:
            found.append([run])
            size = run.raw_rows
    return found


def compute(
    runs: Sequence[RunRecord],
    temp_dir: Path | None = None,
    notify: Notify | None = None,
) -> dict[str, pa.Table]:
    """Every summary table's rows for `runs`, computed batch by batch from their files (no
    warehouse involved); `notify` hears progress when there is more than one batch.

    One database per core, each single-threaded, takes the batches in turn (fewer batches
    than cores: each database gets the cores over): DuckDB's own
    threads leave a core idle through much of a definition (windows, list aggregates and
    their final phases), so two batches at once load 100 runs in about two thirds of the
    time on two cores."""
    if not runs:
        return {}
    cut = batches(runs)
    cores = os.cpu_count() or 1
    workers = max(1, min(len(cut), cores))
    pending = list(enumerate(cut))
    results: dict[int, dict[str, pa.Table]] = {}
    lock = threading.Lock()
    started = time.monotonic()

    def work() -> None:
        threads = max(1, cores // workers)  # one batch alone (one run) still uses every core
        with definitions_database([], temp_dir, summary_files(), threads=threads) as connection:
            while True:
                with lock:
                    if not pending:
                        return
                    index, batch = pending.pop(0)
                use_runs(connection, batch)
                fill(connection)
                rows = {
                    table: connection.sql(f"SELECT * FROM {table}").to_arrow_table()
                    for table in summary_tables()
                }
                with lock:
                    results[index] = rows
                    done = sum(len(cut[i]) for i in results)
                    if notify is not None and len(cut) > 1:
                        elapsed = time.monotonic() - started
                        notify(f"summarised {done}/{len(runs)} runs ({elapsed:.1f} s)")

    if workers == 1:
        work()
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="summaries") as pool:
            for future in [pool.submit(work) for _ in range(workers)]:
                future.result()  # re-raises a worker's error
    return {
        table: pa.concat_tables([results[index][table] for index in sorted(results)])
        for table in summary_tables()
    }


def store(
    connection: duckdb.DuckDBPyConnection, run_ids: Sequence[str], rows: dict[str, pa.Table]
) -> None:
    """Replace these runs' rows in every summary table with `rows` (inside the caller's
    transaction)."""
    for table in summary_tables():
        connection.execute(f"DELETE FROM {table} WHERE run_id IN (SELECT unnest(?))", [run_ids])
        incoming = rows.get(table)
        if incoming is None or incoming.num_rows == 0:
            continue
        connection.register("incoming_summary", incoming)
        try:
            connection.execute(f"INSERT INTO {table} BY NAME SELECT * FROM incoming_summary")
        finally:
            connection.unregister("incoming_summary")


def prepare(connection: duckdb.DuckDBPyConnection) -> bool:
    """Before the view files run: drop stored summaries made by other view definitions.
    Returns True when they must be recomputed for every run (`rebuild_all`)."""
    connection.execute(f"CREATE TABLE IF NOT EXISTS {STATE_TABLE} (views_sha256 VARCHAR)")
    rows = connection.execute(f"SELECT max(views_sha256) FROM {STATE_TABLE}").fetchall()
    if rows and rows[0][0] == views_hash():
        return False
    existing = connection.execute(
        "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'summary\\_%' ESCAPE '\\'"
    ).fetchall()
    for (table,) in existing:
        connection.execute(f"DROP TABLE {table}")
    return True


def loaded_runs(connection: duckdb.DuckDBPyConnection) -> list[RunRecord]:
    """Every run of the warehouse as a RunRecord, with its registered files."""
    files: dict[str, list[RunFile]] = {}
    for row in connection.execute(
        "SELECT run_id, table_name, path, rows, bytes, mtime_ns, columns FROM run_files "
        "ORDER BY run_id, table_name, path"
    ).fetchall():
        run_id, table, path, rows, size, mtime_ns, columns = row
        files.setdefault(str(run_id), []).append(
            RunFile(str(run_id), str(table), str(path), rows, size, mtime_ns, tuple(columns))
        )
    return [
        RunRecord(
            run_id=str(run_id),
            name=name,
            spec_hash=spec_hash,
            status=status,
            started_at=started_at,
            ended_at=ended_at,
            manifest=str(manifest),
            run_dir=str(run_dir),
            host=host,
            files=tuple(files.get(str(run_id), [])),
        )
        for run_id, name, spec_hash, status, started_at, ended_at, manifest, run_dir, host in (
            connection.execute(
                "SELECT run_id, name, spec_hash, status, started_at, ended_at, "
                "CAST(manifest AS VARCHAR), run_dir, host FROM runs ORDER BY run_id"
            ).fetchall()
        )
    ]


def rebuild_all(
    connection: duckdb.DuckDBPyConnection,
    db: Path | str,
    temp_dir: Path | None = None,
    notify: Notify | None = None,
) -> None:
    """Recompute every loaded run's summaries from its registered files and record the
    definitions' version. A run whose files are missing or changed cannot be recomputed: its
    files are marked stale (size -1), so readers refuse the warehouse, naming it, until it is
    loaded again or forgotten, even if its directory comes back unchanged."""
    broken = [run.run_id for run in catalogue.broken_runs(connection)]
    runs = [run for run in loaded_runs(connection) if run.run_id not in broken]
    rows = compute(runs, temp_dir, notify)
    connection.execute("BEGIN TRANSACTION")
    try:
        store(connection, [run.run_id for run in runs], rows)
        connection.execute(
            "UPDATE run_files SET bytes = -1 WHERE run_id IN (SELECT unnest(?))", [broken]
        )
        connection.execute(f"DELETE FROM {STATE_TABLE}")
        connection.execute(f"INSERT INTO {STATE_TABLE} VALUES (?)", [views_hash()])
        connection.execute("COMMIT")
    except Exception:
        connection.execute("ROLLBACK")
        raise
    if broken and notify is not None:
        notify(
            f"{db}: {len(broken)} runs could not be summarised again (their files are missing "
            f"or changed), first {broken[0]}: load them again or forget them"
        )


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
