"""A real (short) collocated run, loaded and reported: the file contract and the views agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.loader import load_runs
from analysis.report import report
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
