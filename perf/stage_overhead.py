"""Cost of the threaded stage runtime: per-stage hand-off latency, offline throughput, and
whether the per-query cost and the memory stay flat over a long run.

Prints ONE JSON line on stdout (progress on stderr). Three measurements, all with full recording
on (Parquet chunk files in a temporary run directory, as in a real run):

1. Per-stage cost. Closed-loop single queries (`closed_loop`, concurrency 1) through a chain of
   `noop` stages of depth 1, 10 and 50, run with `stages.runtime.driver.run_pipeline`. A query's
   latency is read back from the recorded Parquet rows (`completed_ns - issued_ns`; also
   `completed_ns - scheduled_ns`, which adds the completion -> load generator -> next issue
   hop); per-stage cost = latency / depth. The comparison, measured in the same run, is a bare
   chain of `queue.SimpleQueue` hops between as many Python threads, driven the same way: the
   main thread stamps the time and puts an item at the head, each thread passes it on, the last
   thread stamps the time (as our last stage stamps `completed_ns`) and hands it to the main
   thread, which then issues the next. Both sides cross exactly `depth` thread hand-offs between
   their two stamps. Target: our per-stage median at depth 10 within 2x of the bare chain's.
   Why: DESIGN.md's "figures to beat" (the paper's framework ~35 us/stage here, a bare hop ~3-5
   us): the runtime must not be what a benchmark of small stages measures.
2. Offline throughput of a one-stage `noop` pipeline (200,000 one-sample queries issued at
   once), ok queries / (last completed_ns - start_ns); target >= 500k queries/s. Next to it, a
   bare producer -> SimpleQueue -> consumer-thread loop that stamps and stores one tuple per item.
3. Flatness: a long closed-loop run (several clients, recording on) split into ten successive
   tenths by completion order; the per-query cost (wall time / queries) of each tenth should be
   the same (reported as max/min), and RSS (sampled by a background thread, plus
   `ru_maxrss`) must not grow with the number of queries. 200k queries by default, 1M with
   `--soak`.

`--quick` shortens every window (~20 s in all).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from stages.rundir import read_table
from stages.runtime.driver import PhaseResult, run_pipeline
from stages.runtime.loadgen.timing import set_timer_slack_ns
from stages.spec import LoadgenSpec, PipelineSpec, StageSpec

DEPTHS = (1, 10, 50)
TARGET_DEPTH = 10
TARGET_RATIO_AT_DEPTH_10 = 2.0
TARGET_OFFLINE_QPS = 500_000
OFFLINE_QUERIES = 200_000
FLAT_QUERIES = 200_000
SOAK_QUERIES = 1_000_000
FLAT_CLIENTS = 8
TENTHS = 10


def log(message: str) -> None:
    print(f"[stage_overhead] {message}", file=sys.stderr, flush=True)


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


def rounded(value: float, digits: int = 2) -> float:
    return round(value, digits)


class BackgroundLoad:
    """CPU used by other processes (not this one nor its waited-for children) over a window, in
    percent of the whole machine. The machine is shared: a noisy neighbour shows here."""

    def __init__(self) -> None:
        self.pct = 0.0
        self._process = psutil.Process()

    def _snapshot(self) -> tuple[float, float, float]:
        machine = psutil.cpu_times()
        busy = sum(machine) - machine.idle - machine.iowait
        ours = self._process.cpu_times()
        own = ours.user + ours.system + ours.children_user + ours.children_system
        return time.monotonic(), busy, own

    def __enter__(self) -> BackgroundLoad:
        self._start = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        wall1, busy1, own1 = self._snapshot()
        wall0, busy0, own0 = self._start
        capacity = max(1e-9, (wall1 - wall0) * (psutil.cpu_count() or 1))
        self.pct = round(max(0.0, (busy1 - busy0) - (own1 - own0)) / capacity * 100, 1)


def wait_for_quiet(max_wait_s: float, threshold_pct: float = 10.0) -> float:
    """Wait (at most `max_wait_s`) for a 1 s window in which other processes use less than
    `threshold_pct` of the machine; returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < max_wait_s:
        with BackgroundLoad() as load:
            time.sleep(1.0)
        if load.pct < threshold_pct:
            break
        log(f"machine busy ({load.pct}% used by other processes); waiting")
    return round(time.monotonic() - started, 1)


