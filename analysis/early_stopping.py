"""MLPerf LoadGen's early stopping, exactly: an honest upper bound on a latency percentile from a
short run, and LoadGen's pass/fail rule for a latency target.

Follows mlcommons/inference `loadgen/early_stopping.cc` and `PerformanceSummary::EarlyStopping`
in `loadgen/results.cc` (commit b66003e, read for this port; no code copied). With confidence c
and percentile p, h(t) is the fewest under-latency queries that, next to t over-latency ones,
make P(at most t over-latency in h + t queries | true quantile is p) < 1 - c.
- Estimate (SingleStream/MultiStream rule): needs N >= h(1) + 1 queries (662 for p99 at 99%);
  t* = the largest t with h(t) + t <= N; the estimate is sorted(latencies)[N - t*].
- SLO verdict (Server rule): with T queries over the target, the run passes when N >= h(T) + T.
Every measured query counts: one that did not complete ok is passed in as +inf (over-latency).

The verdict is three-valued (`slo_verdict`): `met` by LoadGen's rule above; `missed` by its
mirror, the one-sided binomial test that the over-SLO share exceeds 1 - p at the same
confidence (P[Bin(N, 1 - p) >= T] < 1 - c); otherwise `undecided` (too few queries to tell).
The two tests cannot both pass: one bounds the share below 1 - p, the other above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final, Literal

import numpy as np

DEFAULT_CONFIDENCE = 0.99  # LoadGen's fixed early-stopping confidence

SloVerdict = Literal["met", "missed", "undecided"]
SLO_VERDICTS: Final[tuple[SloVerdict, ...]] = ("met", "missed", "undecided")


@dataclass(frozen=True)
class EarlyStoppingEstimate:
    """LoadGen's early-stopping estimate of one percentile over one set of queries."""

    percentile: float  # e.g. 0.99
    confidence: float  # e.g. 0.99
    queries: int  # every measured query, failures included
    queries_needed: int  # h(1) + 1: fewest queries for which an estimate exists
    overlatency_allowed: int | None  # t*: the estimate is the t*-th largest latency
    latency: float | None  # the estimate, in the unit of the input; None: too few queries


def _overlatency_odds(under: int, over: int, percentile: float) -> float:
    """P(at most `over` of `under + over` queries exceed the true `percentile` quantile):
    the binomial CDF that LoadGen writes as BetaRegularized[p, h, 1 + t]."""
    total = under + over
    k = np.arange(1, over + 1, dtype=np.float64)
    # log C(total, k) built incrementally, then every term in log space (no overflow at large N).
    log_choose = np.concatenate(([0.0], np.cumsum(np.log((total - k + 1) / k))))
    ks = np.arange(over + 1, dtype=np.float64)
    log_terms = log_choose + ks * math.log1p(-percentile) + (total - ks) * math.log(percentile)
    top = float(log_terms.max())
    return math.exp(top) * float(np.exp(log_terms - top).sum())


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


def early_stopping_percentile(
    latencies: Sequence[float], percentile: float = 0.99, confidence: float = DEFAULT_CONFIDENCE
) -> EarlyStoppingEstimate:
    """LoadGen's early-stopping estimate of `percentile` over every measured query's latency
    (warm-up excluded; failures as +inf)."""
    if not 0 < percentile < 1 or not 0 < confidence < 1:
        raise ValueError("percentile and confidence must lie strictly between 0 and 1")
    count = len(latencies)
    needed = min_passing_queries(1, percentile, confidence) + 1
    if count < needed:
        return EarlyStoppingEstimate(percentile, confidence, count, needed, None, None)
    # h(t) + t grows with t, so t* = max{t : h(t) + t <= N} by bisection (LoadGen scans t).
    low, high = 1, count
    while low < high:
        middle = (low + high + 1) // 2
        if min_passing_queries(middle, percentile, confidence) + middle <= count:
            low = middle
        else:
            high = middle - 1
    ordered = np.sort(np.asarray(latencies, dtype=np.float64))
    return EarlyStoppingEstimate(
        percentile, confidence, count, needed, low, float(ordered[count - low])
    )


def slo_met(
    latencies: Sequence[float],
    slo: float,
    percentile: float = 0.99,
    confidence: float = DEFAULT_CONFIDENCE,
) -> bool:
    """LoadGen's Server verdict: with T latencies over `slo` (failures, +inf, among them), the
    percentile target is met at `confidence` when N >= h(T) + T."""
    over = int(np.count_nonzero(np.asarray(latencies, dtype=np.float64) > slo))
    return len(latencies) >= min_passing_queries(over, percentile, confidence) + over


def over_slo_count(latencies: Sequence[float], slo: float) -> int:
    """T: the measured queries over `slo` (failures, passed in as +inf, among them)."""
    return int(np.count_nonzero(np.asarray(latencies, dtype=np.float64) > slo))


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


def slo_verdict(
    latencies: Sequence[float],
    slo: float,
    percentile: float = 0.99,
    confidence: float = DEFAULT_CONFIDENCE,
) -> SloVerdict:
    """The three-valued verdict of every measured query's latency (failures as +inf)."""
    over = over_slo_count(latencies, slo)
    return slo_verdict_by_counts(len(latencies), over, percentile, confidence)


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


@dataclass(frozen=True)
class LoadgenSloRule:
    """The capacity search's SloRule (stages.capacity.contract), injected by the composition
    root: the verdict and the early-abort bound above, at `confidence`."""

    confidence: float = DEFAULT_CONFIDENCE

    def verdict(self, queries: int, over_slo: int, percentile: float) -> SloVerdict:
        """met, missed or undecided for `over_slo` of `queries` over the SLO."""
        return slo_verdict_by_counts(queries, over_slo, percentile, self.confidence)

    def max_passing_over_slo(self, queries: int, percentile: float) -> int:
        """The most over-SLO queries a run of `queries` may have and still be met (-1: none)."""
        return max_passing_over_slo(queries, percentile, self.confidence)
