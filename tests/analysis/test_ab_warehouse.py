"""A/B sessions in the warehouse (analysis.ab.warehouse_tables): a session folder loads into
ab_sessions (one row), ab_blocks (one row per segment, dropped blocks flagged with session.json's
reason) and the view ab_verdicts (one row per judged figure, session.json's numbers, a non-finite
one NULL), its segment runs into `runs`; loading twice leaves the same rows; `collobench load`
takes a session folder. One real `collobench ab` session (a subprocess, module-scoped) checks
the whole chain against its own files and its `--format json` answer."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from analysis.ab.warehouse_tables import load_ab_dirs
from analysis.warehouse.loader import load_runs
from analysis.warehouse.migrations import CURRENT_VERSION
from stages.ab.session_files import SessionFiles
from stages.ab.stats.verdict import FigureVerdict
from stages.cli.app import app
from stages.contracts.ab_files import (
    SEGMENTS_FILE,
    SESSION_FILE,
    ArmRecord,
    SegmentRecord,
    SessionRecord,
)
from tests.analysis.rundirs import rows_of
from tests.analysis.runs import single_pipeline_run
from tests.analysis.test_migrations import table_columns
from tests.helpers import REPO

SESSION_ID = "20260101-000000-ab-demo-abcdef"
COUNTS = "SELECT (SELECT count(*) FROM ab_sessions) AS s, (SELECT count(*) FROM ab_blocks) AS b"


def _verdict(figure: str, high: float) -> dict[str, object]:
    """A FigureVerdict as session.json stores it (model_dump in JSON mode: inf -> null)."""
    verdict = FigureVerdict(
        figure=figure,
        verdict="undecided",
        change_pct=1.5,
        change_ci95=(-3.0, high),
        change_ci90=(-2.0, 4.0),
        p_value=0.5,
        p_holm=1.0,
        mde_pct=math.inf,
        blocks=2,
        sd_log=0.05,
        method="exact",
        paired_t_change_pct=1.4,
        paired_t_ci95=(-3.1, 6.2),
    )
    return verdict.model_dump(mode="json")


def _segment(block: int, arm: str, position: int, run_dir: Path, p99: float) -> SegmentRecord:
    return SegmentRecord(
        session_id=SESSION_ID,
        block=block,
        order="AB" if block % 2 == 0 else "BA",
        arm="A" if arm == "A" else "B",
        position=position,
        seed=100 + block,
        run_id=run_dir.name,
        run_dir=str(run_dir),
        status="ok",
        wall_s=2.5,
        values={"a/latency_p99_ms": p99, "b/queries_per_s": 50.0},
        higher_is_worse={"latency_p99_ms": True, "queries_per_s": False},
        calibration_score=10.0,
        foreign_cpu_cores=0.1,
    )


def _built_session(root: Path) -> Path:
    """Two blocks of a two-pipeline session judged on pipeline a alone; block 1 dropped (its
    B segment's p99 infinite); one segment has a real run directory, the others none."""
    folder = root / "ab" / SESSION_ID
    files = SessionFiles(folder)
    arm = ArmRecord(label="A", python=sys.executable, spec="demo.yaml", description="demo A")
    record = SessionRecord(
        session_id=SESSION_ID,
        created_at="2026-01-01T00:00:00+00:00",
        arms=[arm, arm.model_copy(update={"label": "B", "description": "demo B"})],
        seed=7,
        margin_pct=5.0,
        budget_min=15.0,
        boundary="obrien-fleming",
        looks_blocks=[2],
        look_alpha=[0.05],
        orders=["AB", "BA"],
        block_seeds=[100, 101],
        figures=["a/*"],
        status="all_looks",
        verdicts=[_verdict("a/latency_p99_ms", math.inf)],
        dropped_blocks=[(1, "a/latency_p99_ms is infinite")],
    )
    files.create(record)
    runs = files.runs
    real = single_pipeline_run(runs, f"{SESSION_ID}-block-000-A").write()
    files.append(_segment(0, "A", 0, real, 10.0))
    files.append(_segment(0, "B", 1, runs / f"{SESSION_ID}-block-000-B", 11.0))
    files.append(_segment(1, "B", 0, runs / f"{SESSION_ID}-block-001-B", math.inf))
    files.append(_segment(1, "A", 1, runs / f"{SESSION_ID}-block-001-A", 10.5))
    return folder


def test_a_segment_with_an_infinite_figure_reads_back() -> None:
    segment = _segment(0, "A", 0, Path("/nowhere"), math.inf)
    again = SegmentRecord.model_validate_json(segment.model_dump_json())
    assert again.values["a/latency_p99_ms"] == math.inf


def test_a_session_loads_its_rows_dropped_blocks_and_verdicts(
    tmp_path: Path, db_path: Path
) -> None:
    folder = _built_session(tmp_path)
    assert SessionFiles(folder).segments()[2].values["a/latency_p99_ms"] == math.inf
    said: list[str] = []
    assert load_ab_dirs([folder], db_path, wait_s=5, notify=said.append) == [SESSION_ID]
    session = rows_of(db_path, "SELECT * FROM ab_sessions")
    assert len(session) == 1
    assert session[0]["blocks_done"] == 2 and session[0]["arm_b"] == "demo B"
    assert session[0]["looks_blocks"] == [2] and session[0]["session_dir"] == str(folder)
    blocks = rows_of(db_path, "SELECT * FROM ab_blocks ORDER BY block, position")
    assert [(b["block"], b["arm"], b["block_order"]) for b in blocks] == [
        (0, "A", "AB"),
        (0, "B", "AB"),
        (1, "B", "BA"),
        (1, "A", "BA"),
    ]
    assert [b["dropped"] for b in blocks] == [False, False, True, True]
    assert [b["dropped_reason"] for b in blocks][1:3] == [None, "a/latency_p99_ms is infinite"]
    assert json.loads(blocks[2]["values"])["a/latency_p99_ms"] is None  # Infinity -> null
    verdicts = rows_of(db_path, "SELECT * FROM ab_verdicts")
    assert len(verdicts) == 1
    row = verdicts[0]
    assert (row["pipeline"], row["metric"], row["phase"]) == ("a", "latency_p99_ms", "collocated")
    assert (row["change_ci95_low"], row["change_ci95_high"], row["mde_pct"]) == (-3.0, None, None)
    assert (row["blocks"], row["blocks_dropped"], row["status"]) == (2, 1, "all_looks")
    runs = rows_of(db_path, "SELECT run_id FROM runs")
    assert runs == [{"run_id": f"{SESSION_ID}-block-000-A"}]  # the others have no directory
    load_ab_dirs([folder], db_path, wait_s=5, notify=said.append)
    assert rows_of(db_path, COUNTS) == [{"s": 1, "b": 4}]
    assert not said


def test_collobench_load_takes_a_session_folder(tmp_path: Path, db_path: Path) -> None:
    folder = _built_session(tmp_path)
    run = single_pipeline_run(tmp_path / "plain").write()
    for _ in range(2):
        result = CliRunner().invoke(app, ["load", str(folder), str(run), "--db", str(db_path)])
        assert result.exit_code == 0, result.output
    assert f"loaded A/B session {SESSION_ID}" in result.output
    assert rows_of(db_path, COUNTS) == [{"s": 1, "b": 4}]
    assert len(rows_of(db_path, "SELECT run_id FROM runs")) == 2


def test_an_unreadable_session_is_refused_with_one_line(tmp_path: Path, db_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / SESSION_FILE).write_text("{}")
    result = CliRunner().invoke(app, ["load", str(folder), "--db", str(db_path)])
    assert result.exit_code == 2, result.output
    assert f"{folder / SESSION_FILE}: session_id" in result.output


def test_a_version_7_warehouse_gains_the_ab_tables(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path / "runs").write()], db_path)
    connection = duckdb.connect(str(db_path))
    try:  # back to version 7: no A/B tables
        for table in ("ab_blocks", "ab_sessions"):
            connection.execute(f"DROP TABLE {table}")
        connection.execute("DELETE FROM schema_info WHERE version = 8")
        connection.execute("INSERT INTO schema_info VALUES (7, 'collobench 7', now())")
        connection.execute("UPDATE summaries_version SET views_sha256 = 'version 7'")
    finally:
        connection.close()
    said: list[str] = []
    load_ab_dirs([_built_session(tmp_path)], db_path, wait_s=5, notify=said.append)
    assert said == [f"{db_path}: upgraded the warehouse schema from version 7 to {CURRENT_VERSION}"]
    fresh = tmp_path / "fresh.duckdb"
    load_ab_dirs([_built_session(tmp_path / "again")], fresh, wait_s=5)
    assert table_columns(db_path) == table_columns(fresh)
    assert rows_of(db_path, COUNTS) == [{"s": 1, "b": 4}]


