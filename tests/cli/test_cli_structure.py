"""The split CLI: the console-script entry, every command registered, tables that refuse a
missing column, the progress display's counters spelled as the runtime spells them, and
`collobench report` failing loudly when the catalogue and the views disagree."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
import typer.main
from typer.testing import CliRunner

from analysis.reports.catalogue import BY_VIEW
from analysis.warehouse.loader import load_runs
from stages.cli.app import app
from stages.cli.progress import ProgressDisplay, phase_line
from stages.cli.render import compact_table
from stages.contracts.counters import QUERY_COUNTS
from tests.analysis.runs import single_pipeline_run

runner = CliRunner()


def test_the_console_script_entry_and_every_command() -> None:
    group = typer.main.get_command(app)
    assert list(group.commands) == [  # type: ignore[attr-defined]
        "validate",
        "schema",
        "graph",
        "run",
        "capacity",
        "load",
        "report",
        "sql",
        "compare",
        "history",
        "ab",
        "bisect",
        "artifacts",
    ]


def test_a_table_refuses_a_column_its_rows_lack() -> None:
    frame = pd.DataFrame({"x": [1.5], "x_ci_low": [1.0], "x_ci_high": [2.0]})
    table = compact_table("t", frame, ["x", "x_ci_low", "x_ci_high"])
    assert [column.header for column in table.columns] == ["x"]  # the interval folds into x
    assert list(table.columns[0].cells) == ["1.5 [1, 2]"]
    with pytest.raises(LookupError, match=r"table 't': no column 'y'"):
        compact_table("t", frame, ["x", "y"])


def test_progress_shows_the_runtime_counters() -> None:
    display = ProgressDisplay()
    header = [column.header for column in display._table().columns]
    assert header[3 : 3 + len(QUERY_COUNTS)] == list(QUERY_COUNTS)
    outcome = {"pipeline": "a", "status": "ok", "ok": 5, "errors": 1, "dropped": 2, "timeouts": 3}
    assert phase_line(outcome).startswith("a: ok, 5 ok, 1 errors, 2 dropped, 3 timeouts, - q/s")


@pytest.mark.slow
def test_report_fails_loudly_on_a_column_the_view_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "results.duckdb"
    load_runs([single_pipeline_run(tmp_path).write()], db)
    shown = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "out")])
    assert shown.exit_code == 0, shown.output
    latency = BY_VIEW["latency"]
    monkeypatch.setitem(
        BY_VIEW, "latency", dataclasses.replace(latency, terminal=(*latency.terminal, "p50"))
    )
    refused = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "out")])
    assert refused.exit_code == 2
    assert "view 'latency' has no column 'p50'" in refused.output
