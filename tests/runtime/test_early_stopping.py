"""Early stopping is MLPerf LoadGen's, exactly (analysis/reports/early_stopping.py).

Reference values: mlcommons/inference commit b66003e10e2d, loadgen/early_stopping.cc compiled
with g++ 17 -O2 next to a driver that repeats the loops of PerformanceSummary::EarlyStopping in
loadgen/results.cc (SingleStream/MultiStream: h_min + 1, then t; Server: h(t) from a fresh
MinPassingQueriesFinder), confidence 0.99, tolerance 0. LoadGen's code is not in this repo."""

from __future__ import annotations

import math
import random

import pytest

from analysis.reports.early_stopping import early_stopping_percentile, slo_met
from stages.contracts.slo_verdict import min_passing_queries

# (percentile, queries N, LoadGen's minimum h_min + 1, t: the estimate is sorted[N - t]; 0: none)
ESTIMATES = [
    (0.5, 10, 11, 0), (0.5, 100, 11, 37), (0.5, 459, 11, 204), (0.5, 1234, 11, 575),
    (0.5, 10000, 11, 4883), (0.9, 10, 64, 0), (0.9, 100, 64, 3), (0.9, 661, 64, 48),
    (0.9, 1000, 64, 78), (0.9, 5000, 64, 450), (0.9, 27000, 64, 2585), (0.99, 459, 662, 0),
    (0.99, 661, 662, 0), (0.99, 662, 662, 1), (0.99, 1000, 662, 2), (0.99, 1234, 662, 4),
    (0.99, 2000, 662, 9), (0.99, 5000, 662, 33), (0.99, 10000, 662, 77),
    (0.99, 27000, 662, 232), (0.99, 100000, 662, 927), (0.999, 5000, 6636, 0),
    (0.999, 10000, 6636, 2), (0.999, 27000, 6636, 15), (0.999, 100000, 6636, 77),
]  # fmt: skip
# (percentile, over-latency queries t, h(t): fewest passing queries next to them)
MIN_PASSING = [
    (0.5, 0, 7), (0.5, 1, 10), (0.5, 5, 17), (0.5, 100, 137), (0.5, 1000, 1108),
    (0.9, 0, 44), (0.9, 1, 63), (0.9, 10, 187), (0.9, 1000, 9722), (0.99, 0, 459),
    (0.99, 1, 661), (0.99, 2, 836), (0.99, 3, 998), (0.99, 10, 2000), (0.99, 50, 6848),
    (0.99, 100, 12471), (0.99, 1000, 106569), (0.999, 0, 4603), (0.999, 1, 6635),
    (0.999, 100, 125726),
]  # fmt: skip


@pytest.mark.parametrize(("percentile", "queries", "needed", "t"), ESTIMATES)
def test_estimate_matches_loadgen(percentile: float, queries: int, needed: int, t: int) -> None:
    latencies = [float(value) for value in range(queries)]
    random.Random(queries).shuffle(latencies)
    estimate = early_stopping_percentile(latencies, percentile, 0.99)
    assert estimate.queries_needed == needed
    assert estimate.queries == queries
    if t == 0:
        assert estimate.latency is None and estimate.overlatency_allowed is None
    else:
        assert estimate.overlatency_allowed == t
        assert estimate.latency == float(queries - t)  # sorted[N - t] of 0..N-1


@pytest.mark.parametrize(("percentile", "over", "passing"), MIN_PASSING)
def test_min_passing_queries_match_loadgen(percentile: float, over: int, passing: int) -> None:
    assert min_passing_queries(over, percentile, 0.99) == passing


def test_p99_needs_662_queries_not_459() -> None:
    """The finding: a bound from 459 queries where LoadGen needs 662 for p99."""
    assert early_stopping_percentile([1.0] * 661).latency is None
    assert early_stopping_percentile([1.0] * 662).latency == 1.0


def test_failures_count_as_over_latency() -> None:
    """1000 queries of which 3 failed (+inf): t = 2 for N = 1000, so the estimate is the 2nd
    largest, a failure; with one failure it is the largest finite latency."""
    three = [1.0] * 997 + [math.inf] * 3
    assert early_stopping_percentile(three).latency == math.inf
    one = [float(i) for i in range(999)] + [math.inf]
    assert early_stopping_percentile(one).latency == 998.0


def test_server_slo_verdict_is_loadgens_rule() -> None:
    """Server: T queries over the target pass when N >= h(T) + T (h(0) = 459, h(2) = 836)."""
    assert slo_met([1.0] * 459, slo=5.0)
    assert not slo_met([1.0] * 458, slo=5.0)
    assert slo_met([1.0] * 836 + [9.0, math.inf], slo=5.0)
    assert not slo_met([1.0] * 835 + [9.0, math.inf], slo=5.0)


def test_bound_covers_the_true_quantile_at_the_stated_confidence() -> None:
    rng = random.Random(5)
    true_p99 = -1_000 * math.log(0.01)  # exponential with mean 1000
    misses = 0
    for _ in range(300):
        sample = [rng.expovariate(1 / 1000) for _ in range(800)]
        estimate = early_stopping_percentile(sample, 0.99, 0.99)
        assert estimate.latency is not None
        assert estimate.latency >= sorted(sample)[math.floor(0.99 * 800)]
        misses += estimate.latency < true_p99
    assert misses <= 9  # ~1% expected; 3% leaves room for chance
