"""What a search's ending rests on, in a sentence (CapacityResult.stop_detail): the unloaded
figure behind `infeasible`, the rate and the budget behind `undecidable`, the bracket a `budget`
stop left open. Text only; the controller decides the ending."""

from __future__ import annotations

import math
from collections.abc import Sequence

from stages.capacity import probe_plan
from stages.contracts.capacity_files import ProbeRecord, SearchSettings, StopReason


def stop_detail(
    settings: SearchSettings,
    probes: Sequence[ProbeRecord],
    stop_reason: StopReason,
    bisection: tuple[float | None, float | None],
    unloaded: ProbeRecord | None,
    ceiling_qps: float | None = None,
) -> str | None:
    """The evidence behind `infeasible` and `undecidable` (and what would decide it), and
    what `budget` left open; None for the other endings. `bisection`: the bisection's (highest
    met, lowest not met) rates; `unloaded`: the unloaded probe, if one ran; `ceiling_qps`:
    the most the pipeline completes (the ceiling probe's throughput)."""
    label = f"p{settings.percentile * 100:g}"
    if stop_reason == "infeasible" and unloaded is not None:
        figure = unloaded.pipelines.get(settings.pipeline)
        measured = "-" if unloaded.p99_ms is None else f"{unloaded.p99_ms:.1f} ms"
        served = f"{unloaded.queries} queries" if figure is None else f"{figure.queries} queries"
        return (
            f"the unloaded {label} misses the SLO: one query at a time ({served}), "
            f"{unloaded.over_slo} over {settings.slo_ms:g} ms (p99 {measured}), so no rate "
            "can meet it"
        )
    if stop_reason == "infeasible":
        return "the ceiling probe completed no query: the pipeline serves nothing"
    if stop_reason == "undecidable":
        return _undecidable_detail(settings, bisection[1], unloaded, label, ceiling_qps)
    if stop_reason == "budget":
        low, high = bisection
        return (
            f"the time budget ({(settings.budget_s or 0) / 60:g} min) ran out with the bracket "
            f"[{low:.3g}, {high if high is None else f'{high:.3g}'}] q/s wider than the "
            f"precision; resume with a larger --budget-min to narrow it"
        )
    return None


_UNLOADED_SAYS = {"met": "met the SLO", "missed": "missed it", "undecided": "left it undecided"}


def _undecidable_detail(
    settings: SearchSettings,
    high: float | None,
    unloaded: ProbeRecord | None,
    label: str,
    ceiling_qps: float | None,
) -> str:
    """Nothing certified: down to the lowest rate the budget decides (name it and the budget
    that would decide the next rate down), or the time ran out first (name the time), or the
    budget decides no rate below the ceiling at all. `high`: the lowest rate not met."""
    floor = probe_plan.lowest_decidable_rate(settings)
    feasible = (
        f"; the unloaded probe {_UNLOADED_SAYS[unloaded.verdict]}"
        if unloaded is not None and unloaded.verdict is not None
        else ""
    )
    queries = probe_plan.min_probe_queries(settings)
    if high is None and ceiling_qps is not None and floor >= ceiling_qps:
        wanted = ceiling_qps / 2
        minutes = math.ceil(probe_plan.budget_minutes_for(settings, wanted))
        return (
            f"{label} needs {queries} queries a probe: this time budget decides no rate below "
            f"{floor:.3g} q/s, and the pipeline completes at most {ceiling_qps:.3g} q/s; "
            f"--budget-min {minutes} would probe down to {wanted:.3g} q/s"
        )
    if high is not None and high > floor * (1 + 1e-6):
        budget = (settings.budget_s or 0.0) / 60
        return (
            f"the time budget ({budget:g} min) ran out before any rate was certified; the "
            f"lowest rate not met is {high:.3g} q/s ({queries} queries a probe){feasible}; "
            f"resume with a larger --budget-min"
        )
    lowest = high if high is not None else floor
    wanted = lowest / 2
    return (
        f"nothing met down to {lowest:.3g} q/s, the lowest rate whose {label} this time "
        f"budget decides ({queries} queries a probe){feasible}; "
        f"--budget-min {math.ceil(probe_plan.budget_minutes_for(settings, wanted))} would "
        f"probe down to {wanted:.3g} q/s"
    )