# --------------------------------------------------------------------------- pipelines


def noop_chain(name: str, depth: int, loadgen: LoadgenSpec) -> PipelineSpec:
    stages = [
        StageSpec(
            id=f"s{index}",
            type="noop",
            outputs=[f"s{index + 1}"] if index + 1 < depth else [],
        )
        for index in range(depth)
    ]
    return PipelineSpec(name=name, loadgen=loadgen, stages=stages, error_budget=None)


def run_recorded(spec: PipelineSpec, run_dir: Path) -> tuple[PhaseResult, dict[str, np.ndarray]]:
    """Run in this process with Parquet recording; return the result and the query rows."""
    set_timer_slack_ns(0)  # every run starts as a fresh worker would: default slack
    gc.collect()
    keys = {"run_id": "perf", "trial": 0, "phase": "solo", "pipeline": spec.name}
    result, _recorder = run_pipeline(spec, run_dir=run_dir, keys=keys)
    if result.status != "ok":
        log(f"{spec.name}: status {result.status}: {result.error}")
    table = read_table(run_dir, "queries")
    columns: dict[str, np.ndarray] = {}
    for name in ("query_id", "scheduled_ns", "issued_ns", "completed_ns"):
        columns[name] = table.column(name).to_numpy(zero_copy_only=False)
    columns["ok"] = np.array([s == "ok" for s in table.column("status").to_pylist()])
    columns["warmup"] = table.column("warmup").to_numpy(zero_copy_only=False)
    return result, columns


# --------------------------------------------------------------------------- 1. per stage


def bare_chain_latencies_ns(
    depth: int, duration_s: float, warmup: int
) -> tuple[np.ndarray, np.ndarray]:
    """Closed-loop single items through `depth` threads joined by SimpleQueues.

    Returns (head put -> last thread's stamp, previous stamp -> this stamp) per item."""
    queues: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(depth + 1)]

    def hop(source: queue.SimpleQueue[Any], target: queue.SimpleQueue[Any]) -> None:
        get, put = source.get, target.put
        while True:
            item = get()
            put(item)
            if item is None:
                return

    def last(source: queue.SimpleQueue[Any], target: queue.SimpleQueue[Any]) -> None:
        get, put, now = source.get, target.put, time.monotonic_ns
        while True:
            item = get()
            if item is None:
                put(None)
                return
            put(now())

    threads = [
        threading.Thread(target=hop, args=(queues[i], queues[i + 1]), daemon=True)
        for i in range(depth - 1)
    ]
    threads.append(threading.Thread(target=last, args=(queues[-2], queues[-1]), daemon=True))
    for thread in threads:
        thread.start()
    head_put, tail_get, now = queues[0].put, queues[-1].get, time.monotonic_ns
    payload = object()
    issued: list[int] = []
    done: list[int] = []
    end_ns = now() + int(duration_s * 1e9)
    gc.collect()
    gc.freeze()
    try:
        previous = now()
        while previous < end_ns:
            start = now()
            head_put(payload)
            previous = tail_get()
            issued.append(start)
            done.append(previous)
    finally:
        gc.unfreeze()
        head_put(None)
        tail_get()
        for thread in threads:
            thread.join(5)
    issued_ns = np.array(issued[warmup:], dtype=np.int64)
    done_ns = np.array(done[warmup:], dtype=np.int64)
    since_previous = np.diff(np.array(done[warmup - 1 if warmup else 0 :], dtype=np.int64))
    return done_ns - issued_ns, since_previous


