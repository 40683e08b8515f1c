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
    request: ProbeRequest,
    verdict: Verdict | None,
    throughput: float | None = None,
    undecided_over: int = 8,
) -> ProbeRecord:
    """A probe of 1,000 queries whose counts agree with `verdict` (the controller pools the
    counts of a rate's stages): none over when met, 5% when missed, else `undecided_over`."""
    return ProbeRecord(
        index=0,
        kind=request.kind,
        rate=request.rate,
        seed=request.seed,
        queries=1000,
        over_slo={"met": 0, "missed": 50}.get(verdict or "", undecided_over),
        verdict=verdict,
        p99_ms=None,
        run_dir=None,
        throughput_qps=throughput,
        duration_s=request.window_s,  # no start-up: the window is the whole probe
        window_s=request.window_s,
    )


class Scripted:
    """An executor whose search probes meet the SLO below `capacity` (ceiling: `ceiling`);
    `undecided` rates answer undecided (on every seed, or on the first only); the unloaded
    probe answers `unloaded`."""

    def __init__(
        self,
        capacity: float,
        ceiling: float = 200.0,
        undecided: Callable[[ProbeRequest], bool] = lambda request: False,
        unloaded: Verdict = "met",
        undecided_over: int = 8,
    ) -> None:
        self.capacity, self.ceiling, self.undecided = capacity, ceiling, undecided
        self.unloaded, self.undecided_over = unloaded, undecided_over
        self.requests: list[ProbeRequest] = []

    def searched(self) -> list[ProbeRequest]:
        return [request for request in self.requests if request.kind == "search"]

    def __call__(self, request: ProbeRequest) -> ProbeRecord:
        self.requests.append(request)
        if request.kind == "ceiling":
            return _record(request, None, self.ceiling)
        if request.kind == "unloaded":
            return _record(request, self.unloaded)
        if self.undecided(request):
            return _record(request, "undecided", undecided_over=self.undecided_over)
        return _record(request, "met" if request.rate <= self.capacity else "missed")


def test_first_request_is_the_ceiling_probe_and_search_starts_at_half_of_it() -> None:
    settings = _settings(base_seed=7)
    assert next_probe(settings, []) == ProbeRequest("ceiling", 0.0, 7, False, window_s=10.0)
    ceiling = _record(ProbeRequest("ceiling", 0.0, 7, False), None, 180.0)
    first = next_probe(settings, [ceiling])
    assert isinstance(first, ProbeRequest)
    assert (first.kind, first.rate, first.seed, first.reprobe) == ("search", 90.0, 7, False)
    # The first look of a sequential test meets p99 from 528 queries (h(0) at 99.5%): 581 take 6.5 s
    assert first.min_queries == 528 and first.window_s == 10.0
    assert first.max_over_slo == 9  # what its last look (2,112 queries) allows


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
    rates = [request.rate for request in executor.searched()[:5]]
    assert rates == pytest.approx([500.0, 250.0, 125.0, 62.5, 31.25])
    assert executor.requests[2].kind == "unloaded"  # once the first rate missed
    assert result.stop_reason == "converged"
    assert result.certified_qps is not None and result.certified_qps <= 60.0


def test_meeting_the_slo_at_the_ceiling_stops_with_ceiling() -> None:
    executor = Scripted(capacity=1e9, ceiling=200.0)
    result = run_search(_settings(), executor)
    assert result.stop_reason == "ceiling"
    assert result.certified_qps == 200.0 and result.bracket == (200.0, None)
    assert len(result.probes) == 4  # ceiling, 100, 200, 200 confirmed on the next seed
    confirming = executor.requests[-1]
    assert (confirming.rate, confirming.seed) == (200.0, 1)
    assert confirming.confirming and confirming.min_queries == 4 * 528


