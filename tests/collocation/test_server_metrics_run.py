"""Server metrics in real runs: an `external` service with `metrics` (the stand-in of
tests/services/metrics_server.py, a real prometheus_client exposition with vLLM's names) is
scraped at the asked period through every phase, its rows line up with the manifest's phase
windows, `server_metrics` maps them to the common figures beside the client's latency, and an
endpoint that dies mid-run leaves the run ok with the gap recorded."""

from __future__ import annotations

import itertools
import json
import statistics
import threading
from pathlib import Path
from typing import Any

import pytest

from analysis.warehouse.loader import load_runs
from stages.collocation.launcher import ProgressEvent
from stages.rundir.tables import read_table
from tests.analysis.rundirs import rows_of
from tests.helpers import run
from tests.services.metrics_server import HITS_PER_SCRAPE, QUERIES_PER_SCRAPE, MetricsServer

pytestmark = pytest.mark.spawns  # the runs spawn workers and samplers

PERIOD_MS = 100


def spec(url: str, duration_s: float) -> dict[str, Any]:
    pipelines = [
        {
            "name": name,
            "loadgen": {"type": "server", "rate": 40, "duration_s": duration_s},
            "stages": [{"id": "s", "type": "noop"}],
        }
        for name in ("a", "b")
    ]
    return {
        "name": "scraped",
        "telemetry": {"host": {"period_ms": 200}},
        "pipelines": pipelines,
        "services": [
            {
                "name": "llm",
                "type": "external",
                "url": f"{url}/v1",  # scraped at the origin: {url}/metrics
                "metrics": {"period_ms": PERIOD_MS, "timeout_ms": 300},
            }
        ],
    }


def phase_windows(run_dir: Path) -> list[dict[str, Any]]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return [entry for entry in manifest["timeline"] if entry["what"] == "phase"]


def test_metrics_land_at_the_period_in_every_phase(tmp_path: Path) -> None:
    server = MetricsServer()
    try:
        result = run(spec(server.url, duration_s=1.5), tmp_path / "runs")
    finally:
        server.stop()
    assert result.status == "ok", result.warnings
    rows = read_table(result.run_dir, "server_samples").to_pylist()
    windows = phase_windows(result.run_dir)
    assert [w["phase"] for w in windows] == ["solo", "solo", "collocated"]
    for window in windows:
        ups = sorted(
            row["ts_ns"]
            for row in rows
            if row["metric"] == "up"
            and row["phase"] == window["phase"]
            and window["start_ns"] - 10**9 <= row["ts_ns"] <= window["end_ns"] + 10**9
        )
        inside = [ts for ts in ups if window["start_ns"] <= ts <= window["end_ns"]]
        window_s = (window["end_ns"] - window["start_ns"]) / 1e9
        # Scraping began before the window opened (the start barrier) and ran through it.
        assert ups[0] <= window["start_ns"] and ups[-1] >= window["end_ns"] - PERIOD_MS * 1e6
        assert len(inside) == pytest.approx(window_s * 1000 / PERIOD_MS, rel=0.25)
        step_ms = statistics.median((b - a) / 1e6 for a, b in itertools.pairwise(ups))
        assert step_ms == pytest.approx(PERIOD_MS, abs=15)
    assert {row["service"] for row in rows} == {"llm"}
    assert all(row["value"] == 1 for row in rows if row["metric"] == "up")

    db = tmp_path / "warehouse.duckdb"
    load_runs([result.run_dir], db)
    scrapes = rows_of(
        db,
        "SELECT * FROM server_metrics WHERE phase = 'collocated' AND up ORDER BY ts_ns",
    )
    assert len(scrapes) == sum(
        1 for row in rows if row["metric"] == "up" and row["phase"] == "collocated"
    )
    assert {s["server"] for s in scrapes} == {"vllm"}
    running = [s["requests_running"] for s in scrapes]
    assert set(running) <= {0, 1, 2, 3, 4} and len(set(running)) > 1
    assert all(0 <= s["kv_cache_usage"] <= 0.9 for s in scrapes)
    rates = [s["prefix_cache_hit_rate"] for s in scrapes[1:]]
    assert rates == pytest.approx([HITS_PER_SCRAPE / QUERIES_PER_SCRAPE] * len(rates))
    in_window = [s for s in scrapes if s["in_window"]]
    # 2 x 40 q/s: about 8 completions per 100 ms scrape inside the window, timed as a user sees
    assert sum(s["client_completed"] for s in in_window) >= 0.8 * 80 * 1.5
    assert all(s["client_latency_p50_ms"] < 1000 for s in in_window if s["client_completed"])


def test_an_endpoint_dying_mid_run_leaves_the_run_ok_and_the_gap_recorded(
    tmp_path: Path,
) -> None:
    """The endpoint dies 0.5 s into the second phase (solo b) and never comes back."""
    server = MetricsServer()
    killer = threading.Timer(0.5, server.stop)
    starts: list[str] = []

    def on_progress(event: ProgressEvent) -> None:
        if event.kind == "phase_start":
            starts.append(event.phase)
            if len(starts) == 2:
                killer.start()

    try:
        result = run(spec(server.url, duration_s=1.0), tmp_path / "runs", progress=on_progress)
    finally:
        killer.cancel()
        server.stop()
    assert result.status == "ok", result.warnings
    rows = read_table(result.run_dir, "server_samples").to_pylist()
    ups = [row for row in rows if row["metric"] == "up"]
    last_ok = max(row["ts_ns"] for row in ups if row["value"] == 1)
    down = sorted(row["ts_ns"] for row in ups if row["value"] == 0)
    assert down and down[0] > last_ok  # it never came back
    assert {row["phase"] for row in ups if row["value"] == 1} == {"solo"}
    assert {row["phase"] for row in ups if row["value"] == 0} == {"solo", "collocated"}
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    gaps = [w for w in manifest["warning_records"] if w["code"] == "server_metrics_gap"]
    assert gaps and all(g["details"]["service"] == "llm" for g in gaps)
    assert min(g["details"]["start_ns"] for g in gaps) == down[0]
    assert max(g["details"]["end_ns"] for g in gaps) == down[-1]
    assert sum(g["details"]["failed_scrapes"] for g in gaps) == len(down)
    # Each phase is a gap of its own (one scraper per phase), until the phase's end.
    windows = phase_windows(result.run_dir)
    assert all(
        any(g["details"]["phase"] == w["phase"] for g in gaps)
        for w in windows
        if w["start_ns"] > down[0]
    )
