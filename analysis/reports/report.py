"""Report tables of one run, read from the warehouse's views over a read-only connection.

`report()` returns one pandas DataFrame per view, filtered to one run (the latest when none is
named), ready for a terminal table, a Dagster asset's metadata or a notebook. Every interval is
computed in SQL by the views themselves (batch means within a trial, Student-t over trials), so
the report, the CLI summary and MLflow agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb
import pandas as pd

from analysis.reports.catalogue import CATALOGUE, check_columns, check_views, entry
from analysis.warehouse.reader import connect_read_only, is_read_only

# Views reported per run, in display order, with their row order (analysis.reports.catalogue).
VIEWS: dict[str, list[str]] = {view.view: list(view.order_by) for view in CATALOGUE}


def warehouse_views(connection: duckdb.DuckDBPyConnection) -> set[str]:
    """The names of the views in the connection's database (ours, not DuckDB's own)."""
    rows = connection.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return {str(name) for (name,) in rows}


def latest_run_id(db_path: Path | str) -> str:
    """The run that started last (ties: loaded last); LookupError when nothing is loaded."""
    connection = connect_read_only(db_path)
    try:
        row = connection.execute(
            "SELECT run_id FROM runs ORDER BY started_at DESC NULLS LAST, loaded_at DESC LIMIT 1"
        ).fetchone()
    finally:
        connection.close()
    if row is None:
        raise LookupError(f"{db_path}: no runs loaded")
    return str(row[0])


def report(
    db_path: Path | str, run_id: str | None = None, views: Iterable[str] | None = None
) -> dict[str, pd.DataFrame]:
    """One DataFrame per view (`views`, default every view of the catalogue, in its order) for
    `run_id`, or for the latest run when None.

    Raises LookupError for an unknown run_id or an empty warehouse, FileNotFoundError when the
    database does not exist, ReportCatalogueError (a LookupError) when the catalogue and the
    warehouse's views disagree: a view or a column named in the catalogue that the SQL does
    not produce, or a view named nowhere in the catalogue."""
    chosen = run_id if run_id is not None else latest_run_id(db_path)
    connection = connect_read_only(db_path)
    try:
        assert is_read_only(connection)
        known = connection.execute("SELECT count(*) FROM runs WHERE run_id = ?", [chosen])
        if not (known.fetchone() or (0,))[0]:
            raise LookupError(f"{db_path}: no run {chosen!r} loaded")
        check_views(warehouse_views(connection))
        frames: dict[str, pd.DataFrame] = {}
        for view in VIEWS if views is None else views:
            order = entry(view).order_by  # `view` and `order` come from the fixed catalogue
            frames[view] = connection.execute(
                f"SELECT * FROM {view} WHERE run_id = ? ORDER BY {', '.join(order)}", [chosen]
            ).df()
            check_columns(view, frames[view].columns)
    finally:
        connection.close()
    return frames
