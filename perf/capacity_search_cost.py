"""What a capacity search costs and how right it is: the simulator's coverage, and one real search.

Prints ONE JSON line on stdout (progress on stderr).

1. Simulator (seconds): N seeded searches (default 200) of a 5 ms FIFO server with p99 <= 50 ms
   (M/D/1) against stages.capacity.simulated_probe, for each probe window in --probe-s (default
   30 and 90 s of simulated arrivals; the gate in tests/capacity uses 90 s). Against the true
   capacity (long-run simulation of 16 x 300k customers) it reports the share of searches whose
   certified rate is at most the true one
   (target >= 0.99), the coverage of estimate_ci95 (target >= 0.93; per window:
   perf/capacity_coverage.py), the probes per search
   (target: median <= 10 at 5% precision), the stop reasons, and the estimate's spread.
2. Real (minutes, unless --sim-only): `collobench capacity specs/capacity_demo.yaml --pipeline
   sleeper --no-mlflow` in a subprocess; from its capacity.json the certified rate, the estimate
   and interval, the bracket, the probes and the minutes the search took, next to the capacity
   computed (as in 1) from the service time the ceiling probe measured (1 / its throughput).
   Check: certified <= that capacity <= bracket high.
3. A slow model (minutes, unless --sim-only or --skip-slow): a 20 ms sleep stage standing in for
   resnet18 (batch 1 on CPU), p99 <= 100 ms, `collobench capacity --probe-s 10 --budget-min 10`.
   Its capacity (~28 q/s) lies below 459 / 10 = 45.9 q/s, where the search used to stop
   `infeasible`; the windows now grow as the rate falls. Check (issue 31): converged, certified <=
   the M/D/1 capacity of the service time its probes measured (stage rows) <= bracket high, in
   at most 10 minutes. Beside it, the simulator's 200 searches of the same queue. This part runs
   here rather than in `make test` because it takes 5 to 10 minutes of both cores.

--slow-queues: only issue 42's simulated queues (20 ms at p99 <= 100 ms, 40 ms at p99 <= 160 ms,
10 s probes, a 15-minute budget): certified / true (median; target >= 0.75), P(certified <=
true) (target >= 0.95), minutes and probes; and one rate's test alone at 0.8, 1 and 1.1 times
the capacity, sequential against the single 459-query probe before it (`rate_test`: how often
it is met); about two minutes for 200 searches each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from perf.common import REPO_ROOT, BackgroundLoad, log, report_header
from stages.capacity import sequential
from stages.capacity.controller import ProbeRequest, run_search, stage_request
from stages.capacity.simulated_probe import SimulatedProbe, SimulatedServer, fifo_capacity_qps
from stages.contracts.capacity_files import CAPACITY_FILE, CapacityResult, SearchSettings
from stages.contracts.slo_verdict import LoadgenSloRule

SCRIPT = "capacity_search_cost"
SERVICE_MS, SLO_MS, PERCENTILE, PRECISION = 5.0, 50.0, 0.99, 0.05
COLLOBENCH = Path(sys.executable).with_name("collobench")
DEMO_SPEC = REPO_ROOT / "specs" / "capacity_demo.yaml"
SLOW_SERVICE_MS, SLOW_SLO_MS, SLOW_PROBE_S, SLOW_BUDGET_MIN = 20.0, 100.0, 10.0, 10.0
SLOW_SPEC = f"""
name: capacity-slow-model
seed: 0
collocation: {{mode: time_slice, solo_baselines: false}}
pipelines:
  - name: slow
    loadgen: {{type: server, rate: 20, slo_ms: {SLOW_SLO_MS}, on_full: backlog,
              queue_depth: 10000, duration_s: {SLOW_PROBE_S}, timeout_s: 60}}
    stages:
      - {{id: infer, type: sleep, config: {{ms: {SLOW_SERVICE_MS}}}}}