# --------------------------------------------------------------------------- a real session


@pytest.fixture(scope="module")
def real_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """One short real A/A session (4 blocks of 1-s segments), not loaded: its folder and its
    `--format json` answer."""
    home = tmp_path_factory.mktemp("ab-home")
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLLOBENCH_HOME": str(home)}
    environment.pop("COLLOBENCH_RESULTS_DIR", None)
    command = [sys.executable, "-m", "stages.cli", "ab", str(REPO / "specs" / "ab_demo.yaml")]
    options = ["--aa", "--set", "pipelines.0.loadgen.duration_s=1", "--looks", "4", "--seed", "3"]
    done = subprocess.run(
        [*command, *options, "--no-load", "--format", "json"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    (folder,) = [path.parent for path in (home / "ab").glob(f"*/{SESSION_FILE}")]
    assert not (home / "results.duckdb").exists()  # --no-load
    return folder, rows


@pytest.mark.spawns
def test_a_real_session_loads_as_its_files_and_answer_say(
    real_session: tuple[Path, list[dict[str, Any]]], db_path: Path
) -> None:
    folder, answer = real_session
    record = json.loads((folder / SESSION_FILE).read_text())
    segments = [json.loads(line) for line in (folder / SEGMENTS_FILE).read_text().splitlines()]
    assert "dropped_blocks" in record
    assert all(s["run_id"].startswith(record["session_id"]) for s in segments)
    load_ab_dirs([folder], db_path, wait_s=30)
    first = rows_of(db_path, COUNTS)
    assert first == [{"s": 1, "b": len(segments)}]
    loaded = {r["run_id"] for r in rows_of(db_path, "SELECT run_id FROM runs")}
    assert loaded == {s["run_id"] for s in segments}
    throughput = rows_of(db_path, "SELECT DISTINCT run_id FROM throughput")
    assert {r["run_id"] for r in throughput} == loaded  # the per-run views cover the segments
    dropped = dict((block, why) for block, why in record["dropped_blocks"])
    blocks = rows_of(db_path, "SELECT block, dropped, dropped_reason FROM ab_blocks")
    assert all(b["dropped"] == (b["block"] in dropped) for b in blocks)
    assert all(b["dropped_reason"] == dropped.get(b["block"]) for b in blocks)
    verdicts = rows_of(db_path, "SELECT * FROM ab_verdicts ORDER BY pipeline, metric")
    expected = sorted(answer, key=lambda row: (row["pipeline"], row["metric"]))
    assert len(verdicts) == len(record["verdicts"]) == len(expected) > 0
    for row, json_row in zip(verdicts, expected, strict=True):
        for key in ("session_id", "pipeline", "phase", "metric", "verdict", "blocks"):
            assert row[key] == json_row[key], key
        assert row["blocks_dropped"] == json_row["blocks_dropped"]
        assert [row["change_ci95_low"], row["change_ci95_high"]] == json_row["change_ci95"]
        for key in ("change_pct", "mde_pct", "p_value", "p_holm", "sd_log"):
            assert row[key] == pytest.approx(json_row[key]), key
    load_ab_dirs([folder], db_path, wait_s=30)
    assert rows_of(db_path, COUNTS) == first
    assert len(rows_of(db_path, "SELECT run_id FROM runs")) == len(loaded)
