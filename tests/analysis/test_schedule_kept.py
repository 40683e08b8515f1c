"""Every run says how well it kept its schedule: issue delay p50/p99 and the share of queries
issued more than 100 us late, the same figures in the `latency` view, the run summary, the
manifest's and MLflow's headline metrics and the console summary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest
from rich.console import Console

from analysis.reports.headline_figures import headline_metrics, summarize_run
from analysis.warehouse.loader import load_runs
from stages.cli.summary_table import COLUMNS, summary_table
from tests.analysis.rundirs import MS_NS, RunBuilder
from tests.analysis.runs import BASE_NS


def _run(root: Path) -> Path:
    """Pipeline `a`: 1000 measured queries issued (index % 200) us late, so each delay
    0..199 us appears five times: LoadGen's nearest rank gives p50 = sorted[500] = 100 us and
    p99 = sorted[990] = 198 us, and 99 of each 200 (101..199 us) are over 100 us: 0.495. A
    warm-up query 5 ms late and a dropped one (never issued) must not count."""
    run = RunBuilder(root, "20260104-000000-schedule", {"a": "server"})
    for index in range(-1, 1001):
        scheduled = BASE_NS + (index + 1) * 10 * MS_NS
        dropped = index == 1000
        delay_ns = 5 * MS_NS if index < 0 else (index % 200) * 1000
        run.add(
            "queries",
            0,
            "solo",
            "a",
            query_id=index + 1,
            scheduled_ns=scheduled,
            issued_ns=None if dropped else scheduled + delay_ns,
            completed_ns=None if dropped else scheduled + delay_ns + MS_NS,
            status="dropped" if dropped else "ok",
            samples=1,
            warmup=index < 0,
        )
    return run.write()


def test_the_schedule_figures_agree_from_the_view_to_the_console(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    (summary,) = summarize_run(run_dir)
    figures = (
        summary.issue_delay_p50_us,
        summary.issue_delay_p99_us,
        summary.issue_delay_over_100us_share,
    )
    assert figures == (100.0, 198.0, pytest.approx(0.495))

    metrics = headline_metrics(summary)  # what the manifest records and MLflow logs
    assert metrics["issue_delay_p50_us"] == 100.0
    assert metrics["issue_delay_p99_us"] == 198.0
    assert metrics["issue_delay_over_100us_share"] == pytest.approx(0.495)

    database = tmp_path / "warehouse.duckdb"
    load_runs([run_dir], database)
    with duckdb.connect(str(database), read_only=True) as connection:
        row = connection.execute(
            "SELECT issue_delay_p50_us, issue_delay_p99_us, issue_delay_over_100us_share "
            "FROM latency"
        ).fetchone()
    assert row is not None and row[:2] == (100.0, 198.0) and row[2] == pytest.approx(0.495)

    console = Console(width=250, record=True)
    console.print(summary_table(SimpleNamespace(run_dir=run_dir, results=[])))
    lines = [line for line in console.export_text().splitlines() if "│ a " in line]
    cells = [cell.strip() for cell in lines[0].split("│")[1:-1]]
    assert cells[COLUMNS.index("issue µs p50/p99")] == "100/198 (49.50% >100)"
