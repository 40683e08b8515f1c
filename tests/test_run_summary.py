"""Headline figures per scenario, read from a run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.run_summary import summarize_run
from stages.rundir import ChunkWriter, merge_parts


def make_run(tmp_path: Path, scenario: str, latencies_ms: list[float], slo_ms: float) -> Path:
    keys = {"run_id": "r", "trial": 0, "phase": "solo", "pipeline": "p"}
    writer = ChunkWriter(tmp_path, "queries", "t0-solo-p", keys)
    count = len(latencies_ms)
    scheduled = [i * 10_000_000 for i in range(count)]
    writer.write_columns(
        {
            "query_id": list(range(count + 2)),
            "scheduled_ns": [*scheduled, 0, 0],
            "issued_ns": [s + 5_000 for s in scheduled] + [0, 0],
            "completed_ns": [
                s + int(ms * 1e6) for s, ms in zip(scheduled, latencies_ms, strict=True)
            ]
            + [None, 1],
            "status": ["ok"] * count + ["dropped", "ok"],
            "samples": [1] * (count + 2),
            "warmup": [False] * (count + 1) + [True],
        }
    )
    merge_parts(tmp_path)
    spec = {"pipelines": [{"name": "p", "loadgen": {"type": scenario, "slo_ms": slo_ms}}]}
    (tmp_path / "manifest.json").write_text(json.dumps({"spec": spec}))
    return tmp_path


def test_single_stream_reports_p90_and_server_p99_with_bounds(tmp_path: Path) -> None:
    latencies = [float(i) for i in range(1, 1001)]
    (single,) = summarize_run(make_run(tmp_path / "a", "single_stream", latencies, 950))
    assert single.target_percentile == 0.9
    assert single.latency_target_ms == pytest.approx(900.1, abs=0.2)
    assert single.latency_bound_ms is not None and single.latency_bound_ms > 900
    assert single.slo_met is True
    assert (single.ok, single.dropped) == (1000, 1)  # the warm-up row is left out
    assert single.issue_delay_p50_us == pytest.approx(5.0)
    (server,) = summarize_run(make_run(tmp_path / "b", "server", latencies, 990))
    assert server.target_percentile == 0.99
    assert server.latency_bound_ms is not None and server.latency_bound_ms > 990
    assert server.slo_met is False  # the honest bound misses although the sample p99 is 990
