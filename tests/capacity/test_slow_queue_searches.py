"""Issue 31's gate on a slow model: a 40 ms server (M/D/1) with p99 <= 160 ms searched with 10 s
probes and the CLI's 15-minute budget. Its capacity, about 11.5 q/s, lies below 459 / 10 = 45.9
q/s, the rate floor the search used to derive from the probe window: every such search then
read `infeasible`. Now the windows grow as the rate falls (459 queries at least), the certified
rate is confirmed on a second seed with a longer window, and no search may end `infeasible`
(the unloaded probe meets the SLO)."""

from __future__ import annotations

import statistics
from collections import Counter
from functools import cache

import numpy as np

from stages.capacity.controller import run_search
from stages.capacity.simulated_probe import SimulatedProbe, SimulatedServer, fifo_capacity_qps
from stages.contracts.capacity_files import CapacityResult, SearchSettings
from stages.contracts.slo_verdict import LoadgenSloRule

SERVICE_MS, SLO_MS, PERCENTILE = 40.0, 160.0, 0.99
SEARCHES, PROBE_S, BUDGET_S = 200, 10.0, 15 * 60.0


@cache
def true_capacity_qps() -> float:
    return fifo_capacity_qps(SERVICE_MS, SLO_MS, PERCENTILE, seeds=8, customers=200_000)


@cache
def searches() -> tuple[CapacityResult, ...]:
    server = SimulatedServer(SERVICE_MS, SLO_MS, PERCENTILE, probe_s=PROBE_S)
    probe = SimulatedProbe(server, LoadgenSloRule())
    results = []
    for index in range(SEARCHES):
        settings = SearchSettings(
            search_id=f"slow{index}",
            pipeline=server.pipeline,
            slo_ms=SLO_MS,
            percentile=PERCENTILE,
            probe_s=PROBE_S,
            budget_s=BUDGET_S,
            base_seed=2 * index,
        )
        results.append(run_search(settings, probe))
    return tuple(results)


def test_the_queue_is_slower_than_the_old_window_floor() -> None:
    assert true_capacity_qps() < 459 / PROBE_S
    assert 10.5 < true_capacity_qps() < 12.5


def test_200_searches_of_a_slow_queue_certify_below_its_capacity_and_none_is_infeasible() -> None:
    true_qps = true_capacity_qps()
    results = searches()
    stops = Counter(r.stop_reason for r in results)
    certified = [r.certified_qps for r in results if r.certified_qps is not None]
    below = np.mean([rate <= true_qps for rate in certified])
    spent_min = [(r.spent_s or 0.0) / 60 for r in results]
    figures = (
        f"true {true_qps:.2f}/s; {len(certified)} certified, P(certified <= true) {below:.3f}, "
        f"median certified {statistics.median(certified):.2f}; stops {dict(stops)}; spent "
        f"median {statistics.median(spent_min):.1f} max {max(spent_min):.1f} min"
    )
    print(figures)
    assert stops["infeasible"] == 0, figures
    assert below >= 0.99, figures
    assert len(certified) >= 0.95 * SEARCHES, figures
    assert max(spent_min) <= BUDGET_S / 60, figures
    # The bracket's high end is a proven miss: the capacity lies below it.
    assert all(r.bracket[1] is None or r.bracket[1] >= true_qps for r in results), figures
    # Every search probe below the old floor held the minimum count for LoadGen's rule.
    slow = [p for r in results for p in r.probes if p.kind == "search" and p.rate < 45.9]
    assert slow and all(p.queries >= 459 or p.abort_reason for p in slow)


def test_an_slo_below_the_service_time_is_infeasible_with_the_unloaded_figure() -> None:
    server = SimulatedServer(SERVICE_MS, 30.0, PERCENTILE, probe_s=PROBE_S)
    settings = SearchSettings(
        search_id="tight", pipeline=server.pipeline, slo_ms=30.0, probe_s=PROBE_S, budget_s=900
    )
    result = run_search(settings, SimulatedProbe(server, LoadgenSloRule()))
    assert result.stop_reason == "infeasible" and result.certified_qps is None
    assert [p.kind for p in result.probes] == ["ceiling", "search", "unloaded"]
    assert result.stop_detail is not None and "(p99 40.0 ms)" in result.stop_detail
