"""Stored per-run summaries: what a summarised view returns equals its definition computed over
every raw row, loading one run leaves the others' stored rows alone, and a warehouse whose
summaries were stored by other view definitions gets them recomputed on the next load."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from analysis.warehouse import definitions_db, stored_summaries, view_manifest
from analysis.warehouse.load_steps import STEPS, LoadSteps
from analysis.warehouse.loader import LoadError, load_runs
from analysis.warehouse.reader import connect_read_only
from tests.analysis.runs import collocated_run, single_pipeline_run


def rows(db_path: Path, sql: str) -> list[tuple[object, ...]]:
    connection = connect_read_only(db_path)
    try:
        return sorted(connection.execute(sql).fetchall(), key=repr)
    finally:
        connection.close()


def definition_rows(db_path: Path, sql: str) -> list[tuple[object, ...]]:
    with definitions_db.warehouse_definitions(db_path) as connection:
        return sorted(connection.execute(sql).fetchall(), key=repr)


def summarised_views() -> list[str]:
    return [table.removeprefix("summary_") for table in view_manifest.summary_tables()]


@pytest.mark.slow
def test_every_summarised_view_equals_its_definition_over_all_rows(
    tmp_path: Path, db_path: Path
) -> None:
    load_runs([single_pipeline_run(tmp_path).write(), collocated_run(tmp_path).write()], db_path)
    views = summarised_views()
    assert {
        "throughput",
        "latency",
        "stage_breakdown",
        "goodput",
        "load_windows",
    } <= set(views)
    for view in views:
        stored = rows(db_path, f"SELECT * FROM {view}")
        computed = definition_rows(db_path, f"SELECT * FROM {view}_from_rows")
        assert stored == computed, view
    assert len(rows(db_path, "SELECT * FROM latency")) == 5  # 1 + 4 (run, phase, pipeline)


@pytest.mark.slow
def test_loading_a_run_leaves_the_other_runs_summaries_alone(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    before = rows(db_path, "SELECT * FROM latency")
    load_runs([collocated_run(tmp_path).write()], db_path)
    after = rows(db_path, "SELECT * FROM latency WHERE run_id = '20260101-000000-single'")
    assert after == before
    assert len(definition_rows(db_path, "SELECT * FROM latency_from_rows")) == 5
    # Definitions are the loader's, never the warehouse's: only figures are listed there.
    listed = rows(db_path, "SELECT view_name FROM duckdb_views() WHERE NOT internal")
    assert listed and not [name for (name,) in listed if str(name).endswith("_from_rows")]


@pytest.mark.slow
def test_summaries_stored_by_other_view_definitions_are_recomputed(
    tmp_path: Path, db_path: Path
) -> None:
    single = single_pipeline_run(tmp_path).write()
    load_runs([single], db_path)
    good = rows(db_path, "SELECT * FROM throughput")
    # What an older collobench would leave: other stored numbers, another definitions hash.
    connection = duckdb.connect(str(db_path))
    connection.execute("UPDATE summary_throughput SET queries_per_s = -1")
    connection.execute(f"UPDATE {stored_summaries.STATE_TABLE} SET views_sha256 = 'older'")
    connection.close()
    assert rows(db_path, "SELECT DISTINCT queries_per_s FROM throughput") == [(-1.0,)]
    load_runs([collocated_run(tmp_path).write()], db_path)
    assert rows(db_path, "SELECT * FROM throughput WHERE run_id = '20260101-000000-single'") == (
        good
    )
    assert rows(db_path, f"SELECT views_sha256 FROM {stored_summaries.STATE_TABLE}") == [
        (stored_summaries.views_hash(),)
    ]


@pytest.mark.slow
def test_a_failed_load_keeps_the_runs_stored_summaries(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path / "first").write()], db_path)
    before = rows(db_path, "SELECT * FROM stage_breakdown")
    again = single_pipeline_run(tmp_path / "again")  # the same run_id, from another directory
    again.write()
    (again.run_dir / "stage_events.parquet").write_bytes(b"not parquet")
    with pytest.raises(LoadError, match=r"stage_events\.parquet: not a readable Parquet file"):
        load_runs([again.run_dir], db_path)
    assert rows(db_path, "SELECT * FROM stage_breakdown") == before


def test_each_guard_is_false_only_where_its_definition_is_empty(tmp_path: Path) -> None:
    """A summary's guard (analysis/warehouse/view_manifest.py) lets the loader skip the definition:
    on runs without the rows it names the guard is false and the definition (run anyway) empty; on
    runs with them the guard is true."""
    from analysis.warehouse.loader import _read_manifest, prepare_run
    from tests.analysis.test_accuracy_views import graded_run
    from tests.analysis.test_tokens import generation_run

    guards = view_manifest.guards()
    assert set(guards) == {
        "summary_accuracy",
        "summary_training",
        "summary_tokens",
        "summary_token_goodput",
    }
    plain = [single_pipeline_run(tmp_path / "p").write(), collocated_run(tmp_path / "p").write()]
    rich = [graded_run(tmp_path / "r").write(), generation_run(tmp_path / "r").write()]
    for run_dirs, expected in ((plain, False), (rich, True)):
        runs = [prepare_run(path, _read_manifest(path)) for path in run_dirs]
        with definitions_db.definitions_database(runs) as connection:
            definitions_db.fill(connection, guarded=False)
            for table, guard in guards.items():
                said = connection.execute(guard).fetchall()[0][0]
                if table != "summary_training":  # no fixture trains: checked empty below
                    assert said is expected, (table, run_dirs)
                if not said:
                    definition = table.removeprefix("summary_") + "_from_rows"
                    assert connection.execute(f"SELECT * FROM {definition}").fetchall() == []


@pytest.mark.slow
def test_summaries_in_several_batches_equal_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dirs = [single_pipeline_run(tmp_path).write(), collocated_run(tmp_path).write()]
    load_runs(run_dirs, tmp_path / "one_batch.duckdb")
    monkeypatch.setattr(stored_summaries, "BATCH_ROWS", 1)  # each run a batch of its own
    steps = LoadSteps()
    load_runs(run_dirs, tmp_path / "batches.duckdb", steps=steps)
    for view in summarised_views():
        sql = f"SELECT * FROM {view}"
        assert rows(tmp_path / "batches.duckdb", sql) == rows(tmp_path / "one_batch.duckdb", sql)
    # Every step of the load was timed, the summaries with some CPU.
    assert list(steps.rounded()) == list(STEPS)
    assert all(seconds >= 0 for seconds in [*steps.wall_s.values(), *steps.cpu_s.values()])
    assert steps.cpu_s["summaries"] > 0
