"""The capacity search's controller: which probe comes next, and what the probes so far say.

Pure functions of the settings and the probe history (probes.jsonl), so a killed search resumes
by reloading its history; the probe executor (real runs or the simulator) is passed in. The
algorithm: a closed-loop ceiling probe (throughput X), then open-loop probes from X/2, bracketing
on log rate (x2 after a met, /2 after a missed, capped at X above and below at the lowest rate
the time budget can decide: stages.capacity.probe_plan), then bisection at the geometric midpoint
until hi / lo <= 1 + precision, and the rate found confirmed on a longer window
(stages.capacity.confirmation). A rate whose probe is undecided is probed again on the next
seeds, the stages' counts pooled, until it is met or can no longer be
(stages.capacity.sequential); undecided at every look it counts as not met and is flagged. Once
a probe has missed and none has met, one `unloaded` probe (one query at a time) asks whether the
SLO holds without queueing: a miss there is the only evidence for `infeasible`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stages.capacity import confirmation, probe_plan, sequential
from stages.capacity.endings import stop_detail
from stages.capacity.estimate import estimate_capacity
from stages.contracts.capacity_files import (
    CapacityResult,
    ProbeKind,
    ProbeRecord,
    SearchSettings,
    StopReason,
)

RAY_START_SCALE = 0.5
"""A region ray's first scale s (rates are s times the ray's per-pipeline rates)."""
RAY_MAX_SCALE = 8.0
"""A ray's ceiling: met at s = 8 stops the ray with `ceiling` (no closed-loop probe on rays)."""
_RELATIVE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ProbeRequest:
    """What the executor must run next: the ceiling or unloaded probe (rate 0) or a search
    probe at `rate` with spec seed `seed`; `reprobe`: a later stage of a rate's sequential
    test (stages.capacity.sequential); `window_s`: the measured window planned (None: the
    settings' probe_s), holding at least `min_queries` measured queries of each searched
    pipeline."""

    kind: ProbeKind
    rate: float
    seed: int
    reprobe: bool
    window_s: float | None = None
    min_queries: int = 0
    confirming: bool = False
    max_over_slo: int | None = None
    """The most over-SLO queries the probe may count before it can no longer pass (the early
    abort's count rule): for a stage of a sequential test, what the rate's last look allows
    less what its earlier stages counted; None: what the probe's own planned size allows."""


@dataclass(frozen=True)
class _Outcome:
    """The decided outcome of one rate: met, or not met (missed, failed, or flagged)."""

    rate: float
    met: bool


@dataclass(frozen=True)
class _History:
    """The search probes read in order as sequential rate tests: decided outcomes, a test
    still waiting for its next stage, the rates proven missed, and how many rates stayed
    undecided at every look."""

    outcomes: list[_Outcome]
    pending: sequential.RateTest | None
    flagged: int
    missed: list[float]


def _read_history(settings: SearchSettings, probes: Sequence[ProbeRecord]) -> _History:
    searched = [p for p in probes if p.kind == "search" and not p.confirming]
    tests = sequential.rate_tests(searched, settings)
    outcomes = [_Outcome(test.rate, test.met) for test in tests if test.met is not None]
    pending = tests[-1] if tests and tests[-1].met is None else None
    missed = [test.rate for test in tests if test.missed]
    missed += [
        p.rate for p in probes if p.kind == "search" and p.confirming and p.verdict == "missed"
    ]
    return _History(outcomes, pending, sum(test.flagged for test in tests), missed)


def _bracket(outcomes: Sequence[_Outcome]) -> tuple[float | None, float | None]:
    """(highest met rate below the lowest not-met one, lowest not-met rate); None: no such."""
    not_met = [outcome.rate for outcome in outcomes if not outcome.met]
    high = min(not_met) if not_met else None
    met = [o.rate for o in outcomes if o.met and (high is None or o.rate < high)]
    return (max(met) if met else None), high


def _lowest_missed(history: _History, above: float | None) -> float | None:
    """The lowest rate proven missed above `above` (the certified rate): the bracket's high
    end, which the capacity lies below at 99% (a rate merely not met may lie below it)."""
    missed = [rate for rate in history.missed if above is None or rate > above]
    return min(missed) if missed else None


