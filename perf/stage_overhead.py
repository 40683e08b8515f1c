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
   their two stamps. Both sides run twice: with every thread pinned to one core (`one_core`:
   each hand-off is a same-CPU thread switch, so the figure is the software cost and is stable)
   and free on both cores (`two_cores`: a hand-off to the other CPU, which on these VMs costs
   ~4 us when that vCPU is awake but ~25 us when it has to be woken from idle, so this figure
   depends on what else the machine is doing). Target: the median over rounds of each round's
   ratio of per-stage medians (ours, then the bare chain) at depth 10 within 1.5x, checked for
   each placement, both sides under the same scheduling policy (`--scheduling-policy`: run once
   with `other` and once with `batch`).
   At depth 10 every round also runs the chain through `collobench run` (the product path, a
   subprocess as users start it: `perf/product_path.py`), its worker placed as the in-process
   side is (`placement.cpus: [0]` for one_core, and the same scheduling policy); reported per
   round as its ratio to the same round's bare chain and to the in-process chain (the gap).
   Why: the project's figures to beat (the paper's framework ~35 us/stage here, a bare hop ~3-5
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
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow.compute as pc

from perf import common, product_path
from perf.common import (
    BackgroundLoad,
    PeriodicSampler,
    pct,
    report_header,
    run_recorded_table,
    spread,
    wait_for_quiet,
)
from stages.collocation.placement import SCHEDULING_POLICIES
from stages.runtime.driver import PhaseResult
from stages.spec.loadgen import LoadgenSpec, loadgen_spec
from stages.spec.models import PipelineSpec, StageSpec

DEPTHS = (1, 10, 50)
PLACEMENTS = ("one_core", "two_cores")
TARGET_DEPTH = 10
TARGET_RATIO_AT_DEPTH_10 = 1.5
TARGET_OFFLINE_QPS = 500_000
OFFLINE_QUERIES = 200_000
FLAT_QUERIES = 200_000
SOAK_QUERIES = 1_000_000
FLAT_CLIENTS = 8
TENTHS = 10
SCRIPT = "stage_overhead"


def log(message: str) -> None:
    common.log(SCRIPT, message)


def rounded(value: float, digits: int = 2) -> float:
    return round(value, digits)


class Placement:
    """Restricts the calling thread, and every thread it starts meanwhile, to `cpus` (None:
    leave as is) under `scheduling_policy` (`placement.scheduling_policy`'s names; threads
    inherit it too). Stage, recorder and bare-chain threads are all started inside the block,
    so both sides of a comparison run under the same policy."""

    def __init__(self, cpus: set[int] | None, scheduling_policy: str = "other") -> None:
        self.cpus = cpus
        self.policy = SCHEDULING_POLICIES[scheduling_policy]
        self._previous: set[int] = set()
        self._previous_policy = os.sched_getscheduler(0)

    def __enter__(self) -> Placement:
        if self.cpus is not None:
            self._previous = os.sched_getaffinity(0)
            os.sched_setaffinity(0, self.cpus)
        os.sched_setscheduler(0, self.policy, os.sched_param(0))
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cpus is not None:
            os.sched_setaffinity(0, self._previous)
        os.sched_setscheduler(0, self._previous_policy, os.sched_param(0))


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
    # Every run starts as a fresh worker would: default slack.
    result, table = run_recorded_table(SCRIPT, spec, run_dir, slack_ns=0)
    columns: dict[str, np.ndarray] = {}
    for name in ("query_id", "scheduled_ns", "issued_ns", "completed_ns"):
        columns[name] = table.column(name).to_numpy(zero_copy_only=False)
    columns["ok"] = pc.equal(table.column("status"), "ok").to_numpy(zero_copy_only=False)
    columns["warmup"] = table.column("warmup").to_numpy(zero_copy_only=False)
    return result, columns


