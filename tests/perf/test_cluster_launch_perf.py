"""perf/cluster_launch.py: its statistics on fixed samples, and the first measured query read
from a run directory (warm-up and never-issued rows left out, monotonic ns mapped to wall)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from perf import cluster_launch
from stages.rundir.schemas import SCHEMAS


def test_median_interval_holds_the_median_inside_the_sample_range() -> None:
    figure = cluster_launch.median_interval([5.0, 1.0, 3.0, 2.0, 4.0])
    assert figure["median"] == 3.0 and figure["n"] == 5
    low, high = figure["ci95"]
    assert 1.0 <= low <= 3.0 <= high <= 5.0 and low < high
    assert cluster_launch.median_interval([2.5] * 4)["ci95"] == [2.5, 2.5]
    assert cluster_launch.median_interval([]) == {"median": None, "ci95": None, "n": 0}


def test_difference_interval_is_the_shift_between_two_samples() -> None:
    slow, fast = [11.0, 12.0, 13.0, 14.0, 15.0], [1.0, 2.0, 3.0, 4.0, 5.0]
    figure = cluster_launch.difference_interval(slow, fast)
    assert figure["median_difference"] == 10.0
    low, high = figure["ci95"]
    assert 6.0 <= low < 10.0 < high <= 14.0
    assert cluster_launch.difference_interval(slow, fast) == figure  # seeded
    assert cluster_launch.difference_interval(fast, slow)["median_difference"] == -10.0
    assert cluster_launch.difference_interval([], fast)["ci95"] is None


def test_first_measured_query_skips_warmup_and_unissued_rows(tmp_path: Path) -> None:
    clock = {"monotonic_ns": 1_000, "wall_time_ns": 1_700_000_000_000_000_000}
    (tmp_path / "manifest.json").write_text(json.dumps({"clock": clock}))
    rows = [  # (issued_ns, status, warmup)
        (1_500, "ok", True),
        (None, "not_issued", False),
        (2_500, "ok", False),
        (2_000, "dropped", False),
    ]
    table = pa.table(
        {
            "run_id": ["r"] * 4,
            "trial": [0] * 4,
            "phase": ["solo"] * 4,
            "pipeline": ["p"] * 4,
            "query_id": [0, 1, 2, 3],
            "scheduled_ns": [1_400, 1_900, 2_400, 1_950],
            "issued_ns": [row[0] for row in rows],
            "completed_ns": [1_600, None, 2_600, None],
            "status": [row[1] for row in rows],
            "samples": [1] * 4,
            "warmup": [row[2] for row in rows],
        },
        schema=SCHEMAS["queries"],
    )
    pq.write_table(table, tmp_path / "queries.parquet")
    assert cluster_launch.first_query_wall_ns(tmp_path) == clock["wall_time_ns"] + 1_000
