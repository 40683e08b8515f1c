"""The search's second phase: the certified rate confirmed on a longer window.

The bisection (controller) decides each rate on windows of the minimum count, where a rate a
little above capacity often holds no over-SLO burst at all and passes. So before a search stops
`converged` or `ceiling`, a confirming probe runs at the rate it found, on the next seed, with
probe_plan.confirming_queries measured queries; not met there (undecided counts as not met: a
longer window would only cost more), the next confirming probe runs CONFIRM_STEP lower, until one
is met. The certified rate is then the highest rate a confirming probe met. The phases share
nothing else: the bisection ignores confirming probes, so resuming replays both."""

from __future__ import annotations

import math
from collections.abc import Sequence

from stages.contracts.capacity_files import ProbeRecord

CONFIRM_STEP = 0.9
"""A confirming probe that is not met sends the next one this factor lower."""


def confirming_probes(probes: Sequence[ProbeRecord]) -> list[ProbeRecord]:
    return [probe for probe in probes if probe.kind == "search" and probe.confirming]


def _lowest_not_met(confirming: Sequence[ProbeRecord]) -> float:
    return min((p.rate for p in confirming if p.verdict != "met"), default=math.inf)


def confirmed_rate(probes: Sequence[ProbeRecord]) -> float | None:
    """The highest rate a confirming probe met below the lowest one not met; None: none met."""
    confirming = confirming_probes(probes)
    ceiling = _lowest_not_met(confirming)
    met = [p.rate for p in confirming if p.verdict == "met" and p.rate < ceiling]
    return max(met) if met else None


def next_confirming_rate(probes: Sequence[ProbeRecord], found: float) -> float:
    """Where to confirm next: the rate the bisection found, or CONFIRM_STEP below the lowest
    rate a confirming probe did not meet."""
    lowest = _lowest_not_met(confirming_probes(probes))
    return min(found, lowest * CONFIRM_STEP)


def certified_rate(probes: Sequence[ProbeRecord], found: float | None) -> float | None:
    """The certified rate: the confirmed one; before any confirmation the bisection's (`found`);
    after confirmations that all failed, the highest bisection rate below the next confirming
    candidate (None when there is none)."""
    confirmed = confirmed_rate(probes)
    if confirmed is not None or found is None:
        return confirmed
    confirming = confirming_probes(probes)
    if not confirming:
        return found
    candidate = next_confirming_rate(probes, found)
    met = [
        p.rate
        for p in probes
        if p.kind == "search" and not p.confirming and p.verdict == "met" and p.rate <= candidate
    ]
    return max(met) if met else None
