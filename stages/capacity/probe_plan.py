"""How long each probe of a search runs, and what the whole search may spend.

LoadGen's own rule for a run: at least a minimum query count and at least a minimum duration.
A search probe at rate r therefore measures max(probe_s, N / r) seconds, N the fewest measured
queries with which LoadGen's early-stopping rule can pass the percentile at all (459 at p99,
90 at p95, 44 at p90) and a margin for the Poisson count. No probe measures longer than a share
of the search's time budget (`max_window_s`), so below N / max_window_s the budget cannot
decide the percentile: the search then ends `undecidable` and names the budget that would.
A ray's window is sized by its slowest pipeline's rate. Pure functions of the settings and the
recorded probes, like the controller, so a resumed search plans exactly as before."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from stages.capacity.sequential import first_look_queries
from stages.contracts.capacity_files import ProbeRecord, SearchSettings

QUERY_MARGIN = 1.1
"""Windows hold this times the minimum count on average: a Poisson count of 505 falls below
459 about 2% of the time (the loadgen's min_queries then extends the window a little)."""
PLANNED_PROBES = 6
"""No probe measures longer than budget / this: the ceiling probe, a bracket and a few
bisections fit in the budget even when every probe is long."""
CEILING_PROBE_MAX_S = 10.0
"""The ceiling probe's window: min(probe_s, this)."""
UNLOADED_MAX_WINDOWS = 10
"""The unloaded probe (one query at a time) runs until it holds the minimum count, at most
this many probe_s (and the per-probe cap)."""
CONFIRMING_FACTOR = 4
"""A confirming probe holds this many times N queries (1836 at p99). On the simulator (200
searches each, 10 s probes) it makes the certified rate overstate the capacity less often than
a second window of N: 0.5% against 3.5% of searches of a 20 ms server at p99 <= 100 ms, at 4.4
against 2.7 minutes (median)."""
DEFAULT_OVERHEAD_S = 5.0
"""A probe's start-up and drain beyond its window, until a probe of this search measured it."""
_TYPICAL_SEARCH_PROBES = 7
"""Probes a search usually runs after the ceiling probe (one or two bracket steps, four or
five bisections at 5%): for the plan printed before it starts."""


def min_probe_queries(settings: SearchSettings) -> int:
    """N: the measured queries a search probe holds at least (settings.min_queries, else the
    fewest with which the first look of a sequential test can pass settings.percentile:
    LoadGen's h(0) at that look's confidence, stages.capacity.sequential)."""
    if settings.min_queries is not None:
        return settings.min_queries
    return first_look_queries(settings.percentile)


def slowest_rate_qps(settings: SearchSettings, rate: float) -> float:
    """The offered rate of the slowest searched pipeline at the searched rate `rate` (for a
    ray, `rate` is the scale s and pipeline i runs at s * ray[i])."""
    if settings.ray is not None:
        return rate * min(settings.ray.values())
    return rate


def max_window_s(settings: SearchSettings) -> float:
    """The longest window one probe may measure: budget / PLANNED_PROBES (never below
    probe_s); unbounded without a budget."""
    if settings.budget_s is None:
        return math.inf
    return max(settings.probe_s, settings.budget_s / PLANNED_PROBES)


def window_s(settings: SearchSettings, rate: float, queries: int | None = None) -> float:
    """The measured window of a search probe at `rate`: probe_s, or long enough for `queries`
    (default N) of the slowest searched pipeline (with QUERY_MARGIN)."""
    wanted = min_probe_queries(settings) if queries is None else queries
    needed_s = QUERY_MARGIN * wanted / slowest_rate_qps(settings, rate)
    return max(settings.probe_s, needed_s)


def confirming_queries(settings: SearchSettings) -> int:
    """The measured queries of the probe that confirms the certified rate: CONFIRMING_FACTOR
    times N, so that the one verdict the answer rests on sees several queue build-ups."""
    return CONFIRMING_FACTOR * min_probe_queries(settings)


def lowest_decidable_rate(settings: SearchSettings) -> float:
    """The lowest searched rate whose window fits in max_window_s (0 without a budget)."""
    cap_s = max_window_s(settings)
    if math.isinf(cap_s):
        return 0.0
    per_unit = slowest_rate_qps(settings, 1.0)
    return QUERY_MARGIN * min_probe_queries(settings) / cap_s / per_unit


def budget_minutes_for(settings: SearchSettings, rate: float) -> float:
    """The --budget-min whose per-probe cap holds a probe at `rate`."""
    return window_s(settings, rate) * PLANNED_PROBES / 60


def spent_s(probes: Sequence[ProbeRecord]) -> float:
    """Wall time the recorded probes took."""
    return sum(probe.duration_s or 0.0 for probe in probes)


def overhead_s(probes: Sequence[ProbeRecord]) -> float:
    """A probe's wall time beyond its window, as this search's probes measured it (median)."""
    extra = [
        probe.duration_s - probe.window_s
        for probe in probes
        if probe.duration_s is not None and probe.window_s is not None and not probe.abort_reason
    ]
    return max(0.0, statistics.median(extra)) if extra else DEFAULT_OVERHEAD_S


def fits_budget(settings: SearchSettings, probes: Sequence[ProbeRecord], window: float) -> bool:
    """Whether a probe of `window` seconds ends within the budget, by what the recorded
    probes took so far."""
    if settings.budget_s is None:
        return True
    return spent_s(probes) + window + overhead_s(probes) <= settings.budget_s


@dataclass(frozen=True)
class SpendingPlan:
    """What a search expects to spend, printed before it starts and after its ceiling probe."""

    probes: int
    minutes: float
    window_s: float
    min_queries: int

    def line(self, settings: SearchSettings) -> str:
        budget = (
            "no budget"
            if settings.budget_s is None
            else f"budget {settings.budget_s / 60:g} min (probes of at most "
            f"{max_window_s(settings):.0f} s)"
        )
        floor = lowest_decidable_rate(settings)
        below = f", undecidable below {floor:.3g} q/s" if floor > 0 else ""
        return (
            f"plan: about {self.probes} probes, about {self.minutes:.1f} min; "
            f"p{settings.percentile * 100:g} needs >= {self.min_queries} queries a probe "
            f"(windows of {self.window_s:.0f} s near the start rate){below}; {budget}"
        )


def search_plan(settings: SearchSettings, probes: Sequence[ProbeRecord]) -> SpendingPlan:
    """The expected probes and minutes: from the ceiling probe's throughput once it ran (the
    search starts at half of it and mostly probes within a factor of two), else from probe_s."""
    ceiling = next((p.throughput_qps for p in probes if p.kind == "ceiling"), None)
    start_rate = 0.5 * ceiling if ceiling else None
    window = window_s(settings, start_rate) if start_rate else settings.probe_s
    window = min(window, max_window_s(settings))
    count = min(settings.max_probes, 1 + _TYPICAL_SEARCH_PROBES)
    ceiling_s = min(settings.probe_s, CEILING_PROBE_MAX_S)
    seconds = ceiling_s + (count - 1) * window + count * overhead_s(probes)
    if settings.budget_s is not None:
        seconds = min(seconds, settings.budget_s)
    return SpendingPlan(count, seconds / 60, window, min_probe_queries(settings))
