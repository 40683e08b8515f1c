"""Per-run stored summaries: the expensive figures computed once per run at load, then read.

A summarised view's file defines `<view>_from_rows` (the definition, over the raw rows), a
table `summary_<view>` and the public view `<view>` reading that table (see
analysis/sql/views/20_latency.sql; analysis/warehouse/view_manifest.py declares which files do).
Every view named `*_from_rows` is a definition, not a figure: it exists only in the loader's own
in-memory database (analysis.warehouse.definitions_db), never in the warehouse, where a user would
meet a view that scans every raw row.

Computing is done before the warehouse's writer lock is taken: runs are summarised in batches
(BATCH_ROWS raw rows at most: bounded memory, many runs per pass) in an in-memory DuckDB that
sees only the batch's Parquet files and uses every core; the warehouse then receives a few
hundred summary rows per run in a short transaction (analysis.warehouse.loader.publish). When any
view file changes (a new collobench), the stored rows may no longer match their definition:
`prepare` drops the summary tables before the view files recreate them, and `rebuild_all` recomputes
them for every loaded run from its registered files.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import pyarrow as pa

from analysis.warehouse import registered_files
from analysis.warehouse.db import Notify
from analysis.warehouse.definitions_db import definitions_database, fill, use_runs
from analysis.warehouse.sql_files import sql_text, view_files
from analysis.warehouse.view_manifest import DEFINITION_SUFFIX, summary_files, summary_tables
from analysis.warehouse.warehouse_runs import WarehouseRun, loaded_runs

STATE_TABLE = "summaries_version"
# Raw rows (queries + stage events + samples) summarised in one pass at most: the batch's
# aggregates and sorts stay within memory_limit (DuckDB spills the rest), and one pass over
# several small runs costs less than one pass each.
BATCH_ROWS = 4_000_000


@functools.cache
def views_hash() -> str:
    """sha256 of what defines the warehouse (schema.sql, the raw tables' shapes, and every view
    file, names and text): the version of the summaries' definitions and of the views."""
    digest = hashlib.sha256()
    digest.update(repr(registered_files.shapes()).encode())
    for name in ["schema.sql", *(f"views/{name}" for name in view_files())]:
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


def batches(runs: Sequence[WarehouseRun], limit_rows: int = BATCH_ROWS) -> list[list[WarehouseRun]]:
    """`runs` in order, cut into batches of at most limit_rows raw rows (a larger run alone)."""
    found: list[list[WarehouseRun]] = []
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
    runs: Sequence[WarehouseRun],
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
    cut = batches(runs, BATCH_ROWS)
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
    broken = [run.run_id for run in registered_files.broken_runs(connection)]
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
