"""How clustered a probe's over-SLO queries are, and the counts its verdict uses because of it.

Near capacity over-SLO queries come in bursts (one queue build-up delays many queries in a row),
so the over-SLO count of a probe varies far more than the binomial that LoadGen's rule assumes:
a 30 s probe at the true capacity passes that rule about a third of the time. The design effect
d (variance of a compound count over the binomial's: sum of squared burst sizes / sum of sizes)
shrinks the probe to queries / d independent queries with over_slo / d over the SLO, and the
rule is applied to those.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

BURST_MERGE_GAP = 20
"""Over-SLO runs separated by at most this many queries within the SLO are one burst."""


def burst_sizes(
    over_slo: Sequence[bool] | np.ndarray, merge_gap: int = BURST_MERGE_GAP
) -> np.ndarray:
    """The over-SLO count of each burst: runs of over-SLO queries (in scheduled order) merged
    across gaps of at most `merge_gap` queries within the SLO."""
    positions = np.flatnonzero(np.asarray(over_slo, dtype=bool))
    if positions.size == 0:
        return np.zeros(0, dtype=np.int64)
    breaks = np.flatnonzero(np.diff(positions) > merge_gap + 1)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [positions.size - 1]))
    return ends - starts + 1


def design_effect(over_slo: Sequence[bool] | np.ndarray, merge_gap: int = BURST_MERGE_GAP) -> float:
    """The over-SLO count's variance inflation from its bursts (>= 1; 1 with none over)."""
    sizes = burst_sizes(over_slo, merge_gap).astype(np.float64)
    if sizes.size == 0:
        return 1.0
    return max(1.0, float((sizes**2).sum() / sizes.sum()))


def effective_counts(queries: int, over_slo: int, effect: float) -> tuple[int, int]:
    """(queries, over_slo) as independent queries: queries / d rounded down, over_slo / d up."""
    if effect <= 1.0:
        return queries, over_slo
    return int(queries / effect), math.ceil(over_slo / effect)
