"""The goodput, tokens, energy-split and interference views, on synthesised run
directories whose figures are computed by hand in each test's docstring."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from analysis.warehouse.loader import load_runs
from tests.analysis.rundirs import one, rows_of
from tests.analysis.runs import collocated_run, single_pipeline_run, split_run


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


@pytest.mark.slow
def test_tokens_replaces_generation_in_an_old_warehouse(tmp_path: Path, db_path: Path) -> None:
    """A warehouse written before issue 10 holds a `generation` view; loading into it again
    leaves the one definition, `tokens`, and no stale `generation`."""
    import duckdb

    run_dir = single_pipeline_run(tmp_path).write()
    load_runs([run_dir], db_path)
    connection = duckdb.connect(str(db_path))
    connection.execute("CREATE VIEW generation AS SELECT 1 AS old")
    # What that collobench's SQL left: another hash, so the next load recreates the views.
    connection.execute("UPDATE summaries_version SET views_sha256 = 'before issue 10'")
    connection.close()
    load_runs([run_dir], db_path)
    views = {row["view_name"] for row in rows_of(db_path, "SELECT view_name FROM duckdb_views()")}
    assert "tokens" in views and "generation" not in views


def test_energy_split_adds_up_to_the_total(tmp_path: Path, db_path: Path) -> None:
    load_runs([split_run(tmp_path)], db_path)
    rows = rows_of(
        db_path,
        "SELECT * FROM energy_split ORDER BY phase, device, pipeline NULLS LAST, window_start_ns",
    )
    got = {
        (r["phase"], r["device"], r["pipeline"], r["consumer"], r["method"]): (
            r["share"],
            r["energy_j"],
            r["total_energy_j"],
        )
        for r in rows
    }
    approx = pytest.approx
    assert got == {
        ("collocated", "gpu:0", "a", "pipeline", "gpu_sm_util_share"): approx((0.6, 120.0, 200.0)),
        ("collocated", "gpu:0", "b", "pipeline", "gpu_sm_util_share"): approx((0.2, 40.0, 200.0)),
        ("collocated", "gpu:0", None, "other", "gpu_sm_util_share"): approx((0.2, 40.0, 200.0)),
        ("collocated", "host", "a", "pipeline", "cpu_util_share"): approx((0.6, 24.75, 41.25)),
        ("collocated", "host", "b", "pipeline", "cpu_util_share"): approx((0.2, 8.25, 41.25)),
        ("collocated", "host", None, "other", "cpu_util_share"): approx((0.2, 8.25, 41.25)),
        ("solo", "host", "a", "pipeline", "cpu_util_share"): approx((1.0, 24.25, 24.25)),
        ("solo", "host", "b", "pipeline", "cpu_util_share"): (None, None, approx(33.75)),
    }
    # The split adds up to the attribution-free total of every window it could split.
    sums = rows_of(
        db_path,
        "SELECT phase, device, window_start_ns, sum(energy_j) AS split_j, "
        "any_value(total_energy_j) AS total_j, sum(share) AS shares FROM energy_split "
        "WHERE share IS NOT NULL GROUP BY ALL",
    )
    assert len(sums) == 3
    for window in sums:
        assert window["split_j"] == pytest.approx(window["total_j"])
        assert window["shares"] == pytest.approx(1.0)


def test_interference_names_each_pipelines_co_runners(tmp_path: Path, db_path: Path) -> None:
    """Three pipelines, uniform queries (every latency = window / count, every batch alike, so
    each interval has zero width): a solo 2000 / 10 s (5 ms), collocated 1000 / 10 s (10 ms):
    throughput ratio 0.5 and p50/p99 slowdown 2.0, 'slower'; b and c 1000 / 10 s in both
    phases: ratio 1, 'no measurable effect'. Each row names the other two as co-runners."""
    from tests.analysis.rundirs import RunBuilder

    second = 1_000_000_000
    base = 1_000 * second
    run = RunBuilder(tmp_path, "20260110-000000-three", dict.fromkeys("abc", "server"))
    for index, (pipeline, solo_count) in enumerate((("a", 2000), ("b", 1000), ("c", 1000))):
        run.uniform_queries(
            0, "solo", pipeline, solo_count, 10 * second, base + index * 20 * second
        )
        run.uniform_queries(0, "collocated", pipeline, 1000, 10 * second, base + 60 * second)
    load_runs([run.write()], db_path)
    rows = rows_of(db_path, "SELECT * FROM interference ORDER BY pipeline")
    assert [(r["pipeline"], r["co_runners"], r["co_runner_set"]) for r in rows] == [
        ("a", ["b", "c"], "b+c"),
        ("b", ["a", "c"], "a+c"),
        ("c", ["a", "b"], "a+b"),
    ]
    a, b, c = rows
    assert a["pipelines_in_phase"] == 3 and a["phase"] == "collocated"
    assert a["throughput_ratio"] == pytest.approx(0.5)
    assert a["throughput_ratio_ci_low"] == pytest.approx(0.5)
    assert a["throughput_ratio_ci_high"] == pytest.approx(0.5)
    assert a["throughput_verdict"] == "slower"
    assert a["p99_slowdown"] == pytest.approx(2.0) and a["p99_verdict"] == "slower"
    assert a["p99_slowdown_ci_low"] == pytest.approx(2.0)
    assert a["ci_method"] == "batch_means_delta"
    for other in (b, c):
        assert other["throughput_ratio"] == pytest.approx(1.0)
        assert other["p99_slowdown"] == pytest.approx(1.0)
        assert other["throughput_verdict"] == "no measurable effect"
        assert other["p99_verdict"] == "no measurable effect"
