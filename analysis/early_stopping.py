"""LoadGen-style early stopping: an honest upper bound on a latency percentile from a short run.

With N latencies, the k-th smallest is an upper bound on the true p-quantile at confidence c
when P(Binomial(N, p) <= k - 1) >= c (at least k of N draws must fall above the quantile for the
bound to fail). We report the smallest such order statistic, so a short run reports a higher,
honest figure instead of a lucky sample percentile; with too few queries there is no bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EarlyStoppingEstimate:
    percentile: float  # e.g. 0.99
    confidence: float  # e.g. 0.99
    queries: int
    order_statistic: int | None  # 1-based rank of the reported latency; None: too few queries
    latency: float | None  # the bound, in the unit of the input
    sample_percentile: float | None  # the plain percentile of the sample, for comparison

    @property
    def queries_needed(self) -> int:
        """Fewest queries for which any bound exists: the maximum then bounds the quantile."""
        return math.ceil(math.log(1 - self.confidence) / math.log(self.percentile))


def _binomial_cdf_rank(queries: int, percentile: float, confidence: float) -> int | None:
    """Smallest k (1-based) with P(Bin(queries, percentile) <= k - 1) >= confidence."""
    if queries == 0:
        return None
    log_p, log_q = math.log(percentile), math.log1p(-percentile)
    cumulative = 0.0
    log_choose = 0.0  # log C(queries, successes), updated incrementally
    for successes in range(queries + 1):
        if successes > 0:
            log_choose += math.log(queries - successes + 1) - math.log(successes)
        cumulative += math.exp(log_choose + successes * log_p + (queries - successes) * log_q)
        if cumulative >= confidence:
            rank = successes + 1
            return rank if rank <= queries else None
    return None


def early_stopping_percentile(
    latencies: Sequence[float], percentile: float = 0.99, confidence: float = 0.99
) -> EarlyStoppingEstimate:
    """The early-stopping bound of `percentile` over `latencies` (warm-up already excluded)."""
    if not 0 < percentile < 1 or not 0 < confidence < 1:
        raise ValueError("percentile and confidence must lie strictly between 0 and 1")
    ordered = sorted(latencies)
    count = len(ordered)
    rank = _binomial_cdf_rank(count, percentile, confidence)
    sample = ordered[min(count - 1, math.ceil(percentile * count) - 1)] if count else None
    return EarlyStoppingEstimate(
        percentile=percentile,
        confidence=confidence,
        queries=count,
        order_statistic=rank,
        latency=ordered[rank - 1] if rank is not None else None,
        sample_percentile=sample,
    )
