"""A/A through Dagster (`make soak`, about 12 min on 2 cores): the demo spec materialised ten
times in a row on one instance, nothing changed between runs. At most one run may be flagged by
the `regression` or `reproducibility` check (their false-alarm rate is at most 1 in 10 a run),
and the history the checks judged is the one `collobench history` shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.verdicts import dagster_aa, measured_spreads

RUNS = 10


@pytest.mark.soak
@pytest.mark.spawns
@pytest.mark.timeout(1800)
def test_ten_unchanged_demo_runs_through_dagster_flag_at_most_one(tmp_path: Path) -> None:
    aa = dagster_aa(RUNS, "demo", tmp_path / "home")
    assert aa["flagged_runs"] <= 1, aa["flagged"]
    spreads, family = measured_spreads(tmp_path / "home" / "results.duckdb")
    assert family == 12  # 4 (phase, pipeline) x throughput, p50, p99
    assert spreads["latency_p50_ms"]["raw"] is not None
