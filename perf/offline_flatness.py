"""Parts 2 and 3 of `perf/stage_overhead.py`: offline throughput of a one-stage `noop`
pipeline against a bare queue and one consumer thread, and whether the per-query cost and the
memory stay flat over a long closed-loop run (by tenths of the run), recording on."""

from __future__ import annotations

import gc
import queue
import resource
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from perf.common import PeriodicSampler, rounded
from perf.noop_chains import log, noop_chain, run_recorded
from stages.spec.loadgen import loadgen_spec

OFFLINE_QUERIES = 200_000
FLAT_CLIENTS = 8
TENTHS = 10


# --------------------------------------------------------------------------- 2. offline


def bare_offline_qps(count: int) -> float:
    """Producer puts `count` items at once; one consumer thread stamps and stores a tuple each."""
    items: queue.SimpleQueue[Any] = queue.SimpleQueue()
    rows: list[tuple[int, int]] = []

    def consume() -> None:
        get, append, now = items.get, rows.append, time.monotonic_ns
        while True:
            item = get()
            if item is None:
                return
            append((item, now()))

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    payload = list(range(count))
    gc.collect()
    gc.freeze()
    try:
        start_ns = time.monotonic_ns()
        put = items.put
        for item in payload:
            put(item)
        put(None)
        thread.join()
    finally:
        gc.unfreeze()
    return count / ((rows[-1][1] - start_ns) / 1e9)


def measure_offline(repeats: int, work: Path) -> dict[str, Any]:
    rates: list[float] = []
    for repeat in range(repeats):
        loadgen = loadgen_spec(
            type="offline", samples_per_query=OFFLINE_QUERIES, duration_s=0, timeout_s=120
        )
        spec = noop_chain("offline", 1, loadgen)
        result, rows = run_recorded(spec, work / f"offline{repeat}")
        ok = int(rows["ok"].sum())
        span_s = (int(rows["completed_ns"][rows["ok"]].max()) - result.outcome.start_ns) / 1e9
        rates.append(ok / span_s)
        log(f"offline #{repeat}: {ok} ok in {span_s:.3f} s = {rates[-1]:,.0f} q/s")
    bare = [bare_offline_qps(OFFLINE_QUERIES) for _ in range(repeats)]
    median_qps = float(np.median(rates))
    return {
        "offline_queries": OFFLINE_QUERIES,
        "offline_repeats": repeats,
        "offline_qps": round(median_qps),
        "offline_qps_runs": [round(rate) for rate in rates],
        "offline_bare_queue_qps": round(float(np.median(bare))),
        "offline_ratio_ours_to_bare": rounded(median_qps / float(np.median(bare))),
    }


# --------------------------------------------------------------------------- 3. flatness


class RssSampler(PeriodicSampler):
    """Samples this process's RSS every `period_s` in a background thread."""

    def __init__(self, period_s: float = 0.02) -> None:
        process = psutil.Process()
        # (monotonic_ns, rss MiB)
        super().__init__(lambda: process.memory_info().rss / 2**20, period_s, name="rss")


def measure_flatness(queries: int, work: Path) -> dict[str, Any]:
    loadgen = loadgen_spec(
        type="closed_loop",
        concurrency=FLAT_CLIENTS,
        duration_s=3600,  # the run ends at max_queries
        max_queries=queries,
        timeout_s=3700,  # must exceed duration_s (refused otherwise)
    )
    spec = noop_chain("flat", 1, loadgen)
    with RssSampler() as rss:
        result, rows = run_recorded(spec, work / "flat")
    completed = np.sort(rows["completed_ns"][rows["ok"]])
    ok = completed.size
    start_ns = result.outcome.start_ns
    edges = [start_ns] + [int(completed[(ok * k) // TENTHS - 1]) for k in range(1, TENTHS + 1)]
    per_query_us = [
        (edges[k + 1] - edges[k]) / 1e3 / ((ok * (k + 1)) // TENTHS - (ok * k) // TENTHS)
        for k in range(TENTHS)
    ]
    end_ns = int(completed[-1])
    in_window = [mib for ts, mib in rss.samples if start_ns <= ts <= end_ns]
    before = [mib for ts, mib in rss.samples if ts < start_ns]
    tenth_rss: list[float | None] = []
    for k in range(TENTHS):
        values = [mib for ts, mib in rss.samples if edges[k] <= ts <= edges[k + 1]]
        tenth_rss.append(round(max(values), 1) if values else None)
    # Growth over the second half of the run: a leak proportional to queries shows here.
    half = [mib for ts, mib in rss.samples if edges[TENTHS // 2] <= ts <= end_ns]
    figures = {
        "flat_queries": queries,
        "flat_clients": FLAT_CLIENTS,
        "flat_status": result.status,
        "flat_ok": int(ok),
        "flat_qps": round(ok / ((end_ns - start_ns) / 1e9)),
        "flat_per_query_us_by_tenth": [rounded(v, 3) for v in per_query_us],
        "flat_max_min_ratio": rounded(max(per_query_us) / min(per_query_us), 3),
        "rss_before_run_mib": round(before[-1], 1) if before else None,
        "rss_peak_during_run_mib": round(max(in_window), 1) if in_window else None,
        "rss_by_tenth_max_mib": tenth_rss,
        "rss_second_half_growth_mib": round(half[-1] - half[0], 1) if len(half) > 1 else None,
        # Whole process, whole life (includes reading the rows back for this analysis).
        "ru_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    log(
        f"flatness: {ok} ok at {figures['flat_qps']:,} q/s, per-query us by tenth "
        f"{figures['flat_per_query_us_by_tenth']}, rss by tenth {tenth_rss}"
    )
    return figures