def per_stage_figures(latency_ns: np.ndarray, depth: int) -> dict[str, float]:
    per_stage_us = latency_ns / depth / 1e3
    return {
        "per_stage_median_us": rounded(pct(per_stage_us, 50)),
        "per_stage_p99_us": rounded(pct(per_stage_us, 99)),
    }


def measure_depth(
    depth: int, duration_s: float, rounds: int, warmup: int, work: Path
) -> dict[str, Any]:
    """Alternate `rounds` windows of ours and of the bare chain (so drift in the machine's
    background load hits both alike) and pool each side's latencies."""
    loadgen = LoadgenSpec(
        type="closed_loop",
        concurrency=1,
        duration_s=duration_s / rounds,
        warmup_queries=warmup,
        timeout_s=duration_s + 60,
    )
    spec = noop_chain(f"chain{depth}", depth, loadgen)
    ours_issued_parts: list[np.ndarray] = []
    ours_scheduled_parts: list[np.ndarray] = []
    bare_issued_parts: list[np.ndarray] = []
    bare_scheduled_parts: list[np.ndarray] = []
    statuses: set[str] = set()
    for round_index in range(rounds):
        result, rows = run_recorded(spec, work / f"d{depth}-r{round_index}")
        statuses.add(result.status)
        measured = rows["ok"] & ~rows["warmup"]
        ours_issued_parts.append((rows["completed_ns"] - rows["issued_ns"])[measured])
        ours_scheduled_parts.append((rows["completed_ns"] - rows["scheduled_ns"])[measured])
        bare_issued, bare_scheduled = bare_chain_latencies_ns(depth, duration_s / rounds, warmup)
        bare_issued_parts.append(bare_issued)
        bare_scheduled_parts.append(bare_scheduled)
    ours_issued = np.concatenate(ours_issued_parts)
    ours_scheduled = np.concatenate(ours_scheduled_parts)
    bare_issued = np.concatenate(bare_issued_parts)
    bare_scheduled = np.concatenate(bare_scheduled_parts)
    ours = per_stage_figures(ours_issued, depth)
    bare = per_stage_figures(bare_issued, depth)
    ours_sched = per_stage_figures(ours_scheduled, depth)
    bare_sched = per_stage_figures(bare_scheduled, depth)
    figures = {
        "depth": depth,
        "queries_ours": int(ours_issued.size),
        "queries_bare": int(bare_issued.size),
        "status_ours": ",".join(sorted(statuses)),
        "ours_per_stage_median_us": ours["per_stage_median_us"],
        "ours_per_stage_p99_us": ours["per_stage_p99_us"],
        "bare_per_stage_median_us": bare["per_stage_median_us"],
        "bare_per_stage_p99_us": bare["per_stage_p99_us"],
        "ratio_median": rounded(ours["per_stage_median_us"] / bare["per_stage_median_us"]),
        "ratio_p99": rounded(ours["per_stage_p99_us"] / bare["per_stage_p99_us"]),
        "ours_e2e_median_us": rounded(pct(ours_issued, 50) / 1e3),
        "ours_e2e_p99_us": rounded(pct(ours_issued, 99) / 1e3),
        "bare_e2e_median_us": rounded(pct(bare_issued, 50) / 1e3),
        "bare_e2e_p99_us": rounded(pct(bare_issued, 99) / 1e3),
        # From the scheduled time: adds the completion -> issuer -> next issue hop (ours:
        # on_complete queue + load generator loop; bare: tail queue + main thread).
        "ours_scheduled_per_stage_median_us": ours_sched["per_stage_median_us"],
        "ours_scheduled_per_stage_p99_us": ours_sched["per_stage_p99_us"],
        "bare_scheduled_per_stage_median_us": bare_sched["per_stage_median_us"],
        "bare_scheduled_per_stage_p99_us": bare_sched["per_stage_p99_us"],
        "ratio_scheduled_median": rounded(
            ours_sched["per_stage_median_us"] / bare_sched["per_stage_median_us"]
        ),
    }
    log(
        f"depth {depth}: ours {figures['ours_per_stage_median_us']} us/stage "
        f"(p99 {figures['ours_per_stage_p99_us']}), bare {figures['bare_per_stage_median_us']} "
        f"(p99 {figures['bare_per_stage_p99_us']}), ratio {figures['ratio_median']}"
    )
    return figures


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
        loadgen = LoadgenSpec(
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


class RssSampler:
    """Samples this process's RSS every `period_s` in a background thread."""

    def __init__(self, period_s: float = 0.02) -> None:
        self.period_s = period_s
        self.samples: list[tuple[int, float]] = []  # (monotonic_ns, rss MiB)
        self._stop = threading.Event()
        self._process = psutil.Process()
        self._thread = threading.Thread(target=self._loop, name="rss", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic_ns(), self._process.memory_info().rss / 2**20))
            self._stop.wait(self.period_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure_flatness(queries: int, work: Path) -> dict[str, Any]:
    loadgen = LoadgenSpec(
        type="closed_loop",
        concurrency=FLAT_CLIENTS,
        duration_s=3600,  # the run ends at max_queries
        max_queries=queries,
        timeout_s=3600,
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
        "ru_maxrss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    log(
        f"flatness: {ok} ok at {figures['flat_qps']:,} q/s, per-query us by tenth "
        f"{figures['flat_per_query_us_by_tenth']}, rss by tenth {tenth_rss}"
    )
    return figures


# --------------------------------------------------------------------------- main


def timed(label: str, function: Callable[[], Any], background: dict[str, float]) -> Any:
    """Run `function`, logging its duration and noting the other processes' CPU meanwhile."""
    started = time.monotonic()
    with BackgroundLoad() as load:
        value = function()
    background[label] = load.pct
    log(f"{label} took {time.monotonic() - started:.1f} s (others used {load.pct}% of the CPUs)")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows (~20 s in all)")
    parser.add_argument("--soak", action="store_true", help=f"{SOAK_QUERIES:,}-query flatness")
    args = parser.parse_args()
    chain_s = 1.6 if args.quick else 12.0
    rounds = 2 if args.quick else 4
    warmup = 200
    offline_repeats = 1 if args.quick else 3
    flat_queries = SOAK_QUERIES if args.soak else (50_000 if args.quick else FLAT_QUERIES)
    waited_s = wait_for_quiet(5.0 if args.quick else 30.0)
    background: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="collobench-perf-") as directory:
        work = Path(directory)
        depths = [
            timed(
                f"depth_{d}",
                lambda d=d: measure_depth(d, chain_s, rounds, warmup, work),
                background,
            )
            for d in DEPTHS
        ]
        offline = timed("offline", lambda: measure_offline(offline_repeats, work), background)
        flat = timed("flatness", lambda: measure_flatness(flat_queries, work), background)
    at_target = next(d for d in depths if d["depth"] == TARGET_DEPTH)
    report = {
        "benchmark": "stage_overhead",
        "mode": "soak" if args.soak else ("quick" if args.quick else "full"),
        "cpus": os.cpu_count(),
        "waited_for_quiet_s": waited_s,
        "background_cpu_pct": background,
        "chain_window_s": chain_s,
        "chain_rounds": rounds,
        "chain_warmup_queries": warmup,
        "latency_basis": "completed_ns - issued_ns from the recorded queries.parquet rows",
        "chains": depths,
        **offline,
        **flat,
        "targets": {
            "per_stage_median_ratio_at_depth_10_max": TARGET_RATIO_AT_DEPTH_10,
            "offline_qps_min": TARGET_OFFLINE_QPS,
        },
        "met": {
            "per_stage_median_ratio_at_depth_10": at_target["ratio_median"]
            <= TARGET_RATIO_AT_DEPTH_10,
            "offline_qps": offline["offline_qps"] >= TARGET_OFFLINE_QPS,
        },
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
