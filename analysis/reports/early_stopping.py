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

The verdict on counts (met, missed by the mirror test, undecided), h(t) and the early-abort
bound are stages.contracts.slo_verdict, shared with the capacity search; here they are applied
to latencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stages.contracts.slo_verdict import (
    DEFAULT_CONFIDENCE,
    SloVerdict,
    max_passing_over_slo,
    min_passing_queries,
    slo_verdict_by_counts,
)


@dataclass(frozen=True)
class EarlyStoppingEstimate:
    """LoadGen's early-stopping estimate of one percentile over one set of queries."""

    percentile: float  # e.g. 0.99
    confidence: float  # e.g. 0.99
    queries: int  # every measured query, failures included
    queries_needed: int  # h(1) + 1: fewest queries for which an estimate exists
    overlatency_allowed: int | None  # t*: the estimate is the t*-th largest latency
    latency: float | None  # the estimate, in the unit of the input; None: too few queries


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
    # t* = max{t : h(t) + t <= N} (at least 1 here, as N >= h(1) + 1), the rule's own bisection.
    overs = max_passing_over_slo(count, percentile, confidence)
    ordered = np.sort(np.asarray(latencies, dtype=np.float64))
    return EarlyStoppingEstimate(
        percentile, confidence, count, needed, overs, float(ordered[count - overs])
    )


def slo_met(
    latencies: Sequence[float],
    slo: float,
    percentile: float = 0.99,
    confidence: float = DEFAULT_CONFIDENCE,
) -> bool:
    """LoadGen's Server verdict: with T latencies over `slo` (failures, +inf, among them), the
    percentile target is met at `confidence` when N >= h(T) + T."""
    over = over_slo_count(latencies, slo)
    return len(latencies) >= min_passing_queries(over, percentile, confidence) + over


def over_slo_count(latencies: Sequence[float], slo: float) -> int:
    """T: the measured queries over `slo` (failures, passed in as +inf, among them)."""
    return int(np.count_nonzero(np.asarray(latencies, dtype=np.float64) > slo))


def slo_verdict(
    latencies: Sequence[float],
    slo: float,
    percentile: float = 0.99,
    confidence: float = DEFAULT_CONFIDENCE,
) -> SloVerdict:
    """The three-valued verdict of every measured query's latency (failures as +inf)."""
    over = over_slo_count(latencies, slo)
    return slo_verdict_by_counts(len(latencies), over, percentile, confidence)