"""


def simulate(
    searches: int,
    probe_s: float,
    true_qps: float,
    queue: tuple[float, float] = (SERVICE_MS, SLO_MS),
    budget_s: float | None = None,
) -> dict[str, Any]:
    """`searches` seeded searches with `probe_s` windows of the queue (service ms, SLO ms), and
    how they compare with true_qps."""
    server = SimulatedServer(queue[0], queue[1], PERCENTILE, probe_s=probe_s)
    probe = SimulatedProbe(server, LoadgenSloRule())
    started = time.perf_counter()
    results = [
        run_search(
            SearchSettings(
                search_id=f"sim{index}",
                pipeline=server.pipeline,
                slo_ms=server.slo_ms,
                percentile=PERCENTILE,
                precision=PRECISION,
                probe_s=probe_s,
                base_seed=2 * index,
                budget_s=budget_s,
            ),
            probe,
        )
        for index in range(searches)
    ]
    wall_s = time.perf_counter() - started
    return {
        "queue": {"service_ms": queue[0], "slo_ms": queue[1], "budget_s": budget_s},
        "probe_s": probe_s,
        "searches": searches,
        **search_figures(results, true_qps, wall_s),
    }


def search_figures(results: list[CapacityResult], true_qps: float, wall_s: float) -> dict[str, Any]:
    """What `simulate` reports of its searches against true_qps, with the targets met."""
    certified = [r.certified_qps for r in results]
    estimates = np.array([r.estimate_qps for r in results if r.estimate_qps is not None])
    intervals = [r.estimate_ci95 for r in results]
    probes = [len(r.probes) for r in results]
    return {
        "certified_le_true": round(
            float(np.mean([c is not None and c <= true_qps for c in certified])), 4
        ),
        "ci95_coverage": round(
            float(np.mean([ci is not None and ci[0] <= true_qps <= ci[1] for ci in intervals])), 4
        ),
        "ci95_missing": sum(ci is None for ci in intervals),
        "ci95_width_rel_median": round(
            float(np.median([ci[1] / ci[0] - 1 for ci in intervals if ci is not None])), 4
        ),
        "certified_median_qps": round(float(np.median([c or 0.0 for c in certified])), 2),
        "certified_ratio_median": round(
            float(np.median([c or 0.0 for c in certified])) / true_qps, 4
        ),
        "estimate_median_qps": round(float(np.median(estimates)), 2) if estimates.size else None,
        "estimate_log_sd": round(float(np.std(np.log(estimates))), 4) if estimates.size else None,
        "probes_median": statistics.median(probes),
        "probes_max": max(probes),
        "simulated_probe_s_median": statistics.median(
            sum(p.duration_s or 0.0 for p in r.probes if p.kind == "search") for r in results
        ),
        "spent_min_median": round(statistics.median((r.spent_s or 0) / 60 for r in results), 2),
        "spent_min_max": round(max((r.spent_s or 0) / 60 for r in results), 2),
        "flagged_probes": sum(r.flagged_probes for r in results),
        "stop_reasons": dict(Counter(r.stop_reason for r in results)),
        "wall_s": round(wall_s, 1),
        "met": {
            "certified_le_true": float(
                np.mean([c is not None and c <= true_qps for c in certified])
            )
            >= 0.99,
            "ci95_coverage": float(
                np.mean([ci is not None and ci[0] <= true_qps <= ci[1] for ci in intervals])
            )
            >= 0.93,
            "probes_median": statistics.median(probes) <= 10,
        },
    }


def real_search(
    extra: list[str], spec: Path = DEMO_SPEC, pipeline: str = "sleeper"
) -> dict[str, Any]:
    """One `collobench capacity` search (default: the demo's sleeper); its result and cost."""
    with tempfile.TemporaryDirectory(prefix="collobench-capacity-") as directory:
        out = Path(directory)
        command = [str(COLLOBENCH), "capacity", str(spec), "--pipeline", pipeline]
        command += ["--out", str(out), "--db", str(out / "w.duckdb"), "--no-mlflow", *extra]
        log(SCRIPT, "running: " + " ".join(command))
        started = time.monotonic()
        completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
        minutes = (time.monotonic() - started) / 60
        found = sorted(out.glob(f"*/{CAPACITY_FILE}"))
        if completed.returncode != 0 or not found:
            log(SCRIPT, f"capacity exited {completed.returncode}: {completed.stderr[-2000:]}")
            return {"exit_code": completed.returncode, "minutes": round(minutes, 2)}
        result = CapacityResult.model_validate_json(found[0].read_text())
        service_ms = stage_service_ms(result)
    return summarize_real(result, completed.returncode, minutes, service_ms)


def stage_service_ms(result: CapacityResult) -> float | None:
    """The mean stage time (finished - started) over every search probe's stage rows."""
    total_ns = count = 0
    for probe in result.probes:
        if probe.kind != "search" or probe.run_dir is None:
            continue
        path = Path(probe.run_dir) / "stage_events.parquet"
        if not path.exists():
            continue
        table = pq.read_table(path, columns=["started_ns", "finished_ns"]).to_pydict()
        pairs = zip(table["started_ns"], table["finished_ns"], strict=True)
        durations = [finished - started for started, finished in pairs]
        total_ns += sum(durations)
        count += len(durations)
    return total_ns / count / 1e6 if count else None


def summarize_real(
    result: CapacityResult, exit_code: int, minutes: float, stage_ms: float | None = None
) -> dict[str, Any]:
    """The real search's figures next to the M/D/1 capacity of its measured service time (the
    stage rows' mean, else 1 / the ceiling probe's throughput)."""
    service_ms = stage_ms or (1e3 / result.ceiling_qps if result.ceiling_qps else None)
    expected = (
        fifo_capacity_qps(service_ms, result.slo_ms, result.percentile) if service_ms else None
    )
    low, high = result.bracket
    consistent = None
    if expected is not None and result.certified_qps is not None:
        consistent = result.certified_qps <= expected <= (high if high is not None else np.inf)
    return {
        "exit_code": exit_code,
        "minutes": round(minutes, 2),
        "probes": len(result.probes),
        "probe_s_total": round(sum(p.duration_s or 0.0 for p in result.probes), 1),
        "stop_reason": result.stop_reason,
        "stop_detail": result.stop_detail,
        "certified_qps": result.certified_qps,
        "estimate_qps": result.estimate_qps,
        "estimate_ci95": result.estimate_ci95,
        "bracket": [low, high],
        "ceiling_qps": result.ceiling_qps,
        "measured_service_ms": round(service_ms, 3) if service_ms else None,
        "capacity_from_service_qps": round(expected, 2) if expected else None,
        "certified_le_expected_le_high": consistent,
        "verdicts": [p.verdict for p in result.probes],
    }


def slow_model(searches: int) -> dict[str, Any]:
    """Part 3: the 20 ms model's real search and the simulator's searches of the same queue."""
    true_qps = fifo_capacity_qps(SLOW_SERVICE_MS, SLOW_SLO_MS, PERCENTILE)
    simulated = simulate(
        searches, SLOW_PROBE_S, true_qps, (SLOW_SERVICE_MS, SLOW_SLO_MS), SLOW_BUDGET_MIN * 60
    )
    with tempfile.TemporaryDirectory(prefix="collobench-slow-") as directory:
        spec = Path(directory) / "slow.yaml"
        spec.write_text(SLOW_SPEC)
        flags = ["--probe-s", f"{SLOW_PROBE_S:g}", "--budget-min", f"{SLOW_BUDGET_MIN:g}"]
        real = real_search(flags, spec, "slow")
    real["met"] = {
        "converged": real.get("stop_reason") == "converged",
        "certified_le_md1_le_high": real.get("certified_le_expected_le_high") is True,
        "within_10_min": real.get("minutes", 99.0) <= 10.0,
    }
    return {"true_capacity_qps": round(true_qps, 2), "simulated": simulated, "real": real}


SLOW_QUEUES = ((20.0, 100.0), (40.0, 160.0))
"""Issue 42's queues (service ms, SLO ms): certified / true median >= 0.75 in 15 minutes."""


RATE_TEST_FRACTIONS = (0.8, 1.0, 1.1)
"""Rates (times the true capacity) at which one rate's test is run alone, many seeds each."""


def rate_test_met(
    server: SimulatedServer, rate: float, seeds: int, budget_s: float = 15 * 60.0
) -> dict[str, float]:
    """How often one rate's test is met on its own (no bisection, no confirmation): the
    sequential test (stages.capacity.sequential) against one probe of 459 queries at 99%, the
    rule before it. At or above the capacity this is the verdict's false-met rate."""
    probe = SimulatedProbe(server, LoadgenSloRule())
    met, old_met, stages = 0, 0, []
    for seed in range(seeds):
        settings = SearchSettings(
            search_id="rate",
            pipeline=server.pipeline,
            slo_ms=server.slo_ms,
            percentile=PERCENTILE,
            probe_s=server.probe_s,
            budget_s=budget_s,
            base_seed=1000 + 3 * seed,  # the stages take the next two seeds
        )
        records = [probe(stage_request(settings, rate))]
        test = sequential.rate_tests(records, settings)[-1]
        while test.met is None:
            records.append(probe(stage_request(settings, rate, test)))
            test = sequential.rate_tests(records, settings)[-1]
        met += bool(test.met)
        stages.append(len(records))
        window_s = max(server.probe_s, 1.1 * 459 / rate)
        old = probe(ProbeRequest("search", rate, settings.base_seed, False, window_s, 459))
        old_met += old.verdict == "met"
    return {
        "p_met": round(met / seeds, 4),
        "p_met_single_459": round(old_met / seeds, 4),
        "stages_mean": round(float(np.mean(stages)), 2),
    }


def slow_queues(searches: int) -> list[dict[str, Any]]:
    """The simulator's searches of issue 42's slow queues: 10 s probes, a 15-minute budget."""
    figures = []
    for service_ms, slo_ms in SLOW_QUEUES:
        true_qps = fifo_capacity_qps(service_ms, slo_ms, PERCENTILE, seeds=8, customers=200_000)
        server = SimulatedServer(service_ms, slo_ms, PERCENTILE, probe_s=SLOW_PROBE_S)
        rate_tests = {
            f"{fraction:g}x": rate_test_met(server, fraction * true_qps, searches)
            for fraction in RATE_TEST_FRACTIONS
        }
        figures.append(
            {
                "true_capacity_qps": round(true_qps, 3),
                **simulate(searches, SLOW_PROBE_S, true_qps, (service_ms, slo_ms), 15 * 60.0),
                "rate_test": rate_tests,
            }
        )
        log(SCRIPT, json.dumps(figures[-1]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=200, help="simulated searches per window")
    parser.add_argument("--probe-s", type=float, nargs="+", default=[30.0, 90.0])
    parser.add_argument("--sim-only", action="store_true", help="skip the real search")
    parser.add_argument("--quick", action="store_true", help="50 simulated searches")
    parser.add_argument("--real-args", default="", help="extra arguments for collobench capacity")
    parser.add_argument("--skip-slow", action="store_true", help="skip the slow model (part 3)")
    parser.add_argument(
        "--slow-queues", action="store_true", help="only the simulated 20 and 40 ms queues"
    )
    args = parser.parse_args()
    searches = 50 if args.quick else args.searches
    if args.slow_queues:
        with BackgroundLoad() as load:
            slow_figures = slow_queues(searches)
        header = report_header(SCRIPT, "slow-queues", 0.0, {"sim": load.pct})
        print(json.dumps({**header, "slow_queues": slow_figures}), flush=True)
        return
    background: dict[str, float] = {}
    true_qps = fifo_capacity_qps(SERVICE_MS, SLO_MS, PERCENTILE)
    log(SCRIPT, f"true capacity {true_qps:.2f}/s")
    simulated = []
    for probe_s in args.probe_s:
        with BackgroundLoad() as load:
            simulated.append(simulate(searches, probe_s, true_qps))
        background[f"sim_{probe_s:g}s"] = load.pct
        log(SCRIPT, json.dumps(simulated[-1]))
    real: dict[str, Any] | None = None
    if not args.sim_only:
        with BackgroundLoad() as load:
            real = real_search(args.real_args.split())
        background["real"] = load.pct
    slow: dict[str, Any] | None = None
    if not args.sim_only and not args.skip_slow:
        with BackgroundLoad() as load:
            slow = slow_model(searches)
        background["slow"] = load.pct
    report = {
        **report_header(SCRIPT, "sim-only" if args.sim_only else "full", 0.0, background),
        "queue": {"service_ms": SERVICE_MS, "slo_ms": SLO_MS, "percentile": PERCENTILE},
        "true_capacity_qps": round(true_qps, 2),
        "precision": PRECISION,
        "simulated": simulated,
        "real": real,
        "slow_model": slow,
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
