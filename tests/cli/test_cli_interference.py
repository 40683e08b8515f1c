"""The CLI's interference and energy-split tables, and one real run with subset phases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.warehouse.loader import load_runs
from stages.cli.app import app
from tests.analysis.rundirs import rows_of
from tests.analysis.runs import single_pipeline_run, split_run, three_pipeline_run
from tests.helpers import REPO

runner = CliRunner()


def report_output(db: Path, out: Path) -> str:
    result = runner.invoke(
        app, ["report", "--db", str(db), "--out", str(out)], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def table_rows(output: str, title: str) -> list[list[str]]:
    """The cells of each row of the table titled `title` (a line of its own), stripped."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    rows = []
    for line in lines[start + 4 :]:  # title, top rule, header, header rule
        if not line.startswith("│"):
            break
        rows.append([cell.strip() for cell in line.strip("│").split("│")])
    return rows


def titles(output: str) -> set[str]:
    return {line.strip() for line in output.splitlines()}


@pytest.mark.slow
def test_report_prints_the_energy_split_when_the_run_has_energy(tmp_path: Path) -> None:
    """split_run: collocated host 41.25 J split 0.6 / 0.2 / 0.2 -> 24.75 / 8.25 / 8.25 J."""
    db = tmp_path / "results.duckdb"
    load_runs([split_run(tmp_path)], db)
    output = report_output(db, tmp_path / "report")
    rows = table_rows(output, "energy_split")
    # trial, phase, window_pipeline, device, consumer, pipeline, method, share, energy_j,
    # total_energy_j, energy_source
    collocated_a = ["0", "collocated", "-", "host", "pipeline", "a", "cpu_util_share"]
    assert [*collocated_a, "0.6", "24.75", "41.25", "rapl"] in rows
    solo_b = ["0", "solo", "b", "host", "pipeline", "b", "cpu_util_share"]
    assert [*solo_b, "-", "-", "33.75", "rapl"] in rows
    assert len(rows) == 8
    assert "interference" not in titles(output)  # no subset phases: contention says it all


@pytest.mark.slow
def test_no_energy_split_table_without_energy(tmp_path: Path) -> None:
    db = tmp_path / "results.duckdb"
    load_runs([single_pipeline_run(tmp_path).write()], db)
    assert "energy_split" not in titles(report_output(db, tmp_path / "report"))


@pytest.mark.slow
def test_report_prints_the_interference_matrix_for_subset_phases(tmp_path: Path) -> None:
    db = tmp_path / "results.duckdb"
    load_runs([three_pipeline_run(tmp_path)], db)
    output = report_output(db, tmp_path / "report")
    # trial, pipeline, co_runner_set, throughput_ratio [interval], verdict, ...
    # Per pipeline: the smaller co-runner sets first, the full set last.
    rows = table_rows(output, "interference")
    assert [row[1:4] for row in rows] == [
        ["a", "b", "0.8 [0.8, 0.8]"],
        ["a", "c", "0.5 [0.5, 0.5]"],
        ["a", "b+c", "0.4 [0.4, 0.4]"],
        ["b", "a", "1 [1, 1]"],
        ["b", "c", "0.8 [0.8, 0.8]"],
        ["b", "a+c", "0.5 [0.5, 0.5]"],
        ["c", "a", "1 [1, 1]"],
        ["c", "b", "0.5 [0.5, 0.5]"],
        ["c", "a+b", "0.4 [0.4, 0.4]"],
    ]
    # The contention table stays one row per pipeline (the full collocated phase).
    assert [row[1:3] for row in table_rows(output, "contention")] == [
        ["a", "0.4 [0.4, 0.4]"],
        ["b", "0.5 [0.5, 0.5]"],
        ["c", "0.4 [0.4, 0.4]"],
    ]


@pytest.mark.spawns
@pytest.mark.slow
def test_a_real_run_with_pairs_records_and_reports_every_pair(tmp_path: Path) -> None:
    db = tmp_path / "results.duckdb"
    overrides = []
    for pipeline in ("busy", "sleepy", "tiny"):
        overrides += ["--set", f"pipelines.{pipeline}.loadgen.duration_s=0.5"]
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "stages.cli",
            "run",
            "specs/interference3.yaml",
            "--no-mlflow",
            "--out",
            str(tmp_path / "runs"),
            "--db",
            str(db),
            *overrides,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert completed.returncode == 0, completed.stderr
    pairs = ["collocated:busy+sleepy", "collocated:busy+tiny", "collocated:sleepy+tiny"]
    for phase in pairs:
        assert f"trial 0 · {phase}" in completed.stdout
    assert "interference per trial" in completed.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [step[1] for step in manifest["phase_order"]] == ["solo"] * 3 + ["collocated", *pairs]
    outcomes = {(r["phase"], r["pipeline"]): r["status"] for r in manifest["results"]}
    assert outcomes[("collocated:busy+tiny", "tiny")] == "ok"
    assert len(outcomes) == 3 + 3 + 2 * 3
    matrix = rows_of(
        db, "SELECT pipeline, co_runner_set, phase FROM interference ORDER BY pipeline, phase"
    )
    assert [(r["pipeline"], r["co_runner_set"]) for r in matrix] == [
        ("busy", "sleepy+tiny"),
        ("busy", "sleepy"),
        ("busy", "tiny"),
        ("sleepy", "busy+tiny"),
        ("sleepy", "busy"),
        ("sleepy", "tiny"),
        ("tiny", "busy+sleepy"),
        ("tiny", "busy"),
        ("tiny", "sleepy"),
    ]
    windows = rows_of(db, "SELECT DISTINCT phase FROM load_windows ORDER BY phase")
    assert [w["phase"] for w in windows] == ["collocated", *pairs, "solo"]
