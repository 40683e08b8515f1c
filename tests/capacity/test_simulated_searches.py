"""The issue's gate on a queue with a known answer: a 5 ms sleep stage (M/D/1) with p99 <= 50
ms, searched 200 times against the simulated probe (collobench's own seeded Poisson schedule,
Lindley recursion). The true capacity is computed here from many long simulated runs.

Probes are 90 s of simulated arrivals (~14k queries near capacity). Near capacity the over-SLO
queries come in bursts, and shorter probes hold few of them; the interval accounts for that
(stages.capacity.estimate), and a second gate holds it to 95% with 15 s probes, the demo's
window, where it used to cover 0.705 (perf/capacity_coverage.py measures every window)."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from functools import cache

import numpy as np
import pytest

from stages.capacity.controller import ProbeRequest, run_search
from stages.capacity.simulated_probe import (
    SimulatedProbe,
    SimulatedServer,
    UnitSchedules,
    arrival_offsets_s,
    fifo_capacity_qps,
    lindley_latencies_ms,
)
from stages.contracts.capacity_files import CapacityResult, SearchSettings
from stages.contracts.slo_verdict import LoadgenSloRule

SERVICE_MS, SLO_MS, PERCENTILE = 5.0, 50.0, 0.99
SEARCHES, PROBE_S = 200, 90.0
SHORT_SEARCHES, SHORT_PROBE_S, SHORT_MIN_COVERED = 150, 15.0, 137
"""The short-window gate: 150 searches, at least 137 covered (0.913). Binomially, a true
coverage of 0.95 passes with probability 0.981 (0.93: 0.83) and one of 0.85 (the old interval
at 30 s) fails with probability 0.985: scipy.stats.binom.sf(136, 150, 0.95) and
binom.cdf(136, 150, 0.85). 100 searches cannot give both 0.97."""


@cache
def true_capacity_qps() -> float:
    """The long-run capacity: 16 runs of 300k customers, the same draws at every rate."""
    return fifo_capacity_qps(SERVICE_MS, SLO_MS, PERCENTILE)


@cache
def searches(count: int = SEARCHES, probe_s: float = PROBE_S) -> tuple[CapacityResult, ...]:
    server = SimulatedServer(SERVICE_MS, SLO_MS, PERCENTILE, probe_s=probe_s)
    probe = SimulatedProbe(server, LoadgenSloRule())
    results = []
    for index in range(count):
        settings = SearchSettings(
            search_id=f"sim{index}",
            pipeline=server.pipeline,
            slo_ms=SLO_MS,
            percentile=PERCENTILE,
            precision=0.05,
            probe_s=probe_s,
            base_seed=2 * index,  # re-probes take 2 * index + 1
            min_rate=1.0,
        )
        results.append(run_search(settings, probe))
    return tuple(results)


def covers(result: CapacityResult, true_qps: float) -> bool:
    interval = result.estimate_ci95
    return interval is not None and interval[0] <= true_qps <= interval[1]


def test_the_schedule_is_the_runtimes_poisson_schedule_scaled_by_the_rate() -> None:
    server = SimulatedServer(probe_s=5.0)
    cached = UnitSchedules(server)
    for rate in (40.0, 155.0):
        direct = arrival_offsets_s(server, rate, seed=11)
        scaled = cached.offsets_s(rate, seed=11)
        assert direct.size == scaled.size > 0.8 * rate * server.probe_s
        assert np.max(np.abs(direct - scaled)) < 1e-6


def test_lindley_latencies_match_a_direct_fifo_simulation() -> None:
    rng = random.Random(3)
    offsets = np.cumsum([rng.expovariate(150.0) for _ in range(2000)])
    service_s, free_at, direct = 0.005, 0.0, []
    for arrival in offsets:
        start = max(arrival, free_at)
        free_at = start + service_s
        direct.append((free_at - arrival) * 1e3)
    assert lindley_latencies_ms(offsets, 5.0) == pytest.approx(direct, abs=1e-6)


def test_the_simulated_probe_aborts_once_it_can_no_longer_pass() -> None:
    probe = SimulatedProbe(SimulatedServer(probe_s=30.0), LoadgenSloRule())
    record = probe(ProbeRequest("search", 199.0, 0, reprobe=False))
    assert record.verdict == "missed" and record.abort_reason is not None
    allowed = LoadgenSloRule().max_passing_over_slo(round(199.0 * 30.0), PERCENTILE)
    assert record.over_slo == allowed + 1 and record.queries < 199.0 * 30.0 * 0.9
    assert sum(queries for queries, _ in record.batches) == record.queries


@pytest.mark.slow
def test_true_capacity_matches_the_research_figure() -> None:
    assert 150.0 < true_capacity_qps() < 160.0


@pytest.mark.slow
def test_200_seeded_searches_certify_below_and_cover_the_true_capacity() -> None:
    true_qps = true_capacity_qps()
    results = searches()
    certified_below = [r.certified_qps is not None and r.certified_qps <= true_qps for r in results]
    covered = [covers(r, true_qps) for r in results]
    widths = [r.estimate_ci95[1] / r.estimate_ci95[0] - 1 for r in results if r.estimate_ci95]
    probes = [len(r.probes) for r in results]
    stops = Counter(r.stop_reason for r in results)
    figures = (
        f"true {true_qps:.2f}/s, certified <= true {np.mean(certified_below):.3f}, "
        f"ci coverage {np.mean(covered):.3f} (width median {np.median(widths):.3f}), "
        f"probes median {statistics.median(probes)} max {max(probes)}, stops {dict(stops)}"
    )
    assert np.mean(certified_below) >= 0.99, figures
    assert np.mean(covered) >= 0.93, figures
    # Not covering by width alone: the median width measured here is 0.158 (+-8%).
    assert np.median(widths) <= 0.2, figures
    assert statistics.median(probes) <= 10, figures
    assert stops["converged"] == SEARCHES, figures
    violations = Counter(r.monotonicity_violations for r in results)
    assert max(violations) <= 3 and violations[0] >= 0.8 * SEARCHES, (figures, violations)
    print(figures)


@pytest.mark.slow
def test_the_interval_covers_the_true_capacity_with_15_s_probes() -> None:
    """Issue 42: the interval said 95% and covered 0.705 with the demo's 15 s windows (each
    window holds one or two bursts near capacity)."""
    true_qps = true_capacity_qps()
    results = searches(SHORT_SEARCHES, SHORT_PROBE_S)
    covered = sum(covers(r, true_qps) for r in results)
    below = sum(r.estimate_ci95 is not None and true_qps < r.estimate_ci95[0] for r in results)
    widths = [r.estimate_ci95[1] / r.estimate_ci95[0] - 1 for r in results if r.estimate_ci95]
    figures = (
        f"true {true_qps:.2f}/s: {covered}/{SHORT_SEARCHES} covered, truth below {below}, "
        f"width median {np.median(widths):.3f}"
    )
    print(figures)
    assert covered >= SHORT_MIN_COVERED, figures
    # An honest interval, not the probed range: measured median width 0.58 here (x1.7 passes).
    assert np.median(widths) <= 1.0, figures


def test_probes_of_one_search_share_their_arrivals() -> None:
    """Common random numbers: at a higher rate the same seed's queries wait no less."""
    server = SimulatedServer(probe_s=20.0)
    cached = UnitSchedules(server)
    low = lindley_latencies_ms(cached.offsets_s(120.0, 5), 5.0)
    high = lindley_latencies_ms(cached.offsets_s(150.0, 5), 5.0)
    assert low.size < high.size and np.all(high[: low.size] >= low - 1e-9)
    assert np.any(high[: low.size] > low + 1.0)
