"""How often the capacity estimate's 95% interval covers the true capacity, per probe window.

Prints ONE JSON line on stdout (progress on stderr). For each queue (service ms : SLO ms, p99;
default the 5 ms server at 50 ms of tests/capacity and the 4.17 ms one at 38.4 ms, whose
capacity is 180.9 q/s) and each probe window (default 10, 15 s (the demo's duration_s, the CLI's
default window), 30, 60 and 90 s), N seeded searches (default 400) of
stages.capacity.simulated_probe, each stopped as the controller stops it; against the true
capacity (long runs: stages.capacity.simulated_probe.fifo_capacity_qps) it reports the
interval's coverage with its Wilson 95% interval, how often the truth lay below and above it,
the median relative width, and the estimate's median error. Target: coverage >= 0.93 in every
cell. Simulated time only: about a minute of CPU per 400 searches of 90 s probes.

    python -m perf.capacity_coverage [--searches 400] [--probe-s 10 15 30 60 90]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np

from perf.common import BackgroundLoad, log, report_header
from stages.capacity.controller import run_search
from stages.capacity.simulated_probe import SimulatedProbe, SimulatedServer, fifo_capacity_qps
from stages.contracts.capacity_files import SearchSettings
from stages.contracts.slo_verdict import LoadgenSloRule

SCRIPT = "capacity_coverage"
PERCENTILE, PRECISION, TARGET_COVERAGE = 0.99, 0.05, 0.93
QUEUES = ("5:50", "4.17:38.4")


def wilson_95(hits: int, trials: int) -> tuple[float, float]:
    """The Wilson score 95% interval of a binomial proportion."""
    z = 1.959963984540054
    share = hits / trials
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials**2))
    return round(centre - half / (1 + z * z / trials), 4), round(
        centre + half / (1 + z * z / trials), 4
    )


def coverage(
    service_ms: float, slo_ms: float, probe_s: float, searches: int, true_qps: float
) -> dict[str, Any]:
    """`searches` seeded searches with `probe_s` windows and how their intervals cover true_qps."""
    server = SimulatedServer(service_ms, slo_ms, PERCENTILE, probe_s=probe_s)
    probe = SimulatedProbe(server, LoadgenSloRule())
    started = time.perf_counter()
    below = above = missing = 0
    widths, errors = [], []
    for index in range(searches):
        settings = SearchSettings(
            search_id=f"cov{index}",
            pipeline=server.pipeline,
            slo_ms=slo_ms,
            percentile=PERCENTILE,
            precision=PRECISION,
            probe_s=probe_s,
            base_seed=2 * index,
            min_rate=1.0,
        )
        result = run_search(settings, probe)
        if result.estimate_qps is not None:
            errors.append(result.estimate_qps / true_qps - 1)
        if result.estimate_ci95 is None:
            missing += 1
            continue
        low, high = result.estimate_ci95
        below += true_qps < low
        above += true_qps > high
        widths.append(high / low - 1)
    covered = searches - below - above - missing
    return {
        "probe_s": probe_s,
        "searches": searches,
        "coverage": round(covered / searches, 4),
        "coverage_wilson95": wilson_95(covered, searches),
        "truth_below_ci": below,
        "truth_above_ci": above,
        "ci_missing": missing,
        "width_rel_median": round(float(np.median(widths)), 4) if widths else None,
        "estimate_error_median": round(float(np.median(errors)), 4) if errors else None,
        "wall_s": round(time.perf_counter() - started, 1),
        "met": covered / searches >= TARGET_COVERAGE,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=400, help="seeded searches per cell")
    parser.add_argument("--probe-s", type=float, nargs="+", default=[10.0, 15.0, 30.0, 60.0, 90.0])
    parser.add_argument("--queues", nargs="+", default=list(QUEUES), help="SERVICE_MS:SLO_MS")
    args = parser.parse_args()
    cells, background = [], {}
    for queue in args.queues:
        service_ms, slo_ms = (float(part) for part in queue.split(":"))
        true_qps = fifo_capacity_qps(service_ms, slo_ms, PERCENTILE)
        log(SCRIPT, f"{queue}: true capacity {true_qps:.2f}/s")
        for probe_s in args.probe_s:
            with BackgroundLoad() as load:
                cell = coverage(service_ms, slo_ms, probe_s, args.searches, true_qps)
            background[f"{queue}@{probe_s:g}s"] = load.pct
            cells.append(
                {"service_ms": service_ms, "slo_ms": slo_ms, "true_qps": round(true_qps, 2), **cell}
            )
            log(SCRIPT, json.dumps(cells[-1]))
    report = {
        **report_header(SCRIPT, "sim", 0.0, background),
        "percentile": PERCENTILE,
        "precision": PRECISION,
        "target_coverage": TARGET_COVERAGE,
        "cells": cells,
        "met": all(cell["met"] for cell in cells),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
