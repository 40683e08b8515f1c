"""Stored per-run summaries: what a summarised view returns equals its definition computed over
every raw row, loading one run leaves the others' stored rows alone, and a warehouse whose
summaries were stored by other view definitions gets them recomputed on the next load."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from analysis import summaries
from analysis.db import connect_read_only
from analysis.loader import load_runs
from tests.analysis.runs import collocated_run, single_pipeline_run


def rows(db_path: Path, sql: str) -> list[tuple[object, ...]]:
    connection = connect_read_only(db_path)
    try:
        return sorted(connection.execute(sql).fetchall(), key=repr)
    finally:
        connection.close()


def summarised_views() -> list[str]:
    return [table.removeprefix("summary_") for table in summaries.summary_tables()]


def test_every_summarised_view_equals_its_definition_over_all_rows(
    tmp_path: Path, db_path: Path
) -> None:
    load_runs([single_pipeline_run(tmp_path).write(), collocated_run(tmp_path).write()], db_path)
    views = summarised_views()
    assert {"throughput", "latency", "stage_breakdown", "goodput", "load_windows"} <= set(views)
    for view in views:
        stored = rows(db_path, f"SELECT * FROM {view}")
        computed = rows(db_path, f"SELECT * FROM {view}_from_rows")
        assert stored == computed, view
    assert len(rows(db_path, "SELECT * FROM latency")) == 5  # 1 + 4 (run, phase, pipeline)


def test_loading_a_run_leaves_the_other_runs_summaries_alone(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    before = rows(db_path, "SELECT * FROM latency")
    load_runs([collocated_run(tmp_path).write()], db_path)
    after = rows(db_path, "SELECT * FROM latency WHERE run_id = '20260101-000000-single'")
    assert after == before
    # The scope variable is gone after a load: the definition sees every run again.
    assert len(rows(db_path, "SELECT * FROM latency_from_rows")) == 5


def test_summaries_stored_by_other_view_definitions_are_recomputed(
    tmp_path: Path, db_path: Path
) -> None:
    single = single_pipeline_run(tmp_path).write()
    load_runs([single], db_path)
    good = rows(db_path, "SELECT * FROM throughput")
    # What an older collobench would leave: other stored numbers, another definitions hash.
    connection = duckdb.connect(str(db_path))
    connection.execute("UPDATE summary_throughput SET queries_per_s = -1")
    connection.execute(f"UPDATE {summaries.STATE_TABLE} SET views_sha256 = 'older'")
    connection.close()
    assert rows(db_path, "SELECT DISTINCT queries_per_s FROM throughput") == [(-1.0,)]
    load_runs([collocated_run(tmp_path).write()], db_path)
    assert rows(db_path, "SELECT * FROM throughput WHERE run_id = '20260101-000000-single'") == (
        good
    )
    assert rows(db_path, f"SELECT views_sha256 FROM {summaries.STATE_TABLE}") == [
        (summaries.views_hash(),)
    ]


def test_a_failed_load_keeps_the_runs_stored_summaries(tmp_path: Path, db_path: Path) -> None:
    run = single_pipeline_run(tmp_path)
    load_runs([run.write()], db_path)
    before = rows(db_path, "SELECT * FROM stage_breakdown")
    (run.run_dir / "stage_events.parquet").write_bytes(b"not parquet")
    with pytest.raises(duckdb.Error):
        load_runs([run.run_dir], db_path)
    assert rows(db_path, "SELECT * FROM stage_breakdown") == before
