"""The capacity controller on scripted probes: bracketing, bisection, re-probes, the stop
reasons, resuming from a truncated history, and the result's certified rate and bracket."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from stages.capacity.controller import (
    RAY_MAX_SCALE,
    ProbeRequest,
    next_probe,
    result_of,
    run_search,
)
from stages.contracts.capacity_files import ProbeRecord, SearchSettings, Verdict


def _settings(**overrides: object) -> SearchSettings:
    values: dict[str, object] = {
        "search_id": "s",
        "pipeline": "p",
        "slo_ms": 50.0,
        "probe_s": 10.0,
        "min_rate": 1.0,
    }
    values.update(overrides)
    return SearchSettings.model_validate(values)


def _record(
    request: ProbeRequest, verdict: Verdict | None, throughput: float | None = None
) -> ProbeRecord:
    return ProbeRecord(
        index=0,
        kind=request.kind,
        rate=request.rate,
        seed=request.seed,
        queries=1000,
        over_slo=0 if verdict == "met" else 50,
        verdict=verdict,
        p99_ms=None,
        run_dir=None,
        throughput_qps=throughput,
    )


class Scripted:
    """An executor whose search probes meet the SLO below `capacity` (ceiling: `ceiling`);
    `undecided` rates answer undecided (on every seed, or on the first only)."""

    def __init__(
        self,
        capacity: float,
        ceiling: float = 200.0,
        undecided: Callable[[ProbeRequest], bool] = lambda request: False,
    ) -> None:
        self.capacity, self.ceiling, self.undecided = capacity, ceiling, undecided
        self.requests: list[ProbeRequest] = []

    def __call__(self, request: ProbeRequest) -> ProbeRecord:
        self.requests.append(request)
        if request.kind == "ceiling":
            return _record(request, None, self.ceiling)
        if self.undecided(request):
            return _record(request, "undecided")
        return _record(request, "met" if request.rate <= self.capacity else "missed")


def test_first_request_is_the_ceiling_probe_and_search_starts_at_half_of_it() -> None:
    settings = _settings(base_seed=7)
    assert next_probe(settings, []) == ProbeRequest("ceiling", 0.0, 7, reprobe=False)
    ceiling = _record(ProbeRequest("ceiling", 0.0, 7, False), None, 180.0)
    assert next_probe(settings, [ceiling]) == ProbeRequest("search", 90.0, 7, reprobe=False)


def test_brackets_up_to_the_ceiling_then_bisects_at_geometric_midpoints() -> None:
    executor = Scripted(capacity=150.0, ceiling=200.0)
    result = run_search(_settings(precision=0.05), executor)
    rates = [request.rate for request in executor.requests[1:]]
    assert rates[:3] == pytest.approx([100.0, 200.0, math.sqrt(100.0 * 200.0)])
    assert result.stop_reason == "converged"
    low, high = result.bracket
    assert high is not None and high / low <= 1.05
    assert result.certified_qps == low and low <= 150.0 < high
    assert [probe.index for probe in result.probes] == list(range(len(result.probes)))


def test_brackets_down_by_halving_until_a_probe_meets() -> None:
    executor = Scripted(capacity=60.0, ceiling=1000.0)
    result = run_search(_settings(precision=0.05), executor)
    rates = [request.rate for request in executor.requests[1:6]]
    assert rates == pytest.approx([500.0, 250.0, 125.0, 62.5, 31.25])
    assert result.stop_reason == "converged"
    assert result.certified_qps is not None and result.certified_qps <= 60.0


def test_meeting_the_slo_at_the_ceiling_stops_with_ceiling() -> None:
    executor = Scripted(capacity=1e9, ceiling=200.0)
    result = run_search(_settings(), executor)
    assert result.stop_reason == "ceiling"
    assert result.certified_qps == 200.0 and result.bracket == (200.0, None)
    assert len(result.probes) == 3  # ceiling, 100, 200


def test_missing_down_to_the_minimum_rate_is_infeasible() -> None:
    executor = Scripted(capacity=0.5, ceiling=20.0)
    result = run_search(_settings(min_rate=2.0), executor)
    assert result.stop_reason == "infeasible"
    assert [r.rate for r in executor.requests[1:]] == pytest.approx([10.0, 5.0, 2.5, 2.0])
    assert result.certified_qps is None and result.bracket == (0.0, 2.0)


def test_the_probe_budget_counts_the_ceiling_probe() -> None:
    executor = Scripted(capacity=150.0)
    result = run_search(_settings(precision=0.0001, max_probes=5), executor)
    assert result.stop_reason == "max_probes" and len(result.probes) == 5


def test_undecided_is_reprobed_with_the_next_seed_and_twice_undecided_is_flagged() -> None:
    executor = Scripted(capacity=150.0, undecided=lambda request: request.rate == 200.0)
    result = run_search(_settings(base_seed=3), executor)
    reprobe = executor.requests[3]
    assert reprobe == ProbeRequest("search", 200.0, 4, reprobe=True)
    assert result.probes[3].flagged and result.flagged_probes == 1
    assert result.bracket[1] is not None and result.bracket[1] <= 200.0  # counted as not met


def test_undecided_then_decided_uses_the_second_verdict() -> None:
    executor = Scripted(capacity=150.0, undecided=lambda r: r.rate == 100.0 and not r.reprobe)
    result = run_search(_settings(), executor)
    assert executor.requests[2] == ProbeRequest("search", 100.0, 1, reprobe=True)
    assert result.flagged_probes == 0 and result.certified_qps is not None
    assert result.certified_qps > 100.0


def test_resuming_from_any_prefix_asks_for_the_same_next_probe() -> None:
    executor = Scripted(capacity=37.0, ceiling=90.0, undecided=lambda r: r.rate == 45.0)
    settings = _settings(precision=0.03)
    result = run_search(settings, executor)
    for done, request in enumerate(executor.requests):
        assert next_probe(settings, result.probes[:done]) == request
    assert next_probe(settings, result.probes) == result.stop_reason
    resumed = run_search(settings, Scripted(37.0, 90.0), result.probes[:4])
    assert resumed.certified_qps == result.certified_qps


def test_ray_searches_skip_the_ceiling_probe_and_stop_at_the_largest_scale() -> None:
    executor = Scripted(capacity=1e9)
    settings = _settings(ray={"A": 100.0, "B": 50.0}, pipeline="A+B", min_rate=0.01)
    result = run_search(settings, executor)
    assert [r.kind for r in executor.requests] == ["search"] * 5
    assert [r.rate for r in executor.requests] == [0.5, 1.0, 2.0, 4.0, RAY_MAX_SCALE]
    assert result.stop_reason == "ceiling" and result.ceiling_qps is None


def test_result_counts_monotonicity_violations_and_certifies_below_the_lowest_miss() -> None:
    def probe(rate: float, verdict: Verdict) -> ProbeRecord:
        return _record(ProbeRequest("search", rate, 0, False), verdict)

    ceiling = _record(ProbeRequest("ceiling", 0.0, 0, False), None, 300.0)
    history = [
        ceiling,
        probe(150, "met"),
        probe(300, "missed"),
        probe(100, "missed"),
        probe(120, "met"),
        probe(80, "met"),
    ]
    result = result_of(_settings(), history, "max_probes")
    assert result.monotonicity_violations == 2  # 150 and 120 met above the miss at 100
    assert result.certified_qps == 80 and result.bracket == (80, 100)
    assert result.ceiling_qps == 300.0 and result.stop_reason == "max_probes"