def _ceiling_probe(probes: Sequence[ProbeRecord]) -> ProbeRecord | None:
    return next((probe for probe in probes if probe.kind == "ceiling"), None)


def _search_ceiling(settings: SearchSettings, probes: Sequence[ProbeRecord]) -> float | None:
    """The highest rate the search may probe: the ceiling probe's throughput, or for a ray
    RAY_MAX_SCALE; None when the ceiling probe measured nothing."""
    if settings.ray is not None:
        return RAY_MAX_SCALE
    ceiling = _ceiling_probe(probes)
    throughput = ceiling.throughput_qps if ceiling is not None else None
    return throughput if throughput is not None and throughput > 0 else None


def _next_request(
    settings: SearchSettings, ceiling: float, probes: Sequence[ProbeRecord], history: _History
) -> ProbeRequest | StopReason:
    """The next search probe: bracket on log rate, then bisect at the geometric midpoint;
    before the search stops `converged` or `ceiling`, its rate is confirmed (second phase)."""
    rate = _next_rate(settings, ceiling, history)
    if isinstance(rate, float):
        return stage_request(settings, rate)
    if rate in ("converged", "ceiling"):
        return _confirming(settings, probes, history) or rate
    return rate


def _next_rate(settings: SearchSettings, ceiling: float, history: _History) -> float | StopReason:
    """Bracket on log rate, then bisect at the geometric midpoint (or say why to stop)."""
    low, high = _bracket(history.outcomes)
    floor = _floor_rate(settings)
    if low is None and high is None:  # the first search probe
        start = RAY_START_SCALE if settings.ray is not None else ceiling / 2
        return max(start, floor)
    if high is None:  # everything met so far: up, at most to the ceiling
        assert low is not None
        if low >= ceiling * (1 - _RELATIVE_TOLERANCE):
            return "ceiling"
        return min(2 * low, ceiling)
    if low is None:  # nothing met below the lowest miss: down, no lower than the floor
        if high <= floor * (1 + _RELATIVE_TOLERANCE):
            return "undecidable"
        return max(high / 2, floor)
    if high / low <= 1 + settings.precision:
        return "converged"
    return math.sqrt(low * high)


def stage_request(
    settings: SearchSettings, rate: float, test: sequential.RateTest | None = None
) -> ProbeRequest:
    """A rate's first stage (on the base seed), or the next stage of its undecided `test` (on
    the next seed, as many queries as its next look adds); either stopped early once the rate
    can no longer be met at its last look."""
    if test is None:
        return _with_allowance(settings, _request(settings, "search", rate, settings.base_seed))
    first = probe_plan.min_probe_queries(settings)
    queries = sequential.next_stage_queries(first, test, settings)
    seed = test.stages[-1].seed + 1
    request = _request(settings, "search", test.rate, seed, True, queries)
    return _with_allowance(settings, request, test.stages)


def _with_allowance(
    settings: SearchSettings, request: ProbeRequest, stages: Sequence[ProbeRecord] = ()
) -> ProbeRequest:
    """The request with its early abort's allowance: what the rate's last look allows."""
    window_s = request.window_s or settings.probe_s
    planned = int(probe_plan.slowest_rate_qps(settings, request.rate) * window_s)
    first = probe_plan.min_probe_queries(settings)
    allowance = sequential.over_slo_allowance(first, stages, planned, settings)
    return dataclasses.replace(request, max_over_slo=allowance)


def _floor_rate(settings: SearchSettings) -> float:
    """The lowest rate the search probes: what the budget can decide, or the settings' floor."""
    return max(probe_plan.lowest_decidable_rate(settings), settings.min_rate or 0.0)


def _unloaded_probe(probes: Sequence[ProbeRecord]) -> ProbeRecord | None:
    return next((probe for probe in probes if probe.kind == "unloaded"), None)


def _wants_unloaded(
    settings: SearchSettings, probes: Sequence[ProbeRecord], history: _History
) -> bool:
    """Whether to run the unloaded probe now: a single target (not a ray), no unloaded probe
    yet, nothing met and at least one rate not met."""
    if settings.ray is not None or _unloaded_probe(probes) is not None:
        return False
    return bool(history.outcomes) and not any(outcome.met for outcome in history.outcomes)


