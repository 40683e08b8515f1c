"""Under `COLLOBENCH_PROGRESS=jsonl` (what the Dagster Pipes children set), `collobench run`
writes progress records alone on stdout, and its errors stay one line each on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stages.contracts.progress import JSONL, PROGRESS_ENV, ProgressRecord
from tests.helpers import REPO, spec_doc

pytestmark = pytest.mark.spawns  # every test starts a process


def _run(spec: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "stages.cli", "run", str(spec), "--out", str(out)),
            *("--no-mlflow", "--no-load", "--run-id", "r"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, PROGRESS_ENV: JSONL, "COLLOBENCH_MLFLOW": "0"},
    )


def test_a_run_writes_progress_records_alone_on_stdout(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_doc({"type": "noop"}, duration_s=0.5)))
    completed = _run(spec, tmp_path / "runs")
    assert completed.returncode == 0, completed.stderr
    records = [ProgressRecord.from_line(line) for line in completed.stdout.splitlines()]
    assert records and all(record is not None for record in records), completed.stdout
    events = [record.event for record in records if record is not None]
    assert events[0] == "phase_start" and "pipeline_end" in events and events[-1] == "run_end"
    last = records[-1]
    assert last is not None and last.data["run_dir"] == str(tmp_path / "runs" / "r")


def test_an_invalid_spec_is_one_line_on_stderr_and_nothing_on_stdout(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: [")
    completed = _run(spec, tmp_path / "runs")
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.startswith(f"{spec}: ") and "Traceback" not in completed.stderr
