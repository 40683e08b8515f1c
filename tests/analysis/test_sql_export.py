"""`collobench sql --format table|csv|json|parquet [--out FILE]`: each format's output, and
the refusals (parquet without --out, table with --out, an unknown format)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from analysis.warehouse.loader import load_runs
from stages.cli.app import app
from tests.analysis.runs import single_pipeline_run
from tests.helpers import REPO

runner = CliRunner()

# Latency of the single-pipeline run: 1010 measured queries, 10 failed (+inf): p99 is
# sorted[999] = 10 ms, p99.9 sorted[1008] = +inf; no p99.9 interval (batches of 101 < 1000).
LATENCY = "SELECT pipeline, latency_p99_ms, latency_p999_ms, latency_p999_ci_low_ms FROM latency"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One loaded warehouse for the module (its tests only query it; `sql` opens it read-only,
    which the DROP TABLE case checks): 1-3 s each to build."""
    folder = tmp_path_factory.mktemp("sql_export")
    db_path = folder / "warehouse" / "results.duckdb"
    load_runs([single_pipeline_run(folder).write()], db_path)
    return db_path


def sql(db: Path, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["sql", *args, "--db", str(db)])
    return result.exit_code, result.stdout, result.stderr


def test_json_is_one_array_with_inf_as_a_string_and_nan_as_null(loaded: Path) -> None:
    code, stdout, _ = sql(loaded, LATENCY, "--format", "json")
    assert code == 0
    assert json.loads(stdout) == [
        {
            "pipeline": "a",
            "latency_p99_ms": 10.0,
            "latency_p999_ms": "inf",
            "latency_p999_ci_low_ms": None,
        }
    ]
    code, stdout, _ = sql(
        loaded,
        "SELECT 'nan'::DOUBLE AS x, '-inf'::DOUBLE AS y, [1, 2] AS l, {'k': 1} AS s, "
        "TIMESTAMPTZ '2026-01-01 00:00:00+00' AS t, 1.25::DECIMAL(4, 2) AS d",
        "--format",
        "json",
    )
    assert code == 0
    (value,) = json.loads(stdout)
    assert value["x"] is None and value["y"] == "-inf"
    assert value["l"] == [1, 2] and value["s"] == {"k": 1} and value["d"] == 1.25
    assert value["t"].startswith("2026-01-01")
    _, stdout, _ = sql(loaded, "SELECT * FROM runs WHERE false", "--format", "json")
    assert json.loads(stdout) == []


@pytest.mark.spawns
def test_json_on_stdout_of_the_real_command_parses(loaded: Path) -> None:
    """Nothing but the array reaches stdout (no table, no status line, no log)."""
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "stages.cli",
            "sql",
            LATENCY,
            "--db",
            str(loaded),
            "--format",
            "json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert json.loads(completed.stdout)[0]["latency_p999_ms"] == "inf"


def test_csv_to_stdout(loaded: Path) -> None:
    code, stdout, _ = sql(loaded, LATENCY, "--format", "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(stdout)))
    assert rows == [
        ["pipeline", "latency_p99_ms", "latency_p999_ms", "latency_p999_ci_low_ms"],
        ["a", "10.0", "inf", ""],
    ]


def test_parquet_needs_out_and_keeps_types(loaded: Path, tmp_path: Path) -> None:
    code, stdout, stderr = sql(loaded, LATENCY, "--format", "parquet")
    assert code == 2 and stdout == ""
    assert len(stderr.strip().splitlines()) == 1 and "--out" in stderr
    target = tmp_path / "out" / "latency.parquet"
    code, stdout, stderr = sql(loaded, LATENCY, "--format", "parquet", "--out", str(target))
    assert code == 0 and stdout == "" and str(target) in stderr
    table = pq.read_table(target)
    assert table.column_names[:2] == ["pipeline", "latency_p99_ms"]
    assert table.to_pylist()[0]["latency_p999_ms"] == float("inf")
    assert table.schema.field("latency_p99_ms").type == "double"


def test_json_and_csv_to_a_file(loaded: Path, tmp_path: Path) -> None:
    target = tmp_path / "latency.json"
    code, stdout, _ = sql(loaded, LATENCY, "--format", "json", "--out", str(target))
    assert code == 0 and stdout == ""
    assert json.loads(target.read_text())[0]["pipeline"] == "a"
    target = tmp_path / "latency.csv"
    code, stdout, _ = sql(loaded, LATENCY, "--format", "csv", "--out", str(target))
    assert code == 0 and stdout == ""
    assert target.read_text().splitlines()[1] == "a,10.0,inf,"


def test_table_is_the_default_and_refuses_out(loaded: Path, tmp_path: Path) -> None:
    code, stdout, _ = sql(loaded, LATENCY)
    assert code == 0 and "latency_p999_ms" in stdout and " inf " in stdout
    code, stdout, stderr = sql(loaded, LATENCY, "--out", str(tmp_path / "x.txt"))
    assert code == 2 and stdout == "" and len(stderr.strip().splitlines()) == 1


def test_unknown_format_and_bad_sql_are_one_line(loaded: Path) -> None:
    code, _, stderr = sql(loaded, LATENCY, "--format", "xml")
    assert code == 2 and stderr.strip() == "--format: 'xml' is not one of table, csv, json, parquet"
    code, stdout, stderr = sql(loaded, "DROP TABLE runs", "--format", "json")
    assert code == 2 and stdout == "" and "read-only" in stderr
    assert len(stderr.strip().splitlines()) == 1