def _request(
    settings: SearchSettings,
    kind: ProbeKind,
    rate: float,
    seed: int,
    reprobe: bool = False,
    queries: int | None = None,
) -> ProbeRequest:
    """A probe request with its window: a search probe's sized by its rate to hold `queries`
    (default: the settings' minimum), the unloaded probe's the longest it may take to hold
    the minimum; both capped by the budget."""
    cap_s = probe_plan.max_window_s(settings)
    minimum = probe_plan.min_probe_queries(settings) if queries is None else queries
    if kind != "search":  # one query at a time: as long as min_queries take, within the cap
        return ProbeRequest(
            kind,
            rate,
            seed,
            reprobe,
            min(probe_plan.UNLOADED_MAX_WINDOWS * settings.probe_s, cap_s),
            minimum,
        )
    wanted_s = probe_plan.window_s(settings, rate, minimum)
    if wanted_s > cap_s:  # a window cut by the cap holds fewer queries
        fitting = probe_plan.slowest_rate_qps(settings, rate) * cap_s / probe_plan.QUERY_MARGIN
        minimum = min(minimum, max(int(fitting), 1))
    return ProbeRequest(kind, rate, seed, reprobe, min(wanted_s, cap_s), minimum)


def _confirming(
    settings: SearchSettings, probes: Sequence[ProbeRecord], history: _History
) -> ProbeRequest | None:
    """The next confirming probe (stages.capacity.confirmation), each on a seed no probe has
    used; None once a confirming probe met, or with nothing to confirm."""
    found = _bracket(history.outcomes)[0]
    if found is None or confirmation.confirmed_rate(probes) is not None:
        return None
    rate = confirmation.next_confirming_rate(probes, found)
    # A seed no probe has used: a confirmation on a re-probe's seed would replay its arrivals.
    seed = 1 + max((p.seed for p in probes if p.kind == "search"), default=settings.base_seed)
    queries = probe_plan.confirming_queries(settings)
    request = _request(settings, "search", rate, seed, queries=queries)
    return dataclasses.replace(request, confirming=True)


def next_probe(
    settings: SearchSettings, probes: Sequence[ProbeRecord]
) -> ProbeRequest | StopReason:
    """The next probe to run, or why the search is over, from the history alone (resuming is
    reloading probes.jsonl). The probe budget counts every probe, the ceiling probe too; the
    time budget stops the search before a probe that would end past it."""
    if settings.ray is None and _ceiling_probe(probes) is None:
        window = min(settings.probe_s, probe_plan.CEILING_PROBE_MAX_S)
        return ProbeRequest("ceiling", 0.0, settings.base_seed, False, window)
    ceiling = _search_ceiling(settings, probes)
    ending = _ending_before_search(settings, probes, ceiling)
    if ending is not None:
        return ending
    assert ceiling is not None
    history = _read_history(settings, probes)
    if history.pending is not None:  # the rate's next stage, on the next seed
        request = stage_request(settings, history.pending.rate, history.pending)
    elif _wants_unloaded(settings, probes, history):
        request = _request(settings, "unloaded", 0.0, settings.base_seed)
    else:
        chosen = _next_request(settings, ceiling, probes, history)
        if isinstance(chosen, str):
            return chosen
        request = chosen
    request = _room_to_confirm(settings, probes, history, request)
    if len(probes) >= settings.max_probes:
        return "max_probes"
    if request.confirming and request.rate < _floor_rate(settings):
        return "budget"  # the next confirmation lies below what the budget decides
    if not probe_plan.fits_budget(settings, probes, request.window_s or settings.probe_s):
        return "budget" if _bracket(history.outcomes)[0] is not None else "undecidable"
    return request


def _ending_before_search(
    settings: SearchSettings, probes: Sequence[ProbeRecord], ceiling: float | None
) -> StopReason | None:
    """An ending that needs no search probe: the pipeline completed nothing (next to its
    co-runners), the unloaded probe missed, or the budget decides no rate it can sustain."""
    if ceiling is None:
        return "infeasible"
    unloaded = _unloaded_probe(probes)
    if unloaded is not None and unloaded.verdict == "missed":
        return "infeasible"
    if settings.ray is None and _floor_rate(settings) >= ceiling:
        return "undecidable"
    return None