def cli_issued_latencies_ns(
    spec: PipelineSpec, cpus: set[int] | None, scheduling_policy: str, work: Path
) -> np.ndarray | None:
    """`spec` through `collobench run`, its worker placed on `cpus` under the policy:
    completed_ns - issued_ns of the measured ok queries (None: the run failed, logged)."""
    placement: dict[str, Any] = {"scheduling_policy": scheduling_policy}
    if cpus is not None:
        placement["cpus"] = sorted(cpus)
    placed = spec.model_copy(update={"placement": spec.placement.model_copy(update=placement)})
    document = product_path.spec_document(spec.name, [placed])
    try:
        run_dir = product_path.run_spec(document, work, spec.name)
    except product_path.ProductPathError as error:
        log(f"{spec.name} through collobench run: {error}")
        return None
    rows = product_path.measured_queries(run_dir, spec.name)
    ok = pc.equal(rows.column("status"), "ok")
    completed = pc.filter(rows.column("completed_ns"), ok).to_numpy()
    return np.asarray(completed - pc.filter(rows.column("issued_ns"), ok).to_numpy())


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
    depth: int,
    placement: str,
    duration_s: float,
    rounds: int,
    warmup: int,
    work: Path,
    scheduling_policy: str = "other",
) -> dict[str, Any]:
    """Alternate `rounds` windows of ours and of the bare chain (so drift in the machine's
    background load hits both alike) and pool each side's latencies. `placement` one_core pins
    every thread of both sides to CPU 0; two_cores leaves them free. Both sides run under
    `scheduling_policy`."""
    loadgen = loadgen_spec(
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
    cli_parts: list[np.ndarray | None] = []
    statuses: set[str] = set()
    cpus = {0} if placement == "one_core" else None
    for round_index in range(rounds):
        with Placement(cpus, scheduling_policy):
            result, rows = run_recorded(spec, work / f"d{depth}-{placement}-r{round_index}")
        statuses.add(result.status)
        measured = rows["ok"] & ~rows["warmup"]
        ours_issued_parts.append((rows["completed_ns"] - rows["issued_ns"])[measured])
        ours_scheduled_parts.append((rows["completed_ns"] - rows["scheduled_ns"])[measured])
        with Placement(cpus, scheduling_policy):
            bare_issued, bare_scheduled = bare_chain_latencies_ns(
                depth, duration_s / rounds, warmup
            )
        bare_issued_parts.append(bare_issued)
        bare_scheduled_parts.append(bare_scheduled)
        if depth == TARGET_DEPTH:
            place = work / f"d{depth}-{placement}-r{round_index}-cli"
            cli_parts.append(cli_issued_latencies_ns(spec, cpus, scheduling_policy, place))
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
        "placement": placement,
        "scheduling_policy": scheduling_policy,
        "queries_ours": int(ours_issued.size),
        "queries_bare": int(bare_issued.size),
        "status_ours": ",".join(sorted(statuses)),
        "ours_per_stage_median_us": ours["per_stage_median_us"],
        "ours_per_stage_p99_us": ours["per_stage_p99_us"],
        "bare_per_stage_median_us": bare["per_stage_median_us"],
        "bare_per_stage_p99_us": bare["per_stage_p99_us"],
        "ratio_median": rounded(ours["per_stage_median_us"] / bare["per_stage_median_us"]),
        "ratio_p99": rounded(ours["per_stage_p99_us"] / bare["per_stage_p99_us"]),
        # Each round's ratio of medians (ours, then the bare chain right after it): the paired
        # figure, whose median and range show how much the machine drifted between rounds.
        "ratio_median_by_round": spread(
            [
                pct(ours_part, 50) / pct(bare_part, 50)
                for ours_part, bare_part in zip(ours_issued_parts, bare_issued_parts, strict=True)
            ]
        ),
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
    if cli_parts:
        figures.update(_cli_figures(cli_parts, ours_issued_parts, bare_issued_parts, depth))
    log(
        f"depth {depth} {placement}: ours {figures['ours_per_stage_median_us']} us/stage "
        f"(p99 {figures['ours_per_stage_p99_us']}), bare {figures['bare_per_stage_median_us']} "
        f"(p99 {figures['bare_per_stage_p99_us']}), ratio {figures['ratio_median']}, by "
        f"round {figures['ratio_median_by_round']}"
    )
    return figures


def _cli_figures(
    cli_parts: list[np.ndarray | None],
    ours_parts: list[np.ndarray],
    bare_parts: list[np.ndarray],
    depth: int,
) -> dict[str, Any]:
    """The product path's per-stage figures, and per round its ratio to the bare chain and
    to the in-process chain of the same round."""
    rounds = [
        (cli, ours, bare)
        for cli, ours, bare in zip(cli_parts, ours_parts, bare_parts, strict=True)
        if cli is not None and cli.size
    ]
    if not rounds:
        return {"cli_error": "no collobench run finished"}
    cli = per_stage_figures(np.concatenate([cli for cli, _, _ in rounds]), depth)
    return {
        "cli_rounds": len(rounds),
        "cli_per_stage_median_us": cli["per_stage_median_us"],
        "cli_per_stage_p99_us": cli["per_stage_p99_us"],
        "cli_ratio_median_by_round": spread(
            [pct(cli, 50) / pct(bare, 50) for cli, _, bare in rounds]
        ),
        "cli_to_in_process_median_by_round": spread(
            [pct(cli, 50) / pct(ours, 50) for cli, ours, _ in rounds]
        ),
    }


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
    parser.add_argument(
        "--flatness-only", action="store_true", help="only the flatness run (make soak's part)"
    )
    parser.add_argument(
        "--scheduling-policy",
        choices=sorted(SCHEDULING_POLICIES),
        default="other",
        help="the Linux scheduling policy of both sides' threads in the chain measurements "
        "(placement.scheduling_policy; batch = SCHED_BATCH)",
    )
    args = parser.parse_args()
    chain_s = 1.0 if args.quick else 8.0
    rounds = 3 if args.quick else 8
    warmup = 200
    offline_repeats = 1 if args.quick else 3
    flat_queries = SOAK_QUERIES if args.soak else FLAT_QUERIES
    waited_s = wait_for_quiet(SCRIPT, 5.0 if args.quick else 30.0)
    background: dict[str, float] = {}
    if args.flatness_only:
        with tempfile.TemporaryDirectory(prefix="collobench-perf-") as directory:
            flat = timed(
                "flatness", lambda: measure_flatness(flat_queries, Path(directory)), background
            )
        mode = "soak_flatness" if args.soak else "flatness"
        print(json.dumps({**report_header(SCRIPT, mode, waited_s, background), **flat}), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="collobench-perf-") as directory:
        work = Path(directory)
        depths: list[dict[str, Any]] = []
        for placement in PLACEMENTS:
            for depth in DEPTHS:

                def measure(depth: int = depth, placement: str = placement) -> dict[str, Any]:
                    return measure_depth(
                        depth, placement, chain_s, rounds, warmup, work, args.scheduling_policy
                    )

                depths.append(timed(f"depth_{depth}_{placement}", measure, background))
        offline = timed("offline", lambda: measure_offline(offline_repeats, work), background)
        flat = timed("flatness", lambda: measure_flatness(flat_queries, work), background)
    at_target = {d["placement"]: d for d in depths if d["depth"] == TARGET_DEPTH}
    mode = "soak" if args.soak else ("quick" if args.quick else "full")
    report = {
        **report_header(SCRIPT, mode, waited_s, background),
        "chain_window_s": chain_s,
        "chain_rounds": rounds,
        "chain_warmup_queries": warmup,
        "chain_scheduling_policy": args.scheduling_policy,
        "latency_basis": "completed_ns - issued_ns from the recorded queries.parquet rows",
        "chains": depths,
        **offline,
        **flat,
        "targets": {
            "per_stage_median_ratio_at_depth_10_max": TARGET_RATIO_AT_DEPTH_10,
            "offline_qps_min": TARGET_OFFLINE_QPS,
        },
        "met": {
            **{
                f"per_stage_median_ratio_at_depth_10_{placement}": at_target[placement][
                    "ratio_median_by_round"
                ]["median"]
                <= TARGET_RATIO_AT_DEPTH_10
                for placement in PLACEMENTS
            },
            **{
                f"per_stage_median_ratio_at_depth_10_{placement}_cli": at_target[placement]
                .get("cli_ratio_median_by_round", {})
                .get("median", 1e9)
                <= TARGET_RATIO_AT_DEPTH_10
                for placement in PLACEMENTS
            },
            "offline_qps": offline["offline_qps"] >= TARGET_OFFLINE_QPS,
        },
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
