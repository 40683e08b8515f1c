"""Every warehouse view's rows over a fixed set of fixture runs, as JSON-ready data: the frozen
results the warehouse must keep giving (tests/analysis/data/view_results.json was written by
the warehouse before issue 22, which moved raw rows out of DuckDB into the run directories'
Parquet files; tests/analysis/test_view_results.py compares today's results with it).

    python -m tests.analysis.view_results --write   # re-freeze (only for an intended change)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from analysis.warehouse.definitions_db import warehouse_definitions
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from stages.rundir.schemas import TABLES
from tests.analysis.runs import (
    collocated_run,
    single_pipeline_run,
    slo_run,
    split_run,
    three_pipeline_run,
)
from tests.analysis.test_accuracy_views import graded_run
from tests.analysis.test_energy_validity import time_sliced_run
from tests.analysis.test_service_energy import service_run
from tests.analysis.test_tokens import generation_run, streaming_run
from tests.analysis.test_trace import traced_run

FROZEN = Path(__file__).parent / "data" / "view_results.json"
# Columns whose value depends on where or when the fixtures were loaded, not on their rows.
VOLATILE = {"loaded_at", "run_dir", "search_dir", "region_dir"}
KEPT_ROWS = 300
# Views of the freeze that are loader-side definitions since issue 22 (not in the warehouse,
# where they scanned every raw row): compared as the definition they became.
DEFINITIONS = {"measured_stage_events": "measured_stage_events_from_rows"}


def fixture_runs(root: Path) -> list[Path]:
    """Write the fixture run directories under `root`; returns them."""
    builders = [
        single_pipeline_run(root),
        collocated_run(root),
        slo_run(root),
        graded_run(root),
        time_sliced_run(root, "20260104-000000-sliced", 100, 15.0, idle_w=4.0),
        generation_run(root),
        streaming_run(root),
        traced_run(root),
    ]
    paths = [builder.write() for builder in builders]
    paths += [three_pipeline_run(root), split_run(root), service_run(root)]
    return paths


def _value(value: Any) -> Any:
    """A JSON-comparable form: floats as repr (inf, nan and every bit kept), the rest as str
    unless JSON has the type."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, list | tuple):
        return [_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _value(item) for key, item in value.items()}
    return str(value)


def results_of(connection: duckdb.DuckDBPyConnection, name: str) -> dict[str, Any]:
    result = connection.execute(f"SELECT * FROM {name}")
    columns = [column[0] for column in result.description or []]
    keep = [index for index, column in enumerate(columns) if column not in VOLATILE]
    rows = [[_value(row[index]) for index in keep] for row in result.fetchall()]
    rows.sort(key=lambda row: json.dumps(row, sort_keys=True))
    text = json.dumps(rows, sort_keys=True)
    return {
        "columns": [columns[index] for index in keep],
        "rows": len(rows),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        **({"data": rows} if len(rows) <= KEPT_ROWS else {}),
    }


def view_results(db: Path) -> dict[str, Any]:
    """Every public view's and raw table's results keyed by name: its columns (volatile ones
    left out), its row count, the sha256 of its sorted rows, and the rows themselves when there
    are at most KEPT_ROWS (so a difference can be shown)."""
    connection = connect_read_only(db)
    try:
        names = [
            name
            for (name,) in connection.execute(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY view_name"
            ).fetchall()
            if not name.endswith("_from_rows")
        ]
        names = sorted({*names, *TABLES})  # the raw tables: base tables before issue 22
        results: dict[str, Any] = {}
        for name in names:
            results[name] = results_of(connection, name)
        return results
    finally:
        connection.close()


def stage_concurrency(db: Path) -> dict[str, Any]:
    """The `stage_concurrency` view of the freeze, a table macro of one run since issue 22:
    its results for every loaded run together."""
    connection = connect_read_only(db)
    try:
        runs = [row[0] for row in connection.execute("SELECT run_id FROM runs").fetchall()]
        union = " UNION ALL ".join(
            f"SELECT * FROM stage_concurrency('{run_id}')" for run_id in sorted(runs)
        )
        connection.execute(f"CREATE TEMP VIEW stage_concurrency_all AS {union}")
        return results_of(connection, "stage_concurrency_all")
    finally:
        connection.close()


def build(root: Path) -> dict[str, Any]:
    """Load the fixture runs into a fresh warehouse under `root` and return its view results,
    with the views that became loader-side definitions (DEFINITIONS) computed as such."""
    runs = fixture_runs(root / "runs")
    db = root / "warehouse.duckdb"
    load_runs(runs, db, notify=lambda message: None)
    return current_results(db)


def current_results(db: Path) -> dict[str, Any]:
    """The frozen views' results from the warehouse at `db` as it is now: its views, the
    stage_concurrency macro over every run, and the views that became definitions."""
    results = view_results(db)
    results["stage_concurrency"] = stage_concurrency(db)
    with warehouse_definitions(db) as connection:
        for view, definition in DEFINITIONS.items():
            results[view] = results_of(connection, definition)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {FROZEN}")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = build(Path(folder))
    text = json.dumps(results, indent=0, sort_keys=True)
    if arguments.write:
        FROZEN.write_text(text + "\n", encoding="utf-8")
    print(f"{len(results)} views, {sum(view['rows'] for view in results.values())} rows")


if __name__ == "__main__":
    main()