def _room_to_confirm(
    settings: SearchSettings,
    probes: Sequence[ProbeRecord],
    history: _History,
    request: ProbeRequest,
) -> ProbeRequest:
    """The confirming probe instead of `request` when, after `request`, there would be no
    probe or no time left to confirm the certified rate: an answer that rests on one short
    window is the one most likely to overstate the capacity."""
    confirming = _confirming(settings, probes, history)
    if confirming is None or confirming == request or request.confirming:
        return request
    last_probe = len(probes) + 1 >= settings.max_probes
    both_s = (request.window_s or settings.probe_s) + probe_plan.overhead_s(probes)
    both_s += confirming.window_s or settings.probe_s
    if last_probe or not probe_plan.fits_budget(settings, probes, both_s):
        return confirming
    return request


def monotonicity_violations(settings: SearchSettings, probes: Sequence[ProbeRecord]) -> int:
    """Pairs of decided rates out of monotone order: a met rate above a not-met one."""
    outcomes = _read_history(settings, probes).outcomes
    met = [outcome.rate for outcome in outcomes if outcome.met]
    not_met = [outcome.rate for outcome in outcomes if not outcome.met]
    return sum(1 for up in met for down in not_met if up > down)


def result_of(
    settings: SearchSettings, probes: Sequence[ProbeRecord], stop_reason: StopReason
) -> CapacityResult:
    """capacity.json: the certified rate and bracket, the isotonic estimate with its interval,
    the monotonicity violations and flagged re-probes, from the probes so far."""
    history = _read_history(settings, probes)
    certified = confirmation.certified_rate(probes, _bracket(history.outcomes)[0])
    lowest_missed = _lowest_missed(history, certified)
    ceiling = _ceiling_probe(probes)
    # `budget` needs a bracket to narrow; with nothing met the budget could not decide.
    if stop_reason == "budget" and certified is None:
        stop_reason = "undecidable"
    searched = [probe for probe in probes if probe.kind == "search"]
    estimate = estimate_capacity(searched, settings.percentile)
    return CapacityResult(
        search_id=settings.search_id,
        pipeline=settings.pipeline,
        slo_ms=settings.slo_ms,
        percentile=settings.percentile,
        with_rates=dict(settings.with_rates),
        certified_qps=certified,
        estimate_qps=estimate.estimate_qps,
        estimate_ci95=estimate.ci95,
        bracket=(certified if certified is not None else 0.0, lowest_missed),
        probes=list(probes),
        stop_reason=stop_reason,
        ceiling_qps=ceiling.throughput_qps if ceiling is not None else None,
        monotonicity_violations=monotonicity_violations(settings, probes),
        flagged_probes=history.flagged,
        estimate_method=estimate.method,
        stop_detail=stop_detail(
            settings,
            probes,
            stop_reason,
            _bracket(history.outcomes),
            _unloaded_probe(probes),
            ceiling.throughput_qps if ceiling is not None else None,
        ),
        spent_s=round(probe_plan.spent_s(probes), 3),
    )


def _as_recorded(
    settings: SearchSettings, history: Sequence[ProbeRecord], record: ProbeRecord, index: int
) -> ProbeRecord:
    """The executor's record with the controller's bookkeeping: its index, and flagged when it
    ends a rate's sequential test undecided at every look."""
    recorded = record.model_copy(update={"index": index})
    if record.kind == "search" and not record.flagged and not record.confirming:
        ended = _read_history(settings, [*history, recorded])
        if ended.flagged > _read_history(settings, history).flagged:
            recorded = recorded.model_copy(update={"flagged": True})
    return recorded


def run_search(
    settings: SearchSettings,
    execute: Callable[[ProbeRequest], ProbeRecord],
    probes: Sequence[ProbeRecord] = (),
    on_probe: Callable[[ProbeRecord], None] | None = None,
) -> CapacityResult:
    """Run probes until the controller stops, starting from (resuming) `probes`; `on_probe`
    sees each new probe as soon as it ends (the store appends it to probes.jsonl)."""
    history = list(probes)
    while True:
        request = next_probe(settings, history)
        if isinstance(request, str):
            return result_of(settings, history, request)
        executed = execute(request).model_copy(update={"confirming": request.confirming})
        record = _as_recorded(settings, history, executed, len(history))
        if on_probe is not None:
            on_probe(record)
        history.append(record)
