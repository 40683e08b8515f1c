"""Run directories with known numbers, built by hand for the analysis and CLI tests (each
builder's docstring gives the figures the views must compute from it). Plain module, so test
modules import it instead of a conftest or another test module."""

from __future__ import annotations

from pathlib import Path

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


# Measured ok queries per 10 s window. Every query takes one gap (window / count), so a
# throughput ratio is count / solo count and a p50/p99 slowdown its inverse, with zero-width
# intervals (every batch alike; p99's needs more queries per batch than some phases have).
SOLO = {"a": 2000, "b": 1000, "c": 500}
PHASES = {
    "collocated": {"a": 800, "b": 500, "c": 200},
    "collocated:a+b": {"a": 1600, "b": 1000},
    "collocated:a+c": {"a": 1000, "c": 500},
    "collocated:b+c": {"b": 800, "c": 250},
}
# Host power (W) during each window; energy is cumulative, sampled 1 s before the window and
# every 4 s after, so each window's energy is 10 s * power exactly (linear interpolation).
POWER_W = {"solo:a": 2.0, "solo:b": 1.0, "solo:c": 0.5, "collocated": 3.0}
SUBSET_POWER_W = 100.0  # large, so a subset phase leaking into energy_comparison shows


def three_pipeline_run(root: Path) -> Path:
    """Solo a, b, c at 0, 20, 40 s; collocated at 60 s; a+b, a+c, b+c at 80, 100, 120 s."""
    run = RunBuilder(root, "20260111-000000-interf", dict.fromkeys("abc", "server"))
    base = 1_000 * SECOND_NS
    ten_s = 10 * SECOND_NS
    starts: list[tuple[str, str | None, int]] = []
    for index, (pipeline, count) in enumerate(SOLO.items()):
        start = base + index * 20 * SECOND_NS
        run.uniform_queries(0, "solo", pipeline, count, ten_s, start)
        starts.append(("solo", pipeline, start))
    for index, (phase, counts) in enumerate(PHASES.items()):
        start = base + (60 + index * 20) * SECOND_NS
        for pipeline, count in counts.items():
            run.uniform_queries(0, phase, pipeline, count, ten_s, start)
        starts.append((phase, None, start))
    for phase, solo_of, start in starts:
        key = f"solo:{solo_of}" if solo_of else phase
        power = POWER_W.get(key, SUBSET_POWER_W)
        values: list[float | None] = [power * seconds for seconds in (0, 4, 8, 12)]
        run.energy_series(0, phase, start - SECOND_NS, values, "rapl", period_ns=4 * SECOND_NS)
    return run.write()


def split_run(root: Path) -> Path:
    """collocated_run (collocated window [40, 50] s after BASE_NS: host 41.25 J, GPU 0 200 J;
    solo a window [0, 10] s: host 24.25 J; solo b [20, 30] s: host 33.75 J) plus per-process
    samples every second inside the windows and, to be ignored, just outside them:
      GPU 0, collocated, t = 41..49 s: pid 101 (pipeline a, set by the sampler) sm 30,
        pid 102 (pipeline NULL, but b's worker pid in host_samples) sm 10, pid 999 (foreign)
        sm 10 -> shares 0.6 / 0.2 / 0.2 -> 120 / 40 / 40 J; at t = 39.5 and 50.5 s pid 999
        uses 100 (outside the window).
      host, collocated, t = 41..49 s: a's worker 150 %, b's 50 %, harness 50 % -> 0.6 / 0.2 /
        0.2 of 41.25 J = 24.75 / 8.25 / 8.25 J.
      host, solo a, t = 1..9 s: a's worker 100 %, no harness row -> share 1, 24.25 J.
      solo b has no process rows: share and energy NULL, total 33.75 J."""
    run = collocated_run(root)
    second = 1_000_000_000
    base = 1_000 * second
    together = base + 40 * second
    for tick in range(1, 10):
        ts = together + tick * second
        run.add("gpu_process_samples", 0, "collocated", "a", ts_ns=ts, gpu=0, pid=101, sm_util=30.0)
        run.add(
            "gpu_process_samples", 0, "collocated", None, ts_ns=ts, gpu=0, pid=102, sm_util=10.0
        )
        run.add(
            "gpu_process_samples", 0, "collocated", None, ts_ns=ts, gpu=0, pid=999, sm_util=10.0
        )
        for pipeline, pid, util in (("a", 101, 150.0), ("b", 102, 50.0)):
            run.add(
                "host_samples",
                0,
                "collocated",
                pipeline,
                ts_ns=ts,
                scope="process",
                pid=pid,
                cpu_util=util,
            )
        run.add(
            "host_samples", 0, "collocated", None, ts_ns=ts, scope="harness", pid=1, cpu_util=50.0
        )
        run.add(
            "host_samples",
            0,
            "solo",
            "a",
            ts_ns=base + tick * second,
            scope="process",
            pid=201,
            cpu_util=100.0,
        )
    for ts in (together - second // 2, together + 10 * second + second // 2):
        run.add(
            "gpu_process_samples", 0, "collocated", None, ts_ns=ts, gpu=0, pid=999, sm_util=100.0
        )
        run.add(
            "host_samples", 0, "collocated", None, ts_ns=ts, scope="harness", pid=1, cpu_util=500.0
        )
    return run.write()


# The verdict cases at a 50 ms SLO (p99, 99% confidence): pipeline -> (measured queries,
# queries over the SLO). 17 of 340 is 5%: missed; 0 of 700: met (LoadGen needs 459 with none
# over); 3 of 400: undecided (too few to pass, about the 4 a p99 of exactly 50 ms would give).
SLO_MS = 50.0
SLO_CASES = {"missed": (340, 17), "met": (700, 0), "undecided": (400, 3)}


def slo_run(
    root: Path,
    cases: dict[str, tuple[int, int]] | None = None,
    run_id: str = "20260103-000000-slo",
    over_ms: float = 80.0,
) -> RunBuilder:
    """One `server` pipeline per case (named by it), solo, trial 0, slo_ms SLO_MS, queries
    10 ms apart. Of each case's (queries, over): the first `over` measured queries are over the
    SLO, one in three of them a failure (dropped, error, timeout in turn: failures count as
    over) and the rest ok at `over_ms`; the others ok at 10 ms. Five warm-up queries at 500 ms
    come first and must not count."""
    run = RunBuilder(root, run_id, {})
    failures = ("dropped", "error", "timeout")
    for pipeline, (queries, over) in (cases or SLO_CASES).items():
        run.loadgens[pipeline] = "server"
        run.slo_ms[pipeline] = SLO_MS
        for index in range(-5, queries):
            scheduled = BASE_NS + (index + 5) * 10 * MS_NS
            status = failures[index // 3 % 3] if 0 <= index < over and index % 3 == 2 else "ok"
            took_ms = 500.0 if index < 0 else over_ms if index < over else 10.0
            run.add(
                "queries",
                0,
                "solo",
                pipeline,
                query_id=index + 5,
                scheduled_ns=scheduled,
                issued_ns=scheduled + 50_000,
                completed_ns=None if status != "ok" else scheduled + int(took_ms * MS_NS),
                status=status,
                samples=1,
                warmup=index < 0,
            )
    return run
