"""Report tables of one run, read from the warehouse's views over a read-only connection.

`report()` returns one pandas DataFrame per view, filtered to one run (the latest when none is
named), ready for a terminal table, a Dagster asset's metadata or a notebook. Every interval is
computed in SQL by the views themselves (batch means within a trial, Student-t over trials), so
the report, the CLI summary and MLflow agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis.db import connect_read_only, is_read_only

# Views reported per run, in display order; each has a run_id column.
VIEWS: dict[str, list[str]] = {
    "throughput": ["trial", "phase", "pipeline"],
    "latency": ["trial", "phase", "pipeline"],
    "latency_by_run": ["phase", "pipeline"],
    "goodput": ["trial", "phase", "pipeline"],
    "stage_breakdown": ["trial", "phase", "pipeline", "stage"],
    "energy": ["trial", "phase", "pipeline", "device"],
    "energy_split": ["trial", "phase", "device", "pipeline"],
    "perf_per_watt": ["trial", "phase", "pipeline", "device"],
    "contention": ["trial", "phase", "pipeline"],
    "contention_by_run": ["phase", "pipeline"],
    "interference": ["trial", "pipeline", "pipelines_in_phase", "co_runner_set"],
    "accuracy": ["trial", "phase", "pipeline", "stage"],
    "training": ["trial", "phase", "pipeline", "stage"],
    "tokens": ["trial", "phase", "pipeline", "stage"],
    "operator_summary": ["trial", "phase", "pipeline", "stage", "self_cpu_ms DESC"],
}


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
    """One DataFrame per view (`views`, default every key of VIEWS) for `run_id`, or for the
    latest run when None.

    Raises LookupError for an unknown run_id or an empty warehouse, FileNotFoundError when the
    database does not exist."""
    chosen = run_id if run_id is not None else latest_run_id(db_path)
    connection = connect_read_only(db_path)
    try:
        assert is_read_only(connection)
        known = connection.execute("SELECT count(*) FROM runs WHERE run_id = ?", [chosen])
        if not (known.fetchone() or (0,))[0]:
            raise LookupError(f"{db_path}: no run {chosen!r} loaded")
        frames: dict[str, pd.DataFrame] = {}
        for view in VIEWS if views is None else views:
            order = VIEWS[view]  # `view` and `order` come from the fixed VIEWS table
            frames[view] = connection.execute(
                f"SELECT * FROM {view} WHERE run_id = ? ORDER BY {', '.join(order)}", [chosen]
            ).df()
    finally:
        connection.close()
    return frames
