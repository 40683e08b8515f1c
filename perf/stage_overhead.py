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
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perf.common import (
    BackgroundLoad,
    pct,
    report_header,
    rounded,
    spread,
    wait_for_quiet,
)
from perf.noop_chains import (
    SCRIPT,
    Placement,
    bare_chain_latencies_ns,
    cli_issued_latencies_ns,
    log,
    noop_chain,
    run_recorded,
)
from perf.offline_flatness import measure_flatness, measure_offline
from stages.collocation.placement import SCHEDULING_POLICIES
from stages.spec.loadgen import loadgen_spec

DEPTHS = (1, 10, 50)
PLACEMENTS = ("one_core", "two_cores")
TARGET_DEPTH = 10
TARGET_RATIO_AT_DEPTH_10 = 1.5
TARGET_OFFLINE_QPS = 500_000
FLAT_QUERIES = 200_000
SOAK_QUERIES = 1_000_000


# --------------------------------------------------------------------------- 1. per stage


def per_stage_figures(latency_ns: np.ndarray, depth: int) -> dict[str, float]:
    per_stage_us = latency_ns / depth / 1e3
    return {
        "per_stage_median_us": rounded(pct(per_stage_us, 50)),
        "per_stage_p99_us": rounded(pct(per_stage_us, 99)),
    }


@dataclass
class DepthRounds:
    """Per round of one depth: each side's latencies (from the issue and from the schedule),
    the product path's (None: that run failed), and the statuses of our runs."""

    ours_issued: list[np.ndarray] = field(default_factory=list)
    ours_scheduled: list[np.ndarray] = field(default_factory=list)
    bare_issued: list[np.ndarray] = field(default_factory=list)
    bare_scheduled: list[np.ndarray] = field(default_factory=list)
    cli: list[np.ndarray | None] = field(default_factory=list)
    statuses: set[str] = field(default_factory=set)


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
    parts = DepthRounds()
    cpus = {0} if placement == "one_core" else None
    for round_index in range(rounds):
        with Placement(cpus, scheduling_policy):
            result, rows = run_recorded(spec, work / f"d{depth}-{placement}-r{round_index}")
        parts.statuses.add(result.status)
        measured = rows["ok"] & ~rows["warmup"]
        parts.ours_issued.append((rows["completed_ns"] - rows["issued_ns"])[measured])
        parts.ours_scheduled.append((rows["completed_ns"] - rows["scheduled_ns"])[measured])
        with Placement(cpus, scheduling_policy):
            bare_issued, bare_scheduled = bare_chain_latencies_ns(
                depth, duration_s / rounds, warmup
            )
        parts.bare_issued.append(bare_issued)
        parts.bare_scheduled.append(bare_scheduled)
        if depth == TARGET_DEPTH:
            place = work / f"d{depth}-{placement}-r{round_index}-cli"
            parts.cli.append(cli_issued_latencies_ns(spec, cpus, scheduling_policy, place))
    figures = {
        "depth": depth,
        "placement": placement,
        "scheduling_policy": scheduling_policy,
        **depth_figures(parts, depth),
    }
    if parts.cli:
        figures.update(_cli_figures(parts.cli, parts.ours_issued, parts.bare_issued, depth))
    log(
        f"depth {depth} {placement}: ours {figures['ours_per_stage_median_us']} us/stage "
        f"(p99 {figures['ours_per_stage_p99_us']}), bare {figures['bare_per_stage_median_us']} "
        f"(p99 {figures['bare_per_stage_p99_us']}), ratio {figures['ratio_median']}, by "
        f"round {figures['ratio_median_by_round']}"
    )
    return figures


def depth_figures(parts: DepthRounds, depth: int) -> dict[str, Any]:
    """Both sides' per-stage and end-to-end figures over the pooled rounds, and their ratios."""
    ours_issued = np.concatenate(parts.ours_issued)
    bare_issued = np.concatenate(parts.bare_issued)
    ours = per_stage_figures(ours_issued, depth)
    bare = per_stage_figures(bare_issued, depth)
    return {
        "queries_ours": int(ours_issued.size),
        "queries_bare": int(bare_issued.size),
        "status_ours": ",".join(sorted(parts.statuses)),
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
                for ours_part, bare_part in zip(parts.ours_issued, parts.bare_issued, strict=True)
            ]
        ),
        "ours_e2e_median_us": rounded(pct(ours_issued, 50) / 1e3),
        "ours_e2e_p99_us": rounded(pct(ours_issued, 99) / 1e3),
        "bare_e2e_median_us": rounded(pct(bare_issued, 50) / 1e3),
        "bare_e2e_p99_us": rounded(pct(bare_issued, 99) / 1e3),
        **scheduled_figures(parts, depth),
    }


def scheduled_figures(parts: DepthRounds, depth: int) -> dict[str, Any]:
    """From the scheduled time: adds the completion -> issuer -> next issue hop (ours:
    on_complete queue + load generator loop; bare: tail queue + main thread)."""
    ours_sched = per_stage_figures(np.concatenate(parts.ours_scheduled), depth)
    bare_sched = per_stage_figures(np.concatenate(parts.bare_scheduled), depth)
    return {
        "ours_scheduled_per_stage_median_us": ours_sched["per_stage_median_us"],
        "ours_scheduled_per_stage_p99_us": ours_sched["per_stage_p99_us"],
        "bare_scheduled_per_stage_median_us": bare_sched["per_stage_median_us"],
        "bare_scheduled_per_stage_p99_us": bare_sched["per_stage_p99_us"],
        "ratio_scheduled_median": rounded(
            ours_sched["per_stage_median_us"] / bare_sched["per_stage_median_us"]
        ),
    }


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


# --------------------------------------------------------------------------- main


def timed(label: str, function: Callable[[], Any], background: dict[str, float]) -> Any:
    """Run `function`, logging its duration and noting the other processes' CPU meanwhile."""
    started = time.monotonic()
    with BackgroundLoad() as load:
        value = function()
    background[label] = load.pct
    log(f"{label} took {time.monotonic() - started:.1f} s (others used {load.pct}% of the CPUs)")
    return value


def targets_met(depths: list[dict[str, Any]], offline: dict[str, Any]) -> dict[str, bool]:
    """The per-stage ratio at TARGET_DEPTH on each placement (in process and through the CLI,
    by the median of rounds) and the offline rate."""
    at_target = {d["placement"]: d for d in depths if d["depth"] == TARGET_DEPTH}
    return {
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
    }


def parse_arguments() -> argparse.Namespace:
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
    return parser.parse_args()


def main() -> None:
    args = parse_arguments()
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
        "met": targets_met(depths, offline),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
