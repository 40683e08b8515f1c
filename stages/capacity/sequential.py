"""Sequential probes: a rate's verdict decided over consecutive probes (stages) at that rate, each
stage run on the next seed, their burst-corrected counts pooled, until the rate is met or can no
longer be met.

Error spending: a rate has at most LOOKS looks (one after each stage); look k judges the pooled
effective counts (queries / d, over-SLO / d per stage, stages.capacity.clustering) by LoadGen's
rule at confidence 1 - LOOK_ALPHAS[k], and sum(LOOK_ALPHAS) = 1 - DEFAULT_CONFIDENCE = 1%. By
the union bound, a rate whose true over-SLO share is at least 1 - p is met at some look with
probability at most 1%: the 99% of a single verdict, whatever the looks' correlation. `missed`
is tested once, on the first stage alone at 99% (LoadGen's mirror, or the backlog rule), so the
bracket's high end keeps its 99% too. A stage stops early once the rate cannot be met even at
its last look (the count rule against the last look's size), which ends the rate as not met.
Stage k's window holds LOOK_GROWTH^(k-1) times the first look's queries in all. Pure functions of
the recorded probes, like the controller, so a resumed search replays its tests."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from stages.capacity.clustering import effective_counts
from stages.contracts.capacity_files import ProbeRecord, SearchSettings
from stages.contracts.slo_verdict import (
    DEFAULT_CONFIDENCE,
    max_passing_over_slo,
    min_passing_queries,
    slo_verdict_by_counts,
)

LOOK_ALPHAS: tuple[float, ...] = (0.005, 0.0025, 0.0025)
"""The error each look spends (sum: 1 - DEFAULT_CONFIDENCE). The first look spends most: it
decides most rates; a later look only rates whose first stage saw a burst."""
LOOKS = len(LOOK_ALPHAS)
LOOK_GROWTH = 2
"""Look k pools LOOK_GROWTH^(k-1) times the first look's queries."""
_RELATIVE_TOLERANCE = 1e-9

assert math.isclose(sum(LOOK_ALPHAS), 1 - DEFAULT_CONFIDENCE)


def look_confidence(look: int) -> float:
    """The confidence of look `look` (1-based)."""
    return 1 - LOOK_ALPHAS[look - 1]


def first_look_queries(percentile: float) -> int:
    """The fewest queries with which the first look can meet `percentile` at all (LoadGen's
    h(0) at the first look's confidence: 549 at p99)."""
    return int(min_passing_queries(0, percentile, look_confidence(1)))


def look_queries(first_queries: int, look: int) -> int:
    """The pooled queries (of the slowest searched pipeline) look `look` is planned to hold."""
    return int(first_queries * LOOK_GROWTH ** (look - 1))


@dataclass(frozen=True)
class RateTest:
    """One rate's sequential test as far as it ran: its stages in order and its outcome (met,
    not met, or None: undecided so far, the next stage due)."""

    rate: float
    stages: tuple[ProbeRecord, ...]
    met: bool | None
    missed: bool = False
    flagged: bool = False


def _same_rate(first: float, second: float) -> bool:
    return math.isclose(first, second, rel_tol=_RELATIVE_TOLERANCE)


def searched_pipelines(settings: SearchSettings) -> tuple[str, ...]:
    """The pipelines whose verdicts decide a probe: a ray's, or the single target."""
    return tuple(settings.ray) if settings.ray is not None else (settings.pipeline,)


def pooled_counts(
    stages: Sequence[ProbeRecord], searched: Sequence[str]
) -> dict[str, tuple[int, int, int, int]]:
    """Per searched pipeline: (raw queries, raw over-SLO, effective queries, effective
    over-SLO) summed over the stages (a record without per-pipeline figures: its totals)."""
    pooled = {name: [0, 0, 0, 0] for name in searched}
    for stage in stages:
        effect = stage.design_effect or 1.0
        for name in searched:
            figure = stage.pipelines.get(name)
            queries, over = (
                (figure.queries, figure.over_slo)
                if figure is not None
                else (stage.queries, stage.over_slo)
            )
            effective = effective_counts(queries, over, effect)
            for position, value in enumerate((queries, over, *effective)):
                pooled[name][position] += value
    return {name: (c[0], c[1], c[2], c[3]) for name, c in pooled.items()}


def pooled_met(stages: Sequence[ProbeRecord], settings: SearchSettings) -> bool:
    """Whether look len(stages) meets the SLO: every searched pipeline's pooled effective
    counts pass LoadGen's rule at that look's confidence."""
    confidence = look_confidence(len(stages))
    counts = pooled_counts(stages, searched_pipelines(settings)).values()
    return all(
        slo_verdict_by_counts(eq, eo, settings.percentile, confidence) == "met"
        for _, _, eq, eo in counts
    )


def _outcome(stages: tuple[ProbeRecord, ...], settings: SearchSettings) -> RateTest:
    """The test after its last stage so far."""
    rate, last = stages[0].rate, stages[-1]
    if len(stages) == 1 and last.verdict == "missed":
        return RateTest(rate, stages, met=False, missed=True)
    if last.verdict is not None and pooled_met(stages, settings):
        return RateTest(rate, stages, met=True)
    if last.verdict is None or last.cannot_pass or last.verdict == "missed":
        return RateTest(rate, stages, met=False)  # failed, or can no longer be met
    if len(stages) >= LOOKS or last.flagged:
        return RateTest(rate, stages, met=False, flagged=True)
    return RateTest(rate, stages, met=None)


def rate_tests(probes: Sequence[ProbeRecord], settings: SearchSettings) -> list[RateTest]:
    """The sequential tests of `probes` (search probes of one phase, in order): consecutive
    probes at one rate are the stages of one test while it is undecided."""
    tests: list[RateTest] = []
    for probe in probes:
        open_test = tests[-1] if tests and tests[-1].met is None else None
        if open_test is not None and _same_rate(open_test.rate, probe.rate):
            tests[-1] = _outcome((*open_test.stages, probe), settings)
        else:
            if open_test is not None:  # abandoned undecided (another rate came next): not met
                tests[-1] = RateTest(open_test.rate, open_test.stages, met=False)
            tests.append(_outcome((probe,), settings))
    return tests


def next_stage_queries(first_queries: int, test: RateTest, settings: SearchSettings) -> int:
    """The measured queries (of the slowest searched pipeline) the next stage of an undecided
    `test` adds to reach its look."""
    look = len(test.stages) + 1
    pooled = pooled_counts(test.stages, searched_pipelines(settings)).values()
    done = min(queries for queries, *_ in pooled)
    return max(look_queries(first_queries, look) - done, 1)


def over_slo_allowance(
    first_queries: int, stages: Sequence[ProbeRecord], planned: int, settings: SearchSettings
) -> int | None:
    """The most over-SLO queries the next stage of a single target's rate (after `stages`;
    `planned`: the queries its window holds) may count before the rate can no longer be met
    at its last look, which holds the last look's queries or all the stages', if more (raw
    counts: shrinking them by a design effect only makes the rule stricter); None for a ray
    (its stages stop by their own planned size)."""
    if settings.ray is not None:
        return None
    ((queries, over, _, _),) = pooled_counts(stages, searched_pipelines(settings)).values()
    last_look = max(look_queries(first_queries, LOOKS), queries + planned)
    confidence = look_confidence(LOOKS)
    return max_passing_over_slo(last_look, settings.percentile, confidence) - over
