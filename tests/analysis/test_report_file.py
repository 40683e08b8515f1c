"""report.md and its PNG plots: the data behind each plot (report SQL files) has the
hand-computed values, the files land in the run directory (or --out), the CLI prints where, and
`collobench run` leaves the report and trace behind."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from analysis.reports import plots
from analysis.reports.report_file import markdown_table, write_report
from analysis.reports.trace import write_trace
from analysis.warehouse.loader import load_runs
from analysis.warehouse.reader import connect_read_only
from stages.cli.app import app
from tests.analysis.rundirs import SECOND_NS, RunBuilder
from tests.analysis.runs import BASE_NS, collocated_run, single_pipeline_run
from tests.noop_run import NoopCollocatedRun

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _connection(db_path: Path) -> duckdb.DuckDBPyConnection:
    return connect_read_only(db_path)


def test_latency_cdf_counts_every_measured_query(tmp_path: Path, db_path: Path) -> None:
    """single_pipeline_run: 1010 measured queries (warm-up excluded), 1000 ok with latencies
    1..10 ms (100 each), 10 failed: the curve ends at 1000 / 1010, never at 1."""
    run = single_pipeline_run(tmp_path)
    load_runs([run.write()], db_path)
    connection = _connection(db_path)
    try:
        frame = plots._frame(connection, "latency_cdf", run_id=run.run_id, points=2000)
    finally:
        connection.close()
    assert set(frame["queries"]) == {1010}
    assert len(frame) == 1000  # 1010 // 2000 = 0 -> every finite rank is a point
    assert frame["fraction"].iloc[-1] == pytest.approx(1000 / 1010)
    assert frame["latency_ms"].iloc[0] == pytest.approx(1.0)
    # LoadGen's p50 is sorted[floor(1010 * 0.5)] = sorted[505] (0-based): 6 ms; the first point
    # above 0.5 on the curve is that query.
    above = frame[frame["fraction"] > 0.5].iloc[0]
    assert above["latency_ms"] == pytest.approx(6.0)


def test_timeline_data_throughput_power_and_windows(tmp_path: Path, db_path: Path) -> None:
    """collocated_run: the run starts at the solo-a sampler (BASE - 1 s). Host power is the
    slope of the cumulative energy (4 s apart): 5/4, 7/4, 18/4 W for solo a; GPU power 100 W."""
    run = collocated_run(tmp_path)
    load_runs([run.write()], db_path)
    connection = _connection(db_path)
    try:
        base = plots.timebase(connection, run.run_id)
        params = {"run_id": run.run_id, "origin_ns": base.origin_ns}
        throughput = plots._frame(connection, "throughput_timeline", bin_s=1.0, **params)
        power = plots._frame(connection, "power_timeline", **params)
        windows = plots._frame(connection, "windows", **params)
    finally:
        connection.close()
    assert base.origin_ns == BASE_NS - SECOND_NS
    assert base.span_s == pytest.approx(52.0)  # last collocated host sample at BASE + 51 s
    solo_a = throughput[(throughput["pipeline"] == "a") & (throughput["phase"] == "solo")]
    assert (solo_a["queries_per_s"] * 1.0).sum() == 1000  # every ok completion, once
    assert solo_a["queries_per_s"].max() == pytest.approx(100.0)
    host = power[(power["device"] == "host") & (power["phase"] == "solo")]
    assert host["power_w"].tolist()[:3] == pytest.approx([5 / 4, 7 / 4, 18 / 4])
    assert set(host["energy_source"]) == {"rapl"}
    gpu = power[power["device"] == "gpu:0"]
    assert gpu["power_w"].tolist() == [100.0] * 3
    assert windows[["phase", "start_s", "end_s"]].values.tolist() == [
        ["solo", 1.0, 11.0],
        ["solo", 21.0, 31.0],
        ["collocated", 41.0, 51.0],
    ]


def test_gapped_breaks_lines_between_samplers() -> None:
    times, values = plots.gapped(pd.Series([0.0, 1.0, 2.0, 10.0, 11.0]), pd.Series([1.0] * 5))
    assert np.isnan(times[3]) and len(times) == 6
    assert times[4] == 10.0 and np.isnan(values[3]) and np.nansum(values) == 5.0


@pytest.mark.slow
def test_report_written_into_the_run_directory(tmp_path: Path, db_path: Path) -> None:
    run = collocated_run(tmp_path)
    load_runs([run.write()], db_path)
    files = write_report(db_path)
    assert files.report_md == run.run_dir / "report.md"
    assert set(files.plots) == {"latency_cdf", "timeline", "stage_breakdown", "contention"} - {
        "stage_breakdown"  # collocated_run has no stage events
    }
    for path in files.plots.values():
        assert path.parent == run.run_dir
        assert path.read_bytes()[:8] == PNG_MAGIC
    text = files.report_md.read_text(encoding="utf-8")
    for path in files.plots.values():
        assert f"]({path.name})" in text
    # Headline figures with their verdicts: a's throughput halved, b unaffected.
    (row_a,) = [line for line in text.splitlines() if line.startswith("| 0 | collocated | a | 0.5")]
    assert "slower" in row_a
    assert "batch_means_delta" in text


@pytest.mark.slow
def test_single_pipeline_run_has_no_contention_plot(tmp_path: Path, db_path: Path) -> None:
    run = single_pipeline_run(tmp_path)
    load_runs([run.write()], db_path)
    files = write_report(db_path, out_dir=tmp_path / "elsewhere")
    assert files.report_md == tmp_path / "elsewhere" / "report.md"
    assert set(files.plots) == {"latency_cdf", "timeline", "stage_breakdown"}
    assert not (run.run_dir / "report.md").exists()


@pytest.mark.slow
def test_a_run_that_recorded_nothing_still_gets_a_report(tmp_path: Path, db_path: Path) -> None:
    run = RunBuilder(tmp_path, "20260301-000000-empty", {"a": "server"}, status="failed")
    load_runs([run.write()], db_path)
    files = write_report(db_path)
    assert files.plots == {}
    assert "status: failed" in files.report_md.read_text(encoding="utf-8")
    assert write_trace(db_path).slices == 0


def test_markdown_table_shows_intervals_and_missing_values() -> None:
    frame = pd.DataFrame(
        {"x": [1.5, math.inf], "lo": [1.0, math.nan], "hi": [2.0, math.nan], "v": ["a", None]}
    )
    table = markdown_table(frame, [("x", "x|lo|hi"), ("verdict", "v")])
    assert table.splitlines()[2:] == ["| 1.5 [1, 2] | a |", "| inf | - |"]


@pytest.mark.slow
def test_cli_report_out_and_bad_run(tmp_path: Path, db_path: Path) -> None:
    runner = CliRunner()
    run = collocated_run(tmp_path)
    load_runs([run.write()], db_path)
    out = tmp_path / "out"
    shown = runner.invoke(app, ["report", "--db", str(db_path), "--out", str(out)])
    assert shown.exit_code == 0, shown.output
    assert f"report: {out / 'report.md'}" in shown.output
    assert f"trace: {out / 'trace.json'}" in shown.output
    assert (out / "timeline.png").is_file() and (out / "trace.json").is_file()
    unknown = runner.invoke(app, ["report", "nope", "--db", str(db_path), "--out", str(out)])
    assert unknown.exit_code == 2
    assert unknown.output.strip().splitlines() == [f"{db_path}: no run 'nope' loaded"]


@pytest.mark.spawns
@pytest.mark.slow
def test_run_leaves_report_and_trace_in_the_run_directory(
    noop_collocated_run: NoopCollocatedRun,
) -> None:
    """What `make demo` relies on, on the smallest real run (two noop pipelines, 1 s each: the
    session's shared run)."""
    completed = noop_collocated_run.completed
    assert completed.returncode == 0, completed.stderr
    run_dir = noop_collocated_run.run_dir
    for name in ("report.md", "latency_cdf.png", "timeline.png", "trace.json"):
        assert (run_dir / name).is_file(), name
    assert f"report: {run_dir / 'report.md'}" in completed.stdout
    assert f"trace: {run_dir / 'trace.json'}" in completed.stdout
    assert "could not write the report" not in completed.stderr
