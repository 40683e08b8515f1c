"""`report()` returns each view for one run (the latest by default), with the views' intervals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.reports.report import VIEWS, report
from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import SECOND_NS, RunBuilder
from tests.analysis.runs import collocated_run, single_pipeline_run


@pytest.mark.slow
def test_report_defaults_to_the_latest_run(tmp_path: Path, db_path: Path) -> None:
    single = single_pipeline_run(tmp_path)
    colloc = collocated_run(tmp_path)
    colloc.started_at = "2026-01-02T00:00:00+00:00"
    load_runs([colloc.write(), single.write()], db_path)  # loaded last, started first
    frames = report(db_path)
    assert set(frames) == set(VIEWS)
    assert set(frames["throughput"]["run_id"]) == {colloc.run_id}
    assert list(frames["contention"]["pipeline"]) == ["a", "b"]
    assert frames["contention"]["throughput_ratio"].tolist() == pytest.approx([0.5, 1.0])
    named = report(db_path, single.run_id)
    assert named["throughput"]["queries_per_s"].tolist() == pytest.approx([100.0])
    assert named["contention"].empty


@pytest.mark.slow
def test_report_of_unknown_run_or_empty_warehouse(tmp_path: Path, db_path: Path) -> None:
    load_runs([], db_path)
    with pytest.raises(LookupError, match="no runs"):
        report(db_path)
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    with pytest.raises(LookupError, match="nope"):
        report(db_path, "nope")


@pytest.mark.slow
def test_latency_by_run_carries_t_intervals(tmp_path: Path, db_path: Path) -> None:
    """Intervals come from the view (Student-t over trials), not from Python."""
    run = RunBuilder(tmp_path, "20260107-000000-ci", {"a": "server"})
    for trial, count in enumerate((100, 200, 400, 500)):
        run.uniform_queries(trial, "solo", "a", count, SECOND_NS, start_ns=trial * 10 * SECOND_NS)
    load_runs([run.write()], db_path)
    row = report(db_path)["latency_by_run"].iloc[0]
    per_trial = np.array([10.0, 5.0, 2.5, 2.0])
    half = 3.1824 * per_trial.std(ddof=1) / 2  # t(0.975, 3) s / sqrt(4)
    assert row["latency_p50_ci_low_ms"] == pytest.approx(per_trial.mean() - half)
    assert row["latency_p50_ci_high_ms"] == pytest.approx(per_trial.mean() + half)
    assert row["ci_method"] == "t_over_trials"


def test_no_interval_over_trials_from_a_single_trial(tmp_path: Path, db_path: Path) -> None:
    load_runs([single_pipeline_run(tmp_path).write()], db_path)
    row = report(db_path)["latency_by_run"].iloc[0]
    assert np.isnan(row["latency_p99_ci_low_ms"])
    assert row["latency_p50_ms"] == pytest.approx(6.0)
