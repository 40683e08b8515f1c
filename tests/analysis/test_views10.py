"""Views of issue 10: goodput, tokens, energy split and interference, on synthesised run
directories whose figures are computed by hand in each test's docstring."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from analysis.loader import load_runs
from tests.analysis.conftest import collocated_run, single_pipeline_run
from tests.analysis.rundirs import one, rows_of


def set_loadgen(run_dir: Path, pipeline: str, **fields: Any) -> None:
    """Add loadgen fields (slo_ms...) to one pipeline of a written run's manifest spec."""
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    for spec in manifest["spec"]["pipelines"]:
        if spec["name"] == pipeline:
            spec["loadgen"].update(fields)
    path.write_text(json.dumps(manifest))


def wilson(good: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval, written out independently of the SQL."""
    p = good / total
    centre = p + z * z / (2 * total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return (centre - half) / (1 + z * z / total), (centre + half) / (1 + z * z / total)


def test_goodput_counts_every_measured_query(tmp_path: Path, db_path: Path) -> None:
    """single_pipeline_run: 1000 ok queries with latencies 1..10 ms (100 each) in a 10.0 s
    window, plus 5 dropped, 3 errors (1 ms, but failed) and 2 timeouts; 20 slow warm-up
    queries. With slo_ms = 5: good = the 500 ok queries of 1..5 ms (5 ms exactly counts),
    late = 500, denominator 1010 (warm-up left out, failures in), share 500 / 1010,
    goodput 500 / 10 s = 50 /s next to 100 ok queries/s."""
    run_dir = single_pipeline_run(tmp_path).write()
    set_loadgen(run_dir, "a", slo_ms=5.0)
    load_runs([run_dir], db_path)
    row = one(db_path, "SELECT * FROM goodput")
    assert row["slo_ms"] == 5.0
    assert row["queries"] == 1010 and row["ok_queries"] == 1000 and row["failed_queries"] == 10
    assert row["good_queries"] == 500 and row["late_queries"] == 500
    assert row["goodput_share"] == pytest.approx(500 / 1010)
    low, high = wilson(500, 1010)
    assert row["goodput_share_ci_low"] == pytest.approx(low)
    assert row["goodput_share_ci_high"] == pytest.approx(high)
    assert row["ci_method"] == "wilson_95"
    assert row["window_s"] == pytest.approx(10.0)
    assert row["goodput_per_s"] == pytest.approx(50.0)
    assert row["queries_per_s"] == pytest.approx(100.0)


def test_goodput_is_null_without_an_slo(tmp_path: Path, db_path: Path) -> None:
    """collocated_run sets an SLO on neither pipeline except b (25 ms latency everywhere,
    slo 30 ms: all 400 good per phase); a has none, so its goodput figures are NULL while its
    counts stay."""
    run_dir = collocated_run(tmp_path).write()
    set_loadgen(run_dir, "b", slo_ms=30.0)
    load_runs([run_dir], db_path)
    rows = rows_of(db_path, "SELECT * FROM goodput ORDER BY phase, pipeline")
    assert [(r["phase"], r["pipeline"]) for r in rows] == [
        ("collocated", "a"),
        ("collocated", "b"),
        ("solo", "a"),
        ("solo", "b"),
    ]
    for row in rows:
        if row["pipeline"] == "a":
            assert row["slo_ms"] is None and row["queries"] > 0
            assert row["good_queries"] is None and row["goodput_share"] is None
            assert row["goodput_per_s"] is None and row["ci_method"] is None
        else:
            assert row["good_queries"] == 400 and row["goodput_share"] == 1.0
            assert row["goodput_per_s"] == pytest.approx(40.0)


def test_tokens_replaces_generation_in_an_old_warehouse(tmp_path: Path, db_path: Path) -> None:
    """A warehouse written before issue 10 holds a `generation` view; loading into it again
    leaves the one definition, `tokens`, and no stale `generation`."""
    import duckdb

    run_dir = single_pipeline_run(tmp_path).write()
    load_runs([run_dir], db_path)
    connection = duckdb.connect(str(db_path))
    connection.execute("CREATE VIEW generation AS SELECT 1 AS old")
    connection.close()
    load_runs([run_dir], db_path)
    views = {row["view_name"] for row in rows_of(db_path, "SELECT view_name FROM duckdb_views()")}
    assert "tokens" in views and "generation" not in views
