"""Loading is idempotent, reads cut-short runs from parts/, and refuses non-run directories;
readers get read-only connections."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from analysis.warehouse.loader import TABLES, LoadError, forget_runs, load_runs
from analysis.warehouse.reader import (
    ReadOnlyRequired,
    connect_read_only,
    query_connection,
    run_query,
)
from analysis.warehouse.sql_files import WarehouseError, sql_text, view_files
from tests.analysis.runs import collocated_run, single_pipeline_run

VIEWS = ["throughput", "latency", "stage_breakdown", "energy", "perf_per_watt", "contention"]


def counts(db_path: Path) -> dict[str, int]:
    connection = connect_read_only(db_path)
    try:
        found = {}
        for table in ("runs", *TABLES):
            row = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
            found[table] = row[0] if row else -1
        return found
    finally:
        connection.close()


def test_loading_twice_leaves_identical_rows(tmp_path: Path, db_path: Path) -> None:
    single = single_pipeline_run(tmp_path).write()
    colloc = collocated_run(tmp_path).write()
    first = load_runs([single, colloc], db_path)
    before = counts(db_path)
    views_before = {
        view: run_query(db_path, f"SELECT * FROM {view} ORDER BY ALL") for view in VIEWS
    }
    second = load_runs([colloc, single], db_path)
    assert counts(db_path) == before
    for view in VIEWS:
        assert run_query(db_path, f"SELECT * FROM {view} ORDER BY ALL") == views_before[view]
    assert before["runs"] == 2
    assert before["queries"] == 1030 + 2300
    assert [result.replaced for result in first] == [False, False]
    assert [result.replaced for result in second] == [True, True]
    assert first[0].rows["queries"] == 1030 and first[0].rows["errors"] == 1
    assert first[1].rows["gpu_samples"] == 3 and first[1].rows["gpu_process_samples"] == 0


def test_runs_table_records_the_manifest(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    _, rows = run_query(
        db_path,
        "SELECT run_id, name, spec_hash, status, ended_at IS NOT NULL, "
        "manifest->>'$.spec.pipelines[0].loadgen.type' FROM runs",
    )
    assert rows == [("20260101-000000-single", "single", "0" * 64, "ok", True, "server")]


def test_cut_short_run_is_read_from_parts(tmp_path: Path, db_path: Path) -> None:
    run = collocated_run(tmp_path)
    run.status = "running"  # the runner died before the merge and the final manifest
    run_dir = run.write(as_parts=True)
    assert not (run_dir / "queries.parquet").exists()
    [result] = load_runs([run_dir], db_path)
    assert result.from_parts and result.status == "running"
    assert result.rows["queries"] == 2300
    _, rows = run_query(db_path, "SELECT pipeline, throughput_ratio FROM contention ORDER BY 1")
    assert rows == [("a", pytest.approx(0.5)), ("b", pytest.approx(1.0))]
    _, ended = run_query(db_path, "SELECT status, ended_at FROM runs")
    assert ended == [("running", None)]
    load_runs([run_dir], db_path)
    assert counts(db_path)["queries"] == 2300


def test_merged_file_and_late_parts_are_both_read(tmp_path: Path, db_path: Path) -> None:
    run = single_pipeline_run(tmp_path)
    run_dir = run.write()
    extra = collocated_run(tmp_path / "other", run_id=run.run_id)  # same run_id, more rows
    extra.rows = {"queries": extra.rows["queries"]}
    extra.write(as_parts=True)
    (tmp_path / "other" / run.run_id / "parts").rename(run_dir / "parts")
    [result] = load_runs([run_dir], db_path)
    assert result.from_parts
    assert result.rows["queries"] == 1030 + 2300


def test_directory_without_manifest_is_a_one_line_error(tmp_path: Path, db_path: Path) -> None:
    good = single_pipeline_run(tmp_path).write()
    bad = tmp_path / "not-a-run"
    bad.mkdir()
    with pytest.raises(LoadError) as caught:
        load_runs([good, bad], db_path)
    message = str(caught.value)
    assert "\n" not in message and str(bad) in message and "manifest.json" in message
    assert not db_path.exists()  # checked before anything was written


def test_rows_of_another_run_are_refused_and_rolled_back(tmp_path: Path, db_path: Path) -> None:
    run_dir = single_pipeline_run(tmp_path).write()
    load_runs([run_dir], db_path)
    before = counts(db_path)
    stranger = collocated_run(tmp_path / "stranger")
    stranger.write()
    copy = tmp_path / "copy" / run_dir.name
    shutil.copytree(run_dir, copy)
    (stranger.run_dir / "queries.parquet").replace(copy / "queries.parquet")
    with pytest.raises(LoadError, match="run_id other than"):
        load_runs([copy], db_path)
    assert counts(db_path) == before


def test_a_moved_or_rewritten_run_is_refused_by_name_until_loaded_again(
    tmp_path: Path, db_path: Path
) -> None:
    """The rows stay in the run directory: once it moves or a file changes, readers get one
    line naming the run and the way out, never other numbers; loading it from its new place
    (or forgetting it) makes the warehouse readable again."""
    run_dir = single_pipeline_run(tmp_path).write()
    load_runs([run_dir, collocated_run(tmp_path).write()], db_path)
    before = counts(db_path)
    moved = tmp_path / "moved" / run_dir.name
    moved.parent.mkdir()
    run_dir.rename(moved)
    with pytest.raises(WarehouseError) as refused:
        connect_read_only(db_path)
    message = str(refused.value)
    assert "\n" not in message
    assert f"run 20260101-000000-single ({run_dir})" in message
    assert ".parquet is missing" in message
    assert "collobench load --forget 20260101-000000-single" in message
    load_runs([moved], db_path)
    assert counts(db_path) == before
    (moved / "queries.parquet").write_bytes((moved / "queries.parquet").read_bytes() + b"\0")
    with pytest.raises(WarehouseError, match=r"queries\.parquet changed since it was loaded"):
        connect_read_only(db_path)
    with pytest.raises(LoadError, match="no run never-loaded is loaded"):
        forget_runs(["20260101-000000-single", "never-loaded"], db_path)
    assert forget_runs(["20260101-000000-single"], db_path) == ["20260101-000000-single"]
    assert counts(db_path)["queries"] == before["queries"] - 1030


def test_the_cli_names_a_deleted_run_and_forgets_every_missing_one(
    tmp_path: Path, db_path: Path
) -> None:
    """`collobench sql` on a warehouse whose run directory was deleted: exit 2, one line
    naming it; `collobench load --forget-missing` drops exactly the runs whose files are gone,
    and the rest reads as before."""
    from typer.testing import CliRunner

    from stages.cli.app import app

    runner = CliRunner()
    kept = single_pipeline_run(tmp_path).write()
    deleted = collocated_run(tmp_path).write()
    load_runs([kept, deleted], db_path)
    latency = run_query(
        db_path, "SELECT * FROM latency WHERE run_id = '20260101-000000-single' ORDER BY ALL"
    )
    shutil.rmtree(deleted)
    query = ["sql", "SELECT count(*) FROM latency", "--db", str(db_path)]
    refused = runner.invoke(app, query)
    assert refused.exit_code == 2
    assert len(refused.output.strip().splitlines()) == 1
    assert f"({deleted})" in refused.output and "--forget-missing" in refused.output
    unknown = runner.invoke(app, ["load", "--forget", "nope", "--db", str(db_path)])
    assert unknown.exit_code == 2 and "no run nope is loaded" in unknown.output
    forgot = runner.invoke(app, ["load", "--forget-missing", "--db", str(db_path)])
    assert forgot.exit_code == 0, forgot.output
    assert f"forgot {deleted.name}" in forgot.output and kept.name not in forgot.output
    assert run_query(db_path, "SELECT run_id FROM runs")[1] == [(kept.name,)]
    assert (
        run_query(
            db_path, "SELECT * FROM latency WHERE run_id = '20260101-000000-single' ORDER BY ALL"
        )
        == latency
    )
    nothing = runner.invoke(app, ["load", "--db", str(db_path)])
    assert nothing.exit_code == 2 and "give run directories" in nothing.output


def test_read_only_connection_refuses_writes(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    connection = connect_read_only(db_path)
    try:
        with pytest.raises(duckdb.Error):
            connection.execute("INSERT INTO runs (run_id, loaded_at) VALUES ('x', now())")
    finally:
        connection.close()
    with pytest.raises(ReadOnlyRequired, match="not DELETE"):  # refused before it opens
        run_query(db_path, "DELETE FROM queries")
    assert counts(db_path)["queries"] == 1030


def test_query_connection_refuses_a_writable_connection(db_path: Path) -> None:
    connection = duckdb.connect()
    try:
        with pytest.raises(ReadOnlyRequired):
            query_connection(connection, "SELECT 1")
    finally:
        connection.close()


def test_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="collobench load"):
        run_query(tmp_path / "absent.duckdb", "SELECT 1")


def test_sql_files_ship_as_package_resources() -> None:
    names = view_files()
    assert names == sorted(names)
    assert len(names) >= 6
    for name in names:
        text = sql_text(f"views/{name}")
        assert text.lstrip().startswith("--"), f"{name} needs a leading comment"
        assert "CREATE OR REPLACE VIEW" in text or "CREATE OR REPLACE MACRO" in text
    assert "CREATE TABLE IF NOT EXISTS runs" in sql_text("schema.sql")


def every_view(db_path: Path) -> list[str]:
    _, rows = run_query(db_path, "SELECT view_name FROM duckdb_views() WHERE NOT internal")
    return sorted(row[0] for row in rows)


@pytest.mark.slow
def test_loading_twice_leaves_every_view_identical(tmp_path: Path, db_path: Path) -> None:
    """Beyond VIEWS above: every view of the warehouse (repr, so NaN equals NaN)."""
    runs = [single_pipeline_run(tmp_path).write(), collocated_run(tmp_path).write()]
    load_runs(runs, db_path)
    views = every_view(db_path)
    assert len(views) == len(set(views)) >= 20
    before = {
        view: repr(run_query(db_path, f"SELECT * FROM {view} ORDER BY ALL")) for view in views
    }
    load_runs(runs[::-1], db_path)
    assert every_view(db_path) == views
    for view in views:
        assert repr(run_query(db_path, f"SELECT * FROM {view} ORDER BY ALL")) == before[view], view


@pytest.mark.slow
def test_interrupted_run_missing_tables_loads_and_every_view_answers(
    tmp_path: Path, db_path: Path
) -> None:
    """An interrupted run left only parts/ of queries and host_samples: no stage_events, errors
    or GPU tables at all. It loads, and every view answers over it."""
    run = collocated_run(tmp_path)
    run.status = "interrupted"
    run.rows = {table: run.rows[table] for table in ("queries", "host_samples")}
    run_dir = run.write(as_parts=True)
    assert sorted(path.name for path in (run_dir / "parts").iterdir()) == [
        "host_samples",
        "queries",
    ]
    [result] = load_runs([run_dir], db_path)
    assert result.status == "interrupted" and result.from_parts
    assert result.rows["queries"] == 2300 and result.rows["stage_events"] == 0
    assert result.rows["gpu_samples"] == 0 and result.rows["errors"] == 0
    for view in every_view(db_path):
        run_query(db_path, f"SELECT * FROM {view}")
    _, rows = run_query(
        db_path, "SELECT phase, pipeline, queries_per_s FROM throughput ORDER BY phase, pipeline"
    )
    assert rows == [
        ("collocated", "a", pytest.approx(50.0)),
        ("collocated", "b", pytest.approx(40.0)),
        ("solo", "a", pytest.approx(100.0)),
        ("solo", "b", pytest.approx(40.0)),
    ]
    _, rows = run_query(db_path, "SELECT pipeline, throughput_ratio FROM contention ORDER BY 1")
    assert rows == [("a", pytest.approx(0.5)), ("b", pytest.approx(1.0))]
    _, rows = run_query(db_path, "SELECT count(*) FROM stage_breakdown")
    assert rows == [(0,)]


def test_runs_without_calibration_rows_read_as_an_empty_calibration_view(
    tmp_path: Path, db_path: Path
) -> None:
    """Runs from before the calibration (no calibration.parquet): `SELECT * FROM calibration`
    still answers, with the table's columns (the contract's names and types) and no rows."""
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    connection = connect_read_only(db_path)
    try:
        columns = connection.execute("DESCRIBE SELECT * FROM calibration").fetchall()
        rows = connection.execute("SELECT * FROM calibration").fetchall()
    finally:
        connection.close()
    assert [(name, kind) for name, kind, *_ in columns] == [
        ("run_id", "VARCHAR"),
        ("trial", "INTEGER"),
        ("phase", "VARCHAR"),
        ("pipeline", "VARCHAR"),
        ("position", "VARCHAR"),
        ("workload", "VARCHAR"),
        ("score", "DOUBLE"),
        ("unit", "VARCHAR"),
        ("start_ns", "BIGINT"),
        ("end_ns", "BIGINT"),
    ]
    assert rows == []
