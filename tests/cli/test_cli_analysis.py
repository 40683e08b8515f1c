"""`collobench run` loads its run into DuckDB; `load`, `report` and `sql` work on it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stages.cli.app import app
from tests.noop_run import NoopCollocatedRun

runner = CliRunner()


@pytest.mark.spawns
@pytest.mark.slow
def test_run_loads_into_duckdb_and_the_commands_read_it(
    noop_collocated_run: NoopCollocatedRun,
) -> None:
    db = noop_collocated_run.db
    completed = noop_collocated_run.completed
    assert completed.returncode == 0, completed.stderr
    assert "contention per trial" in completed.stdout
    # The summary shows q/s with its batch-means interval, and the verdict percentile.
    assert "failures count as inf" in completed.stdout
    assert re.search(r"\d+\.\d \[\d+\.\d, \d+\.\d\]", completed.stdout), completed.stdout
    assert f"loaded into {db}" in completed.stdout
    run_dir = noop_collocated_run.run_dir

    counted = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM runs", "--db", str(db)])
    assert counted.exit_code == 0 and " 1 " in counted.output

    reloaded = runner.invoke(app, ["load", str(run_dir), "--db", str(db)])
    assert reloaded.exit_code == 0, reloaded.output
    assert f"replaced {run_dir.name}" in reloaded.output
    counted = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM runs", "--db", str(db)])
    assert " 1 " in counted.output  # loading again replaces, never duplicates

    shown = runner.invoke(app, ["report", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    for title in ("throughput", "latency", "stage_breakdown", "contention"):
        assert title in shown.output

    verdicts = runner.invoke(
        app, ["sql", "SELECT DISTINCT ci_method FROM contention", "--db", str(db)]
    )
    assert verdicts.exit_code == 0 and "batch_means_delta" in verdicts.output

    refused = runner.invoke(app, ["sql", "DROP TABLE runs", "--db", str(db)])
    assert refused.exit_code == 2 and "read-only" in refused.output
    unknown = runner.invoke(app, ["report", "no-such-run", "--db", str(db)])
    assert unknown.exit_code == 2 and "no run 'no-such-run'" in unknown.output


def test_load_refuses_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["load", str(tmp_path), "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert str(tmp_path) in result.output
