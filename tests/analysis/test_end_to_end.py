"""A real (short) collocated run, loaded and reported: the file contract and the views agree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.loader import load_runs
from analysis.report import report
from tests.paths import REPO


@pytest.mark.slow
def test_noop_collocated_run_loads_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    command = [
        sys.executable, "-m", "stages.cli", "run", "specs/noop_collocated.yaml", "--no-mlflow",
        "--out", str(out),
        "--set", "pipelines.front.loadgen.duration_s=1",
        "--set", "pipelines.back.loadgen.duration_s=1",
    ]  # fmt: skip
    environment = {**os.environ, "COLLOBENCH_HOME": str(tmp_path / "home")}
    completed = subprocess.run(
        command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    [run_dir] = [path.parent for path in out.glob("*/manifest.json")]
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