def test_an_unloaded_miss_is_the_evidence_for_infeasible() -> None:
    executor = Scripted(capacity=0.0, ceiling=20.0, unloaded="missed")
    result = run_search(_settings(), executor)
    assert [r.kind for r in executor.requests] == ["ceiling", "search", "unloaded"]
    assert result.stop_reason == "infeasible" and result.certified_qps is None
    assert result.stop_detail is not None
    assert "unloaded p99 misses the SLO" in result.stop_detail and "50 ms" in result.stop_detail


def test_missing_down_to_what_the_budget_decides_is_undecidable_naming_a_budget() -> None:
    """A 60 s budget caps a probe at 10 s: p99 needs 581 queries (528 with the Poisson margin),
    so 58.1 q/s is the lowest rate it decides. The unloaded probe met, so the SLO is not
    infeasible."""
    executor = Scripted(capacity=20.0, ceiling=400.0)
    result = run_search(_settings(budget_s=60.0, probe_s=1.0), executor)
    assert [r.rate for r in executor.searched()] == pytest.approx([200.0, 100.0, 58.08])
    assert result.stop_reason == "undecidable" and result.certified_qps is None
    detail = result.stop_detail or ""
    assert "nothing met down to 58.1 q/s" in detail and "the unloaded probe met" in detail
    assert "--budget-min 2 would probe down to 29 q/s" in detail, detail


def test_no_rate_floor_comes_from_the_probe_window() -> None:
    """Capacity 2 q/s with 10 s probes: below 528 / 10 = 52.8 q/s, yet found."""
    executor = Scripted(capacity=2.0, ceiling=100.0)
    result = run_search(_settings(min_rate=None), executor)
    assert result.stop_reason == "converged" and result.certified_qps is not None
    assert 1.9 < result.certified_qps <= 2.0
    slow = [r for r in executor.searched() if r.rate < 52.8]
    assert slow and all(r.window_s is not None and r.window_s * r.rate >= 528 for r in slow)


def test_the_time_budget_stops_a_search_before_a_probe_that_would_end_past_it() -> None:
    executor = Scripted(capacity=150.0)
    settings = _settings(budget_s=45.0, precision=0.001)
    result = run_search(settings, executor)
    assert result.stop_reason == "budget" and result.certified_qps is not None
    assert result.spent_s is not None and result.spent_s <= 45.0


def test_the_probe_budget_counts_the_ceiling_probe() -> None:
    executor = Scripted(capacity=150.0)
    result = run_search(_settings(precision=0.0001, max_probes=5), executor)
    assert result.stop_reason == "max_probes" and len(result.probes) == 5


def test_undecided_is_extended_on_the_next_seeds_and_undecided_at_every_look_is_flagged() -> None:
    executor = Scripted(capacity=150.0, undecided=lambda request: request.rate == 200.0)
    result = run_search(_settings(base_seed=3), executor)
    stages = executor.requests[2:5]
    assert [(r.rate, r.seed, r.reprobe) for r in stages] == [
        (200.0, 3, False),
        (200.0, 4, True),
        (200.0, 5, True),
    ]
    # The first stage held 1,000 queries, more than the second look's 1,056: one more query.
    assert stages[1].min_queries == 56 and stages[2].min_queries == 2112 - 2000
    assert not result.probes[3].flagged and result.probes[4].flagged
    assert result.flagged_probes == 1
    assert result.bracket[1] is not None and result.bracket[1] <= 200.0  # counted as not met


def test_undecided_then_decided_uses_the_second_verdict() -> None:
    executor = Scripted(
        capacity=150.0,
        undecided=lambda r: r.rate == 100.0 and not r.reprobe,
        undecided_over=3,  # 3 of 1,000 is not met at 99.5%; 3 of 2,000 is at 99.75%
    )
    result = run_search(_settings(), executor)
    again = executor.requests[2]
    assert (again.rate, again.seed, again.reprobe) == (100.0, 1, True)
    assert result.probes[2].rate == 100.0 and result.probes[3].rate != 100.0
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
    assert [r.kind for r in executor.requests] == ["search"] * 6
    assert [r.rate for r in executor.requests] == [0.5, 1.0, 2.0, 4.0, RAY_MAX_SCALE] * 1 + [
        RAY_MAX_SCALE
    ]  # the largest scale confirmed on a second seed
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


