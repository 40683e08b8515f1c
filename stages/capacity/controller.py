"""The capacity search's controller: which probe comes next, and what the probes so far say.

Pure functions of the settings and the probe history (probes.jsonl), so a killed search resumes
by reloading its history; the probe executor (real runs or the simulator) is passed in. The
algorithm: a closed-loop ceiling probe (throughput X), then open-loop probes from X/2, bracketing
on log rate (x2 after a met, /2 after a missed, capped at X above and settings.min_rate below),
then bisection at the geometric midpoint until hi / lo <= 1 + precision. An undecided probe is
run once more with the next seed; undecided twice counts as not met and is flagged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    """What the executor must run next: the ceiling probe (rate 0) or a search probe at `rate`
    with spec seed `seed`; `reprobe`: the second try at a rate whose first was undecided."""

    kind: ProbeKind
    rate: float
    seed: int
    reprobe: bool


@dataclass(frozen=True)
class _Outcome:
    """The decided outcome of one rate: met, or not met (missed, failed, or flagged)."""

    rate: float
    met: bool


@dataclass(frozen=True)
class _History:
    """The search probes read in order: decided outcomes, a first undecided try still waiting
    for its re-probe, and how many rates were undecided twice."""

    outcomes: list[_Outcome]
    pending: ProbeRecord | None
    flagged: int


def _same_rate(first: float, second: float) -> bool:
    return math.isclose(first, second, rel_tol=_RELATIVE_TOLERANCE)


def _read_history(probes: Sequence[ProbeRecord]) -> _History:
    outcomes: list[_Outcome] = []
    pending: ProbeRecord | None = None
    flagged = 0
    for probe in probes:
        if probe.kind != "search":
            continue
        second_try = pending is not None and _same_rate(pending.rate, probe.rate)
        pending = None  # a first try never re-probed (another rate came next) decides nothing
        twice_undecided = probe.flagged or (second_try and probe.verdict == "undecided")
        if twice_undecided:
            flagged += 1
            outcomes.append(_Outcome(probe.rate, met=False))
        elif probe.verdict == "undecided":
            pending = probe
        else:  # met, missed, or None (the probe failed): only met counts as met
            outcomes.append(_Outcome(probe.rate, met=probe.verdict == "met"))
    return _History(outcomes, pending, flagged)


def _bracket(outcomes: Sequence[_Outcome]) -> tuple[float | None, float | None]:
    """(highest met rate below the lowest not-met one, lowest not-met rate); None: no such."""
    not_met = [outcome.rate for outcome in outcomes if not outcome.met]
    high = min(not_met) if not_met else None
    met = [o.rate for o in outcomes if o.met and (high is None or o.rate < high)]
    return (max(met) if met else None), high


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


def _next_rate(settings: SearchSettings, ceiling: float, history: _History) -> float | StopReason:
    """Bracket on log rate, then bisect at the geometric midpoint (or say why to stop)."""
    low, high = _bracket(history.outcomes)
    if low is None and high is None:  # the first search probe
        start = RAY_START_SCALE if settings.ray is not None else ceiling / 2
        return max(start, settings.min_rate)
    if high is None:  # everything met so far: up, at most to the ceiling
        assert low is not None
        if low >= ceiling * (1 - _RELATIVE_TOLERANCE):
            return "ceiling"
        return min(2 * low, ceiling)
    if low is None:  # nothing met below the lowest miss: down, at least to min_rate
        if high <= settings.min_rate * (1 + _RELATIVE_TOLERANCE):
            return "infeasible"
        return max(high / 2, settings.min_rate)
    if high / low <= 1 + settings.precision:
        return "converged"
    return math.sqrt(low * high)


def next_probe(
    settings: SearchSettings, probes: Sequence[ProbeRecord]
) -> ProbeRequest | StopReason:
    """The next probe to run, or why the search is over, from the history alone (resuming is
    reloading probes.jsonl). The probe budget counts every probe, the ceiling probe too."""
    if settings.ray is None and _ceiling_probe(probes) is None:
        return ProbeRequest("ceiling", 0.0, settings.base_seed, reprobe=False)
    ceiling = _search_ceiling(settings, probes)
    if ceiling is None or ceiling < settings.min_rate:
        return "infeasible"  # the pipeline completes (next to its co-runners) too little
    history = _read_history(probes)
    if history.pending is not None:
        request = ProbeRequest("search", history.pending.rate, history.pending.seed + 1, True)
    else:
        rate = _next_rate(settings, ceiling, history)
        if isinstance(rate, str):
            return rate
        request = ProbeRequest("search", rate, settings.base_seed, reprobe=False)
    if len(probes) >= settings.max_probes:
        return "max_probes"
    return request


def monotonicity_violations(probes: Sequence[ProbeRecord]) -> int:
    """Pairs of decided rates out of monotone order: a met rate above a not-met one."""
    outcomes = _read_history(probes).outcomes
    met = [outcome.rate for outcome in outcomes if outcome.met]
    not_met = [outcome.rate for outcome in outcomes if not outcome.met]
    return sum(1 for up in met for down in not_met if up > down)


def result_of(
    settings: SearchSettings, probes: Sequence[ProbeRecord], stop_reason: StopReason
) -> CapacityResult:
    """capacity.json: the certified rate and bracket, the isotonic estimate with its interval,
    the monotonicity violations and flagged re-probes, from the probes so far."""
    history = _read_history(probes)
    certified, lowest_not_met = _bracket(history.outcomes)
    ceiling = _ceiling_probe(probes)
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
        bracket=(certified if certified is not None else 0.0, lowest_not_met),
        probes=list(probes),
        stop_reason=stop_reason,
        ceiling_qps=ceiling.throughput_qps if ceiling is not None else None,
        monotonicity_violations=monotonicity_violations(probes),
        flagged_probes=history.flagged,
        estimate_method=estimate.method,
    )


def _as_recorded(request: ProbeRequest, record: ProbeRecord, index: int) -> ProbeRecord:
    """The executor's record with the controller's bookkeeping: its index, and flagged when a
    re-probe is undecided again."""
    flagged = record.flagged or (request.reprobe and record.verdict == "undecided")
    return record.model_copy(update={"index": index, "flagged": flagged})


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
        record = _as_recorded(request, execute(request), len(history))
        if on_probe is not None:
            on_probe(record)
        history.append(record)
