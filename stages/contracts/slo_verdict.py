"""The SLO verdict rule, one definition for the analysis layer and the capacity search: MLPerf
LoadGen's early-stopping pass rule on counts, its mirror for `missed`, and the early-abort bound.

Follows mlcommons/inference `loadgen/early_stopping.cc` (commit b66003e, read for this port; no
code copied). With confidence c and percentile p, h(t) is the fewest under-latency queries that,
next to t over-latency ones, make P(at most t over-latency in h + t queries | true quantile is
p) < 1 - c. A run of N queries with T over the SLO is `met` when N >= h(T) + T; `missed` when the
one-sided binomial test says the over-SLO share exceeds 1 - p at the same confidence
(P[Bin(N, 1 - p) >= T] < 1 - c); otherwise `undecided`. Standard library only (a leaf contract).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Final, Literal, Protocol

DEFAULT_CONFIDENCE = 0.99  # LoadGen's fixed early-stopping confidence

SloVerdict = Literal["met", "missed", "undecided"]
"""A verdict on a latency percentile target: met, missed, or undecided (too few queries)."""
SLO_VERDICTS: Final[tuple[SloVerdict, ...]] = ("met", "missed", "undecided")


NEGLIGIBLE_LOG_TERM = 50.0
"""A binomial term under e^-50 of the largest one changes no double of their sum: not summed."""


def _overlatency_odds(under: int, over: int, percentile: float) -> float:
    """P(at most `over` of `under + over` queries exceed the true `percentile` quantile):
    the binomial CDF that LoadGen writes as BetaRegularized[p, h, 1 + t]. Summed in log space
    (no overflow at large N) outwards from the largest term, the mode of Bin(N, 1 - p) or
    `over` below it, until the terms (log-concave in k) no longer count."""
    total = under + over
    log_over, log_under = math.log1p(-percentile), math.log(percentile)
    peak = min(over, math.floor((total + 1) * (1 - percentile)))
    top = (
        math.lgamma(total + 1)
        - math.lgamma(peak + 1)
        - math.lgamma(total - peak + 1)
        + peak * log_over
        + (total - peak) * log_under
    )
    terms = [1.0]
    log_term = 0.0  # each term's log relative to the peak's
    for k in range(peak, 0, -1):  # term k-1 = term k * k / (N - k + 1) * p / (1 - p)
        log_term += math.log(k / (total - k + 1)) + log_under - log_over
        if log_term < -NEGLIGIBLE_LOG_TERM:
            break
        terms.append(math.exp(log_term))
    log_term = 0.0
    for k in range(peak + 1, over + 1):  # term k = term k-1 * (N - k + 1) / k * (1 - p) / p
        log_term += math.log((total - k + 1) / k) + log_over - log_under
        if log_term < -NEGLIGIBLE_LOG_TERM:
            break
        terms.append(math.exp(log_term))
    return math.exp(top) * math.fsum(terms)


@cache
def min_passing_queries(overlatency: int, percentile: float, confidence: float) -> int:
    """h(t): the fewest under-latency queries that, next to `overlatency` over-latency ones,
    bound the percentile at `confidence` (LoadGen's MinPassingQueriesFinder)."""
    if overlatency == 0:  # odds = p^h: LoadGen's closed-form starting point
        return math.ceil(math.log(1 - confidence) / math.log(percentile))
    low, high = 1, 2
    while _overlatency_odds(high, overlatency, percentile) >= 1 - confidence:
        low, high = high + 1, high * 2
    while low < high:  # smallest h in [low, high] with odds < 1 - c
        middle = (low + high) // 2
        if _overlatency_odds(middle, overlatency, percentile) < 1 - confidence:
            high = middle
        else:
            low = middle + 1
    return low


def slo_missed_by_counts(
    queries: int, over_slo: int, percentile: float = 0.99, confidence: float = DEFAULT_CONFIDENCE
) -> bool:
    """The mirror of LoadGen's rule: `over_slo` of `queries` is so many that the true share over
    the SLO exceeds 1 - percentile at `confidence` (P[Bin(N, 1 - p) >= T] < 1 - c)."""
    if over_slo <= 0:
        return False
    # P[Bin(N, q) >= T] = 1 - P[Bin(N, q) <= T - 1]; P[at most T-1 over] is the helper above
    # with N - (T - 1) under-latency queries.
    at_most = _overlatency_odds(queries - over_slo + 1, over_slo - 1, percentile)
    return 1.0 - at_most < 1 - confidence


def slo_verdict_by_counts(
    queries: int, over_slo: int, percentile: float = 0.99, confidence: float = DEFAULT_CONFIDENCE
) -> SloVerdict:
    """met (LoadGen's early-stopping rule), missed (its mirror) or undecided, from counts."""
    if queries >= min_passing_queries(over_slo, percentile, confidence) + over_slo:
        return "met"
    if slo_missed_by_counts(queries, over_slo, percentile, confidence):
        return "missed"
    return "undecided"


@cache
def max_passing_over_slo(
    queries: int, percentile: float = 0.99, confidence: float = DEFAULT_CONFIDENCE
) -> int:
    """The most over-SLO queries a run of `queries` may have and still be `met` (-1: none, the
    run is too short to pass even with none over). A probe whose over-SLO count already
    exceeds this for its planned size can no longer pass, so it can stop early."""
    if queries < min_passing_queries(0, percentile, confidence):
        return -1
    low, high = 0, queries  # h(t) + t grows with t: bisect the largest t with h(t) + t <= N
    while low < high:
        middle = (low + high + 1) // 2
        if min_passing_queries(middle, percentile, confidence) + middle <= queries:
            low = middle
        else:
            high = middle - 1
    return low


class SloRule(Protocol):
    """The verdict arithmetic a capacity search decides its probes with (LoadgenSloRule below;
    a test may pass a stand-in)."""

    def verdict(self, queries: int, over_slo: int, percentile: float) -> SloVerdict:
        """met, missed or undecided for `over_slo` of `queries` over the SLO."""
        ...

    def max_passing_over_slo(self, queries: int, percentile: float) -> int:
        """The most over-SLO queries a run of `queries` may have and still be met (-1: none)."""
        ...


@dataclass(frozen=True)
class LoadgenSloRule:
    """The capacity search's SloRule: the verdict and the early-abort bound above, at
    `confidence`."""

    confidence: float = DEFAULT_CONFIDENCE

    def verdict(self, queries: int, over_slo: int, percentile: float) -> SloVerdict:
        """met, missed or undecided for `over_slo` of `queries` over the SLO."""
        return slo_verdict_by_counts(queries, over_slo, percentile, self.confidence)

    def max_passing_over_slo(self, queries: int, percentile: float) -> int:
        """The most over-SLO queries a run of `queries` may have and still be met (-1: none)."""
        return max_passing_over_slo(queries, percentile, self.confidence)
