"""Every view and raw table gives the results frozen before issue 22 (raw rows moved out of
DuckDB into the run directories' Parquet files) on the same fixture runs."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analysis.warehouse.loader import load_runs
from analysis.warehouse.migrations import CURRENT_VERSION
from analysis.warehouse.raw_rows_out import exported_rows_dir
from stages.rundir.layout import table_files
from stages.rundir.schemas import TABLES
from tests.analysis.view_results import (
    FROZEN,
    build,
    current_results,
    fixture_runs,
)

V5_SCHEMA = Path(__file__).parent / "data" / "schema_v5.sql"


def _float(value: Any) -> float | None:
    """A frozen float (kept as its repr: '6.0', 'inf', 'nan'), else None."""
    if not isinstance(value, str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def same_value(now: Any, frozen: Any) -> bool:
    """Equal, or floats equal to 13 significant digits: a standard error summed over the
    batches in another order may differ in its last bit (one such value, 1 ulp, since the
    batch-means cut moved from a window function to list slices), which is no other figure."""
    if now == frozen:
        return True
    if isinstance(now, list) and isinstance(frozen, list):
        return len(now) == len(frozen) and all(map(same_value, now, frozen))
    a, b = _float(now), _float(frozen)
    if a is None or b is None:
        return False
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-13)


def differences(frozen: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """One line per view whose results differ from the frozen ones (rows compared value by
    value where the freeze kept them, by their sha256 otherwise)."""
    found = []
    for name, expected in sorted(frozen.items()):
        actual = now.get(name)
        if actual is None:
            found.append(f"{name}: missing")
        elif actual["columns"] != expected["columns"]:
            found.append(f"{name}: columns {actual['columns']} != {expected['columns']}")
        elif actual["sha256"] != expected["sha256"] and not (
            "data" in expected and same_value(actual.get("data"), expected["data"])
        ):
            first = next(
                (
                    f"{row} != {old}"
                    for row, old in zip(
                        actual.get("data", []), expected.get("data", []), strict=False
                    )
                    if not same_value(row, old)
                ),
                "",
            )
            found.append(f"{name}: {actual['rows']} rows (frozen {expected['rows']}) {first}")
    return found


def test_a_last_bit_is_the_only_difference_tolerated() -> None:
    """The comparison itself: a 1-ulp float passes, anything more or any other value fails."""
    frozen = {"v": {"columns": ["x"], "rows": 1, "sha256": "a", "data": [["0.16329931618554522"]]}}
    now = {"v": {"columns": ["x"], "rows": 1, "sha256": "b", "data": [["0.1632993161855452"]]}}
    assert differences(frozen, now) == []
    for other in ("0.1632993161855", "inf", "nan", 0.16329931618554522, "x"):
        now["v"]["data"] = [[other]]
        assert len(differences(frozen, now)) == 1, other


@pytest.mark.slow
def test_every_view_and_raw_table_equals_the_frozen_results(tmp_path: Path) -> None:
    frozen = json.loads(FROZEN.read_text(encoding="utf-8"))
    now = build(tmp_path)
    assert differences(frozen, now) == []
    assert "query_latency" in frozen and "stage_events" in frozen  # the freeze covered them


def _columns(connection: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    rows = connection.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [name for (name,) in rows]


def write_v5_warehouse(db: Path, run_dirs: list[Path]) -> None:
    """A warehouse as collobench left it before issue 22 (version 5, tests/analysis/data/
    schema_v5.sql): every raw row copied into DuckDB tables, no summaries stored yet."""
    connection = duckdb.connect(str(db))
    try:
        connection.execute(V5_SCHEMA.read_text(encoding="utf-8"))
        connection.execute("INSERT INTO schema_info VALUES (5, 'frozen', now())")
        last = {json.loads((d / "manifest.json").read_text())["run_id"]: d for d in run_dirs}
        for run_id, run_dir in last.items():
            manifest = json.loads((run_dir / "manifest.json").read_text())
            connection.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, now(), ?)",
                [
                    run_id,
                    manifest["name"],
                    manifest["spec_hash"],
                    manifest["status"],
                    manifest["started_at"],
                    manifest.get("ended_at"),
                    json.dumps(manifest),
                    str(run_dir.resolve()),
                    manifest.get("host"),
                ],
            )
            for table in TABLES:
                files, _ = table_files(run_dir, table)
                if files:
                    # The version-5 columns only: files written since carry newer ones
                    # (stage_events.prompt_tokens) that a version-5 warehouse never held.
                    columns = ", ".join(_columns(connection, table))
                    connection.execute(
                        f"INSERT INTO {table} BY NAME "
                        f"SELECT {columns} FROM read_parquet(?, union_by_name = true)",
                        [[str(path) for path in files]],
                    )
    finally:
        connection.close()


@pytest.mark.slow
def test_a_version_5_warehouse_migrates_with_every_run_and_the_same_results(
    tmp_path: Path,
) -> None:
    """Migration 6 moves the raw rows out: a run whose directory is still there gets its files
    registered, one whose directory is gone gets its rows written beside the warehouse; every
    view then gives the frozen results."""
    runs = fixture_runs(tmp_path / "runs")
    db = tmp_path / "warehouse.duckdb"
    write_v5_warehouse(db, runs)
    gone = next(path for path in runs if path.name == "20260101-000000-single")
    shutil.rmtree(gone)
    said: list[str] = []
    load_runs([runs[1]], db, notify=said.append)  # any run: loading migrates
    assert said == [f"{db}: upgraded the warehouse schema from version 5 to {CURRENT_VERSION}"]
    exported = exported_rows_dir(db) / gone.name
    assert sorted(path.name for path in exported.iterdir()) == [
        "errors.parquet",
        "queries.parquet",
        "stage_events.parquet",
    ]
    frozen = json.loads(FROZEN.read_text(encoding="utf-8"))
    assert differences(frozen, current_results(db)) == []
