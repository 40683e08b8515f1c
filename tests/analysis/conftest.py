"""Fixtures for the analysis tests: run directories with known numbers, and a warehouse."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.rundirs import MS_NS, SECOND_NS, RunBuilder

BASE_NS = 1_000 * SECOND_NS


def single_pipeline_run(root: Path, run_id: str = "20260101-000000-single") -> RunBuilder:
    """One pipeline `a`, solo only: 1000 ok queries in a 10 s window (latencies 1..10 ms, 100
    of each, 2 samples each), 20 warm-up queries, 5 dropped, 3 errors, 2 timeouts; issue delay
    50 us everywhere; stage `s` with 1 ms queue wait and 2 ms service on 10 queries."""
    run = RunBuilder(root, run_id, {"a": "server"})
    for index in range(20):  # warm-up: slow, early, excluded
        scheduled = BASE_NS - SECOND_NS + index * 10 * MS_NS
        run.add(
            "queries",
            0,
            "solo",
            "a",
            query_id=index,
            scheduled_ns=scheduled,
            issued_ns=scheduled + 50_000,
            completed_ns=scheduled + 100 * MS_NS,
            status="ok",
            samples=2,
            warmup=True,
        )
    run.add(
        "stage_events",
        0,
        "solo",
        "a",
        query_id=0,
        stage="s",
        visit=0,
        enqueued_ns=BASE_NS - SECOND_NS,
        started_ns=BASE_NS - SECOND_NS + 50 * MS_NS,
        finished_ns=BASE_NS - SECOND_NS + 90 * MS_NS,
        status="ok",
    )
    for index in range(1000):
        scheduled = BASE_NS + index * 10 * MS_NS
        run.add(
            "queries",
            0,
            "solo",
            "a",
            query_id=100 + index,
            scheduled_ns=scheduled,
            issued_ns=scheduled + 50_000,
            completed_ns=scheduled + (1 + index % 10) * MS_NS,
            status="ok",
            samples=2,
            warmup=False,
        )
        if index < 10:
            run.add(
                "stage_events",
                0,
                "solo",
                "a",
                query_id=100 + index,
                stage="s",
                visit=0,
                enqueued_ns=scheduled,
                started_ns=scheduled + MS_NS,
                finished_ns=scheduled + 3 * MS_NS,
                status="ok",
            )
    others = [("dropped", None)] * 5 + [("error", MS_NS)] * 3 + [("timeout", None)] * 2
    for offset, (status, took_ns) in enumerate(others):
        scheduled = BASE_NS + offset * 10 * MS_NS + 5 * MS_NS
        run.add(
            "queries",
            0,
            "solo",
            "a",
            query_id=5000 + offset,
            scheduled_ns=scheduled,
            issued_ns=scheduled + 50_000,
            completed_ns=None if took_ns is None else scheduled + took_ns,
            status=status,
            samples=2,
            warmup=False,
        )
    run.add("errors", 0, "solo", "a", stage="s", first_query_id=5005, count=3, error="boom")
    return run


def collocated_run(root: Path, run_id: str = "20260102-000000-colloc") -> RunBuilder:
    """Pipelines a and b, solo baselines then collocated, trial 0.

    a: solo 1000 queries / 10 s (100 q/s, 10 ms), collocated 500 / 10 s (50 q/s, 20 ms).
    b: solo 400 / 10 s (40 q/s, 25 ms), collocated 400 / 10 s (unaffected).
    Each load window is [0, 10] s from its phase's start. Host energy (rapl), cumulative, sampled
    every 4 s at t = -1, 3, 7, 11 s around its window, so E(t) is interpolated at both edges:
      solo a      0, 5, 12, 30 J:  E(0) = 0 + 5 * 1/4 = 1.25, E(10) = 12 + 18 * 3/4 = 25.5
                  -> 24.25 J (the 30 J span includes the margins outside the window);
      solo b      0, 10, 25, 40 J: E(0) = 2.5, E(10) = 25 + 15 * 3/4 = 36.25 -> 33.75 J;
      collocated  10, 20, 35, 60 J: E(0) = 12.5, E(10) = 35 + 25 * 3/4 = 53.75 -> 41.25 J.
    GPU 0 (nvml_counter), collocated only, samples exactly on the edges (t = 0, 5, 10 s):
      100, 150, 300 J -> 200 J."""
    run = RunBuilder(root, run_id, {"a": "server", "b": "closed_loop"})
    solo_a, solo_b, together = BASE_NS, BASE_NS + 20 * SECOND_NS, BASE_NS + 40 * SECOND_NS
    ten_s = 10 * SECOND_NS
    run.uniform_queries(0, "solo", "a", 1000, ten_s, solo_a)
    run.uniform_queries(0, "solo", "b", 400, ten_s, solo_b)
    run.uniform_queries(0, "collocated", "a", 500, ten_s, together)
    run.uniform_queries(0, "collocated", "b", 400, ten_s, together)
    # Each sampler starts a little before its load and stops a little after it.
    run.energy_series(
        0, "solo", solo_a - SECOND_NS, [0.0, 5.0, 12.0, 30.0], "rapl", period_ns=4 * SECOND_NS
    )
    run.energy_series(
        0, "solo", solo_b - SECOND_NS, [0.0, 10.0, 25.0, 40.0], "rapl", period_ns=4 * SECOND_NS
    )
    run.energy_series(
        0,
        "collocated",
        together - SECOND_NS,
        [10.0, 20.0, 35.0, 60.0],
        "rapl",
        period_ns=4 * SECOND_NS,
    )
    run.energy_series(
        0,
        "collocated",
        together,
        [100.0, 150.0, 300.0],
        "nvml_counter",
        gpu=0,
        period_ns=5 * SECOND_NS,
    )
    return run


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "warehouse" / "results.duckdb"
