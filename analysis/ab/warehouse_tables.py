"""A/B sessions in the warehouse: load a session folder into `ab_sessions` and `ab_blocks`
(view `ab_verdicts`, analysis/sql/views/97_ab_verdicts.sql), and its segments' run directories
as ordinary runs, so every per-run view covers the segments too.

Loading is idempotent: a session's rows are deleted and inserted again in one transaction.
`load_ab_dirs` is the writer's entry point, as analysis.capacity.warehouse_tables.
load_capacity_dirs is for capacity searches: the segment runs are checked and summarised
without the warehouse, then published with the sessions' rows under its writer lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

from analysis.ab.session_rows import SessionFolder, block_rows, read_session, session_row
from analysis.warehouse import stored_summaries
from analysis.warehouse.db import Notify, to_stderr
from analysis.warehouse.keyed_rows import replace_keyed_rows, schema_has_views
from analysis.warehouse.loader import (
    LoadError,
    ensure_schema,
    migrated_writer,
    prepare_run,
    publish,
)
from analysis.warehouse.loader import _read_manifest as read_run_manifest
from analysis.warehouse.warehouse_runs import WarehouseRun


def load_session(connection: duckdb.DuckDBPyConnection, folder: Path | str) -> str:
    """Load one session folder into ab_sessions and ab_blocks (the schema and views created or
    migrated first when they are not current); returns its session_id. Idempotent: the
    session's earlier rows are replaced in one transaction. The segments' run directories are
    not loaded here (load_ab_dirs does)."""
    return _store(connection, read_session(folder))


def _store(connection: duckdb.DuckDBPyConnection, session: SessionFolder) -> str:
    """Replace a read session's rows (the schema brought up to date first)."""
    if not schema_has_views(connection, ("ab_verdicts",)):
        ensure_schema(connection)  # creates or migrates; refuses a newer warehouse
    session_id = session.record.session_id
    replace_keyed_rows(
        connection,
        [("ab_blocks", "session_id"), ("ab_sessions", "session_id")],
        session_id,
        [
            ("ab/insert_session.sql", [session_row(session)]),
            ("ab/insert_block.sql", block_rows(session)),
        ],
    )
    return session_id


def _segment_runs(sessions: Sequence[SessionFolder], notify: Notify) -> list[WarehouseRun]:
    """Every session's segment runs, checked and ready to publish; one that cannot be loaded
    is skipped with one line to `notify` (its row in ab_blocks still says what it measured)."""
    runs: dict[str, WarehouseRun] = {}
    for session in sessions:
        for run_dir in session.segment_run_dirs():
            try:
                run = prepare_run(run_dir, read_run_manifest(run_dir))
            except LoadError as error:
                notify(f"skipping segment run {run_dir}: {error}")
                continue
            runs[run.run_id] = run
    return list(runs.values())


def load_ab_dirs(
    directories: Sequence[Path | str],
    db_path: Path | str,
    wait_s: float | None = None,
    notify: Notify = to_stderr,
    segment_runs: bool = True,
) -> list[str]:
    """Load session folders into the warehouse at `db_path`, with each session's segment run
    directories (`segment_runs`); returns the session ids loaded, in order. Every folder is
    read first (one unreadable session loads nothing), the segment runs are summarised without
    the warehouse, then everything is published under its writer lock."""
    sessions = [read_session(folder) for folder in directories]
    db = Path(db_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    runs = _segment_runs(sessions, notify) if segment_runs else []
    rows = stored_summaries.compute(runs, db.parent) if runs else {}
    with migrated_writer(db, wait_s, notify) as connection:
        if runs:
            publish(connection, runs, rows)
        return [_store(connection, session) for session in sessions]