def test_the_bracket_ends_at_the_lowest_rate_proven_missed() -> None:
    """A probe stopped because it cannot pass is not met, yet not proven missed: the search
    bisects below it, and the bracket's high end stays at the proven miss above."""
    ceiling = _record(ProbeRequest("ceiling", 0.0, 0, False), None, 300.0)
    met = _record(ProbeRequest("search", 100, 0, False), "met")
    proven = _record(ProbeRequest("search", 150, 0, False), "missed")
    stopped = _record(ProbeRequest("search", 120, 0, False), "undecided").model_copy(
        update={"cannot_pass": True, "abort_reason": "cannot pass: 1 over SLO > 0 allowed"}
    )
    history = [ceiling, met, proven, stopped]
    request = next_probe(_settings(), history)
    assert isinstance(request, ProbeRequest) and not request.reprobe
    assert request.rate == pytest.approx(math.sqrt(100 * 120))  # no re-probe of 120
    result = result_of(_settings(), history, "max_probes")
    assert result.certified_qps == 100 and result.bracket == (100, 150)
    assert result.ceiling_qps == 300.0 and result.stop_reason == "max_probes"


def test_a_confirmation_not_met_sends_the_next_one_ten_percent_lower() -> None:
    """Short windows meet up to 150 q/s; the longer confirming windows only up to 125: the
    certified rate is the highest a confirming probe met, and the bisection ignores them."""

    class Confirming(Scripted):
        def __call__(self, request: ProbeRequest) -> ProbeRecord:
            if request.confirming:
                self.requests.append(request)
                return _record(request, "met" if request.rate <= 125.0 else "undecided")
            return super().__call__(request)

    executor = Confirming(capacity=150.0)
    result = run_search(_settings(), executor)
    confirming = [r for r in executor.requests if r.confirming]
    found = confirming[0].rate
    assert 145.0 < found <= 150.0
    assert [r.rate for r in confirming] == pytest.approx([found, 0.9 * found, 0.81 * found])
    assert [r.seed for r in confirming] == [1, 2, 3]
    assert result.stop_reason == "converged"
    assert result.certified_qps == pytest.approx(0.81 * found)
    assert next_probe(_settings(), result.probes) == "converged"  # resuming changes nothing


def test_a_confirmation_never_replays_a_seed_already_run() -> None:
    """The rate found was undecided on seed 0 and met on seed 1: its confirmation takes seed 2
    (the same seed would replay the same arrivals, common random numbers)."""
    executor = Scripted(capacity=150.0, undecided=lambda r: r.seed == 0 and r.rate > 140.0)
    run_search(_settings(), executor)
    confirming = [r for r in executor.requests if r.confirming]
    used = {(r.rate, r.seed) for r in executor.requests if not r.confirming}
    assert confirming and all((r.rate, r.seed) not in used for r in confirming)
    assert any(r.reprobe for r in executor.requests)


def test_a_budget_that_decides_no_rate_below_the_ceiling_ends_undecidable_at_once() -> None:
    """A served LLM completing 2 q/s at p99: 505 queries take 252 s at 2 q/s, more than the
    150 s a 15-minute budget gives one probe."""
    executor = Scripted(capacity=1.0, ceiling=2.0)
    result = run_search(_settings(budget_s=900.0, probe_s=15.0), executor)
    assert [r.kind for r in executor.requests] == ["ceiling"]
    assert result.stop_reason == "undecidable"
    assert result.stop_detail == (
        "p99 needs 528 queries a probe: this time budget decides no rate below 3.87 q/s, and "
        "the pipeline completes at most 2 q/s; --budget-min 59 would probe down to 1 q/s"
    )
