"""A real (short) collocated run, loaded and reported: the file contract and the views agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.reports.report import report
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from stages.rundir.manifest import read_manifest
from tests.noop_run import NoopCollocatedRun

pytestmark = pytest.mark.spawns  # every test here starts a process


@pytest.mark.slow
def test_noop_collocated_run_loads_and_reports(
    noop_collocated_run: NoopCollocatedRun, tmp_path: Path
) -> None:
    run_dir = noop_collocated_run.run_dir
    db_path = tmp_path / "results.duckdb"
    [result] = load_runs([run_dir], db_path)
    assert result.rows["queries"] > 0 and result.rows["stage_events"] > 0
    frames = report(db_path)
    contention = frames["contention"]
    assert sorted(contention["pipeline"]) == ["back", "front"]
    assert contention["throughput_ratio"].notna().all()
    assert (contention["throughput_ratio"] > 0).all()
    throughput = frames["throughput"]
    assert set(zip(throughput["phase"], throughput["pipeline"], strict=True)) == {
        ("solo", "front"),
        ("solo", "back"),
        ("collocated", "front"),
        ("collocated", "back"),
    }
    stages = set(frames["stage_breakdown"]["stage"])
    assert stages == {"parse", "answer", "work"}
    # Energy has a figure exactly when it names its source (NULL without RAPL: never a guess).
    energy = frames["energy"]
    assert not energy.empty
    assert (energy["energy_j"].isna() == energy["energy_source"].isna()).all()


def test_every_phase_is_calibrated_before_and_after_outside_its_load_windows(
    noop_collocated_run: NoopCollocatedRun,
) -> None:
    """The machine's speed on each pipeline's cores before and after every phase, in the
    warehouse the run loaded into (`calibration`), never inside a load window."""
    manifest = read_manifest(noop_collocated_run.run_dir)
    connection = connect_read_only(noop_collocated_run.db)
    try:
        rows = connection.execute(
            "SELECT phase, pipeline, position, workload, score, unit, start_ns, end_ns "
            "FROM calibration WHERE run_id = ?",
            [manifest.run_id],
        ).fetchall()
        windows = connection.execute(
            "SELECT window_start_ns, window_end_ns FROM load_windows WHERE run_id = ?",
            [manifest.run_id],
        ).fetchall()
    finally:
        connection.close()
    assert sorted((phase, pipeline, position) for phase, pipeline, position, *_ in rows) == [
        (phase, pipeline, position)
        for phase in ("collocated", "solo")
        for pipeline in ("back", "front")
        for position in ("after", "before")
    ]
    assert {(workload, unit) for _, _, _, workload, _, unit, _, _ in rows} == {
        ("cpu_loop", "kloops_per_s")
    }
    assert all(score > 0 for *_, score, _, _, _ in rows)
    spans = [(e.start_ns, e.end_ns) for e in manifest.timeline if e.what == "calibration"]
    assert len(spans) == 6 and len(windows) == 3  # solo front, solo back, collocated
    for start_ns, end_ns in spans + [(start, end) for *_, start, end in rows]:
        assert end_ns is not None
        assert all(end_ns <= begin or start_ns >= finish for begin, finish in windows)
