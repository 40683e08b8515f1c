"""Schema versions: a version-1 warehouse (the frozen schema of tests/analysis/data/schema_v1.sql,
written before versions were recorded) migrates on load with its rows intact; a newer warehouse
is refused by the loader and the readers, and by the CLI with exit 2 and one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from analysis.warehouse import migrations
from analysis.warehouse.loader import load_runs
from analysis.warehouse.migrations import CURRENT_VERSION, SchemaMismatch
from analysis.warehouse.reader import connect_read_only, run_query
from analysis.warehouse.sql_files import sql_text, view_files
from stages.cli.app import app
from stages.rundir.layout import table_files
from stages.rundir.schemas import TABLES
from tests.analysis.runs import collocated_run, single_pipeline_run
from tests.analysis.test_tokens import generation_run, streaming_run

runner = CliRunner()
V1_SCHEMA = Path(__file__).parent / "data" / "schema_v1.sql"
SINGLE = "20260101-000000-single"
COLLOC = "20260102-000000-colloc"


def write_v1_warehouse(db: Path, run_dir: Path, drop_joined_ns: bool = False) -> None:
    """A warehouse as the collobench of issue 8 left it: the v1 tables, no schema_info, one run
    loaded (the columns v1 has), and a view on stage_events (views of that time existed too)."""
    db.parent.mkdir(parents=True, exist_ok=True)
    connection = duckdb.connect(str(db))
    try:
        connection.execute(V1_SCHEMA.read_text(encoding="utf-8"))
        if drop_joined_ns:  # the schema before issue 8 had no joined_ns either
            connection.execute("ALTER TABLE stage_events DROP COLUMN joined_ns")
        connection.execute(
            "CREATE VIEW generation AS SELECT run_id, first_token_ns, tokens FROM stage_events"
        )
        manifest = json.loads((run_dir / "manifest.json").read_text())
        connection.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, NULL, ?, ?, now())",
            [
                manifest["run_id"],
                manifest["name"],
                manifest["spec_hash"],
                manifest["status"],
                manifest["started_at"],
                json.dumps(manifest),
                str(run_dir),
            ],
        )
        for table in TABLES:
            files, _ = table_files(run_dir, table)
            exists = connection.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]
            ).fetchone()
            if not files or not exists or not exists[0]:
                continue
            columns = [row[0] for row in connection.execute(f"DESCRIBE {table}").fetchall()]
            listed = ", ".join(f'"{name}"' for name in columns)
            connection.execute(
                f"INSERT INTO {table} ({listed}) SELECT {listed} FROM read_parquet(?)",
                [[str(path) for path in files]],
            )
    finally:
        connection.close()


def table_columns(db: Path) -> dict[str, list[tuple[str, str]]]:
    """Every base table's (column, type) list, in column order."""
    connection = duckdb.connect(str(db), read_only=True)
    try:
        rows = connection.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name IN (SELECT table_name FROM "
            "information_schema.tables WHERE table_type = 'BASE TABLE') "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()
    finally:
        connection.close()
    found: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        found.setdefault(table, []).append((column, kind))
    return found


def versions(db: Path) -> list[tuple[Any, ...]]:
    return run_query(db, "SELECT version, written_by FROM schema_info ORDER BY version")[1]


def every_view(db: Path) -> list[str]:
    _, rows = run_query(
        db, "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY view_name"
    )
    return [row[0] for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("drop_joined_ns", [False, True], ids=["issue8", "before-issue8"])
def test_v1_warehouse_migrates_keeps_its_rows_and_takes_new_runs(
    tmp_path: Path, db_path: Path, drop_joined_ns: bool
) -> None:
    old_run = single_pipeline_run(tmp_path / "runs").write()
    write_v1_warehouse(db_path, old_run, drop_joined_ns)
    with pytest.raises(SchemaMismatch, match=r"version 1 is older.*collobench load"):
        connect_read_only(db_path)

    said: list[str] = []
    load_runs([collocated_run(tmp_path / "runs").write()], db_path, notify=said.append)

    assert said == [f"{db_path}: upgraded the warehouse schema from version 1 to {CURRENT_VERSION}"]
    assert [version for version, _ in versions(db_path)] == list(range(2, CURRENT_VERSION + 1))
    # The migrated warehouse has exactly the tables and column types of a new one.
    fresh = tmp_path / "fresh.duckdb"
    load_runs([old_run], fresh)
    assert table_columns(db_path) == table_columns(fresh)
    # The old rows survived (new columns NULL), beside the new run's.
    _, counts = run_query(
        db_path, "SELECT run_id, count(*) FROM queries GROUP BY run_id ORDER BY run_id"
    )
    assert counts == [(SINGLE, 1030), (COLLOC, 2300)]
    _, events = run_query(
        db_path,
        "SELECT count(*), count(graded), count(correct), count(loss), count(joined_ns) "
        "FROM stage_events WHERE run_id = ?".replace("?", f"'{SINGLE}'"),
    )
    assert events == [(11, 0, 0, 0, 0)]
    # Every view answers, and the old run's figures are those of the same run loaded fresh.
    views = every_view(db_path)
    assert "generation" not in views and {"latency", "accuracy", "operator_summary"} <= set(views)
    for view in views:
        run_query(db_path, f"SELECT * FROM {view}")
    for view in ("throughput", "latency", "stage_breakdown", "goodput"):
        query = f"SELECT * FROM {view} WHERE run_id = '{SINGLE}' ORDER BY ALL"
        assert run_query(db_path, query) == run_query(fresh, query), view


@pytest.mark.slow
def test_a_new_warehouse_records_its_version_once(tmp_path: Path, db_path: Path) -> None:
    run_dir = single_pipeline_run(tmp_path).write()
    load_runs([run_dir], db_path)
    load_runs([run_dir], db_path)
    assert versions(db_path) == [(CURRENT_VERSION, migrations.collobench_version())]


def set_version(db: Path, version: int) -> None:
    connection = duckdb.connect(str(db))
    try:
        connection.execute("INSERT INTO schema_info VALUES (?, 'collobench 9.9', now())", [version])
    finally:
        connection.close()


@pytest.mark.slow
def test_a_newer_warehouse_is_refused_by_loader_readers_and_cli(
    tmp_path: Path, db_path: Path
) -> None:
    single = single_pipeline_run(tmp_path).write()
    load_runs([single], db_path)
    newer = CURRENT_VERSION + 1
    set_version(db_path, newer)
    expected = (
        f"{db_path}: warehouse schema version {newer} is newer than this collobench "
        f"({CURRENT_VERSION}); upgrade collobench or load into a new file"
    )
    colloc = collocated_run(tmp_path).write()
    with pytest.raises(SchemaMismatch) as caught:
        load_runs([colloc], db_path)
    assert str(caught.value) == expected
    with pytest.raises(SchemaMismatch, match=f"version {newer} is newer"):
        connect_read_only(db_path)

    loaded = runner.invoke(app, ["load", str(colloc), "--db", str(db_path)])
    assert loaded.exit_code == 2 and loaded.stderr.strip() == expected
    for command in (
        ["sql", "SELECT 1"],
        ["report", SINGLE],
        ["compare", SINGLE, SINGLE],
    ):
        refused = runner.invoke(app, [*command, "--db", str(db_path)])
        assert refused.exit_code == 2, command
        assert refused.stderr.strip() == expected, command
    # Nothing was written: the newer warehouse still has only its own run.
    connection = duckdb.connect(str(db_path), read_only=True)
    try:
        assert connection.execute("SELECT run_id FROM runs").fetchall() == [(SINGLE,)]
    finally:
        connection.close()


def test_readers_of_an_old_warehouse_are_told_to_load(tmp_path: Path, db_path: Path) -> None:
    write_v1_warehouse(db_path, single_pipeline_run(tmp_path).write())
    for command in (["sql", "SELECT * FROM runs"], ["report"], ["compare", SINGLE, SINGLE]):
        refused = runner.invoke(app, [*command, "--db", str(db_path)])
        assert refused.exit_code == 2, command
        message = refused.stderr.strip()
        assert "\n" not in message and "Binder" not in message
        assert message.startswith(f"{db_path}: warehouse schema version 1 is older"), message
        assert "collobench load" in message


def test_migrations_are_numbered_commented_and_reach_the_current_version() -> None:
    found = migrations.migration_files()
    assert [version for version, _ in found] == list(range(2, CURRENT_VERSION + 1))
    for _, name in found:
        assert sql_text(f"migrations/{name}").lstrip().startswith("--"), name
    assert "CREATE TABLE IF NOT EXISTS schema_info" in sql_text("schema.sql")
    assert view_files()  # the views are still found beside the migrations folder


@pytest.mark.slow
def test_v3_warehouse_gains_token_events_and_recomputes_its_token_figures(
    tmp_path: Path, db_path: Path
) -> None:
    """A warehouse as the collobench of issue 19 left it (version 3: no token_events, a tokens
    summary without inter-token latency, no token_goodput) migrates on the next load: its
    generation run's stored figures are recomputed with the new columns, equal to the same run
    loaded fresh, and a streamed run loaded into it gets its inter-token latency."""
    old_run = generation_run(tmp_path / "runs").write()
    load_runs([old_run], db_path)
    connection = duckdb.connect(str(db_path))
    try:
        for statement in (
            "DROP VIEW token_goodput",
            "DROP TABLE summary_token_goodput",
            "DROP VIEW tokens",
            "ALTER TABLE summary_tokens DROP COLUMN itl_gaps",
            "ALTER TABLE summary_tokens DROP COLUMN itl_p50_ms",
            "ALTER TABLE summary_tokens DROP COLUMN itl_p99_ms",
            "CREATE VIEW tokens AS SELECT * FROM summary_tokens",
            "DROP VIEW token_events",  # a table before version 6 (migration 4 makes one)
            "UPDATE schema_info SET version = 3",  # a new warehouse records its version once
            "UPDATE summaries_version SET views_sha256 = 'issue 19'",
        ):
            connection.execute(statement)
    finally:
        connection.close()
    with pytest.raises(SchemaMismatch, match=r"version 3 is older.*collobench load"):
        connect_read_only(db_path)

    said: list[str] = []
    streamed = streaming_run(tmp_path / "runs", {"ttft_slo_ms": 6}).write()
    load_runs([streamed], db_path, notify=said.append)

    assert said == [f"{db_path}: upgraded the warehouse schema from version 3 to {CURRENT_VERSION}"]
    fresh = tmp_path / "fresh.duckdb"
    load_runs([old_run, streamed], fresh)
    assert table_columns(db_path) == table_columns(fresh)
    for view in ("tokens", "token_goodput", "pipeline_specs"):
        query = f"SELECT * FROM {view} ORDER BY ALL"
        assert run_query(db_path, query) == run_query(fresh, query), view
    _, itl = run_query(db_path, "SELECT run_id, itl_gaps, itl_p99_ms FROM tokens ORDER BY run_id")
    assert itl == [("20260103-000000-gen", 0, None), ("20260104-000000-stream", 30, 30.0)]
