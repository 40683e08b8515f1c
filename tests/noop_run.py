"""The smallest real collocated run (`collobench run specs/noop_collocated.yaml`, two noop
pipelines, 1 s each), done once per session by the `noop_collocated_run` fixture in
tests/conftest.py: the launch, CLI, report-file and end-to-end tests only read its output, run
directory and warehouse, so one launch serves all of them. It is recorded in MLflow too (the
sqlite store in its own COLLOBENCH_HOME), as `collobench run` does by default."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.paths import REPO


@dataclass(frozen=True)
class NoopCollocatedRun:
    """What the run left: its directory, the warehouse it loaded into, and its output."""

    run_dir: Path
    db: Path
    completed: subprocess.CompletedProcess[str]


def run_noop_collocated(base: Path) -> NoopCollocatedRun:
    """Run the spec under `base` (runs/, results.duckdb and a COLLOBENCH_HOME of its own, with
    its MLflow store, set for the subprocess only, so nothing leaks into the tests'
    environment)."""
    db = base / "results.duckdb"
    command = [
        sys.executable, "-m", "stages.cli", "run", "specs/noop_collocated.yaml",
        "--out", str(base / "runs"),
        "--db", str(db),
        "--set", "pipelines.front.loadgen.duration_s=1",
        "--set", "pipelines.back.loadgen.duration_s=1",
    ]  # fmt: skip
    environment = {
        **{key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"},
        "COLUMNS": "200",
        "COLLOBENCH_HOME": str(base / "home"),
        "COLLOBENCH_MLFLOW": "1",
    }
    completed = subprocess.run(
        command,
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    (run_dir,) = (base / "runs").iterdir()
    return NoopCollocatedRun(run_dir, db, completed)
