"""Early-stopping bound of a latency percentile (LoadGen's rule)."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from analysis.early_stopping import early_stopping_percentile


@pytest.mark.parametrize(("queries", "percentile"), [(500, 0.99), (3000, 0.99), (1000, 0.9)])
def test_rank_matches_the_binomial_quantile(queries: int, percentile: float) -> None:
    estimate = early_stopping_percentile(list(range(queries)), percentile, 0.99)
    rank = estimate.order_statistic
    assert rank is not None
    # Smallest k with CDF(k - 1) >= 0.99: k - 1 is scipy's binomial 0.99 quantile.
    assert rank - 1 == stats.binom.ppf(0.99, queries, percentile)
    assert estimate.latency == rank - 1  # the k-th smallest of 0..N-1


def test_too_few_queries_give_no_bound() -> None:
    estimate = early_stopping_percentile([1.0] * 400, 0.99, 0.99)
    assert estimate.latency is None and estimate.order_statistic is None
    assert estimate.queries_needed == 459
    assert early_stopping_percentile([1.0] * 459, 0.99, 0.99).latency == 1.0


def test_bound_covers_the_true_quantile_at_the_stated_confidence() -> None:
    rng = random.Random(5)
    true_p99 = -1_000 * math.log(0.01)  # exponential with mean 1000
    misses = 0
    for _ in range(300):
        sample = [rng.expovariate(1 / 1000) for _ in range(800)]
        estimate = early_stopping_percentile(sample, 0.99, 0.99)
        assert estimate.latency is not None and estimate.sample_percentile is not None
        assert estimate.latency >= estimate.sample_percentile
        misses += estimate.latency < true_p99
    assert misses <= 9  # ~1% expected; 3% leaves room for chance
