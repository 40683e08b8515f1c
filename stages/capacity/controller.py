"""STAND-IN (helper "executor"): the search controller's API from COMMON19.md, simply built so
the executor can run end to end before helper "core"'s controller is merged; the merge keeps
core's. Bracket on log rate from half the ceiling, bisect at the geometric midpoint."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stages.capacity.contract import (
    CapacityResult,
    ProbeKind,
    ProbeRecord,
    SearchSettings,
    StopReason,
)


@dataclass(frozen=True)
class ProbeRequest:
    kind: ProbeKind
    rate: float
    seed: int
    reprobe: bool


def _bracket(probes: Sequence[ProbeRecord]) -> tuple[float | None, float | None]:
    """(highest met rate below the lowest not-met one, lowest not-met rate)."""
    search = [p for p in probes if p.kind == "search"]
    not_met = [p.rate for p in search if p.verdict == "missed" or p.flagged]
    hi = min(not_met) if not_met else None
    met = [p.rate for p in search if p.verdict == "met" and (hi is None or p.rate < hi)]
    return (max(met) if met else None), hi


def _reprobe(probes: Sequence[ProbeRecord]) -> ProbeRequest | None:
    """The second try at the last rate when its first probe was undecided."""
    last = probes[-1] if probes else None
    if last is None or last.kind != "search" or last.verdict != "undecided" or last.flagged:
        return None
    if sum(1 for p in probes if p.kind == "search" and p.rate == last.rate) != 1:
        return None
    return ProbeRequest("search", last.rate, last.seed + 1, True)


def next_probe(
    settings: SearchSettings, probes: Sequence[ProbeRecord]
) -> ProbeRequest | StopReason:
    if len(probes) >= settings.max_probes:
        return "max_probes"
    ceilings = [p for p in probes if p.kind == "ceiling"]
    if settings.ray is None and not ceilings:
        return ProbeRequest("ceiling", 0.0, settings.base_seed, False)
    top = 1.0 if settings.ray is not None else (ceilings[0].throughput_qps or math.inf)
    reprobe = _reprobe(probes)
    if reprobe is not None:
        return reprobe
    lo, hi = _bracket(probes)
    if lo is None and hi is None:
        return ProbeRequest("search", max(top / 2, settings.min_rate), settings.base_seed, False)
    if hi is None:
        assert lo is not None
        if lo >= top:
            return "ceiling"
        return ProbeRequest("search", min(lo * 2, top), settings.base_seed, False)
    if lo is None:
        if hi <= settings.min_rate:
            return "infeasible"
        return ProbeRequest("search", max(hi / 2, settings.min_rate), settings.base_seed, False)
    if hi / lo <= 1 + settings.precision:
        return "converged"
    return ProbeRequest("search", math.sqrt(lo * hi), settings.base_seed, False)


def result_of(
    settings: SearchSettings, probes: Sequence[ProbeRecord], stop_reason: StopReason
) -> CapacityResult:
    lo, hi = _bracket(probes)
    ceilings = [p for p in probes if p.kind == "ceiling"]
    return CapacityResult(
        search_id=settings.search_id,
        pipeline=settings.pipeline,
        slo_ms=settings.slo_ms,
        percentile=settings.percentile,
        with_rates=settings.with_rates,
        certified_qps=lo,
        estimate_qps=None,
        estimate_ci95=None,
        bracket=(lo or 0.0, hi),
        probes=list(probes),
        stop_reason=stop_reason,
        ceiling_qps=ceilings[0].throughput_qps if ceilings else None,
        flagged_probes=sum(1 for p in probes if p.flagged),
    )


def run_search(
    settings: SearchSettings,
    execute: Callable[[ProbeRequest], ProbeRecord],
    probes: Sequence[ProbeRecord] = (),
    on_probe: Callable[[ProbeRecord], None] | None = None,
) -> CapacityResult:
    history = list(probes)
    while True:
        request = next_probe(settings, history)
        if isinstance(request, str):
            return result_of(settings, history, request)
        record = execute(request)
        if request.reprobe and record.verdict == "undecided":
            record = record.model_copy(update={"flagged": True})
        history.append(record)
        if on_probe is not None:
            on_probe(record)
