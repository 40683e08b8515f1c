"""The change between two arms from their per-block log differences d_k = ln B - ln A: the
Hodges-Lehmann estimate with the Wilcoxon signed-rank interval and p-value (Pinpoint pairwise's
math), and the paired-t interval on mean d shown beside it.

The signed-rank statistic of d - theta is the number of Walsh averages (d_i + d_j) / 2, i <= j,
above theta, so the interval is a pair of Walsh averages' order statistics: exactly the thetas the
test does not reject. Null distribution: exact (the signed-rank counts) for at most
`EXACT_MAX_BLOCKS` blocks without ties or zeros, as `scipy.stats.wilcoxon`'s "auto" does;
otherwise the normal approximation without continuity correction, with the tie correction of the
variance, and zeros kept in the ranking and split half to each sign ("zsplit"). zsplit is the
zero rule whose p-value is the one the interval inverts: at theta = 0 the statistic lies between
its values just below and just above 0, with the same variance, so "the interval excludes 0" and
"p < 1 - confidence" agree. Between Walsh averages the ties of d - theta are those of equal d
values, so the interval's variance counts those; the p-value at 0 counts equal |d|.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from scipy.stats import norm
from scipy.stats import t as student_t

from stages.contracts.errors import InvalidInputError

EXACT_MAX_BLOCKS = 50
"""Up to this many blocks (no ties, no zeros) the signed-rank null is exact (scipy's cut too)."""
MIN_BLOCKS = 2
"""Fewer blocks have no spread: no interval, no test."""

SignedRankMethod = Literal["exact", "normal"]
"""How the signed-rank null distribution was taken: its exact counts, or the normal
approximation with tie and zero (zsplit) corrections."""

FloatArray = NDArray[np.float64]
LogDiffs = Sequence[float] | FloatArray
"""Block differences d_k = ln B - ln A: a list or a float array."""


class FewBlocksError(InvalidInputError, ValueError):
    """Too few block differences for an interval (fewer than `MIN_BLOCKS`, or not finite): the
    session needs more blocks, not a rerun of the same ones."""


def log_to_pct(log_change: float) -> float:
    """A log ratio as a % change: (exp(x) - 1) * 100; -inf and inf map to -100 and inf."""
    return math.expm1(log_change) * 100.0


def pct_to_log(change_pct: float) -> float:
    """A % change as a log ratio: ln(1 + p / 100); the inverse of `log_to_pct`."""
    return math.log1p(change_pct / 100.0)


class SignedRankResult(BaseModel):
    """The Hodges-Lehmann change of B over A with its Wilcoxon signed-rank interval and the
    signed-rank test of 'no change' (median d = 0, two-sided)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    blocks: int = Field(description="How many block differences d_k went in.")
    estimate_log: float = Field(description="Hodges-Lehmann estimate of d: the Walsh median.")
    change_pct: float = Field(description="exp(estimate_log) - 1, in %.")
    confidence: float = Field(description="The interval's nominal confidence, e.g. 0.95.")
    achieved_confidence: float = Field(
        description="The interval's actual confidence: the exact null is discrete, so at least "
        "`confidence`; equal to it under the normal approximation."
    )
    ci_log: tuple[float, float] = Field(
        description="The interval on d (low, high); infinite ends where too few blocks bound it."
    )
    change_ci_pct: tuple[float, float] = Field(description="ci_log as % changes (low, high).")
    statistic: float = Field(
        description="The signed-rank statistic of d: sum of the positive ranks (zeros split)."
    )
    p_value: float = Field(description="Two-sided signed-rank p-value of median d = 0.")
    method: SignedRankMethod = Field(description="Null distribution: exact counts or normal.")


class PairedTResult(BaseModel):
    """The paired-t interval on mean d, shown beside the signed-rank one (equal under normal d,
    the signed-rank one steadier under heavy tails)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    blocks: int = Field(description="How many block differences d_k went in.")
    mean_log: float = Field(description="Mean of d.")
    sd_log: float = Field(description="Sample standard deviation of d (ddof 1).")
    change_pct: float = Field(description="exp(mean_log) - 1, in %.")
    confidence: float = Field(description="The interval's confidence, e.g. 0.95.")
    ci_log: tuple[float, float] = Field(description="mean d -+ t(n-1) * sd / sqrt(n).")
    change_ci_pct: tuple[float, float] = Field(description="ci_log as % changes (low, high).")
    p_value: float = Field(description="Two-sided paired-t p-value of mean d = 0.")
    method: Literal["paired-t"] = Field(default="paired-t", description="Always paired-t.")


def _as_diffs(log_diffs: LogDiffs) -> FloatArray:
    """The differences as a float array, refused with a reason when too few or not finite."""
    diffs = np.asarray(log_diffs, dtype=np.float64)
    if diffs.ndim != 1 or diffs.size < MIN_BLOCKS:
        raise FewBlocksError(f"need at least {MIN_BLOCKS} block differences, got {diffs.size}")
    if not np.all(np.isfinite(diffs)):
        raise FewBlocksError("block differences must be finite (a zero or missing figure?)")
    return diffs


def walsh_averages(log_diffs: LogDiffs) -> FloatArray:
    """All n(n+1)/2 Walsh averages (d_i + d_j) / 2, i <= j, sorted ascending."""
    diffs = np.asarray(log_diffs, dtype=np.float64)
    upper_i, upper_j = np.triu_indices(diffs.size)
    return np.sort((diffs[upper_i] + diffs[upper_j]) / 2.0)


def hodges_lehmann(log_diffs: LogDiffs) -> float:
    """The Hodges-Lehmann estimate of the centre of d: the median of its Walsh averages."""
    return float(np.median(walsh_averages(_as_diffs(log_diffs))))


def signed_rank_null_counts(blocks: int) -> NDArray[np.int64]:
    """counts[t] = how many of the 2^n sign patterns give signed-rank statistic t (no ties):
    the subsets of {1..n} summing to t. Exact in int64 up to n = 62."""
    counts = np.zeros(blocks * (blocks + 1) // 2 + 1, dtype=np.int64)
    counts[0] = 1
    for rank in range(1, blocks + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return counts


def _null_cdf(blocks: int) -> FloatArray:
    """P(T <= t) under the exact signed-rank null with `blocks` untied, nonzero differences."""
    counts = signed_rank_null_counts(blocks)
    return np.cumsum(counts).astype(np.float64) / float(2**blocks)


def _ranks_and_ties(values: FloatArray) -> tuple[FloatArray, float]:
    """Midranks of `values` and the tie term sum(t^3 - t) over its groups of equal values."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(values.size, dtype=np.float64)
    _, first, sizes = np.unique(values[order], return_index=True, return_counts=True)
    for start, size in zip(first, sizes, strict=True):
        ranks[order[start : start + size]] = start + (size + 1) / 2.0
    return ranks, float(np.sum(sizes.astype(np.float64) ** 3 - sizes))


def _normal_sd(blocks: int, tie_term: float) -> float:
    """The signed-rank statistic's null sd with n blocks, tie-corrected: sqrt(n(n+1)(2n+1)/24
    - sum(t^3 - t)/48)."""
    return math.sqrt(blocks * (blocks + 1) * (2 * blocks + 1) / 24.0 - tie_term / 48.0)


def _has_ties_or_zeros(diffs: FloatArray) -> bool:
    magnitudes = np.abs(diffs)
    return bool(np.any(magnitudes == 0.0) or np.unique(magnitudes).size < magnitudes.size)


def signed_rank_method(log_diffs: LogDiffs) -> SignedRankMethod:
    """`exact` for at most EXACT_MAX_BLOCKS differences with no ties in |d| and no zeros,
    `normal` otherwise (scipy.stats.wilcoxon's "auto", minus its permutation test for ties)."""
    diffs = _as_diffs(log_diffs)
    if diffs.size <= EXACT_MAX_BLOCKS and not _has_ties_or_zeros(diffs):
        return "exact"
    return "normal"


def signed_rank_test(log_diffs: LogDiffs) -> tuple[float, float, SignedRankMethod]:
    """The signed-rank statistic T+ of d (zeros split), its two-sided p-value for median 0,
    and the null used. Agrees with scipy.stats.wilcoxon(d, method="exact") and with
    wilcoxon(d, zero_method="zsplit", correction=False, method="asymptotic")."""
    diffs = _as_diffs(log_diffs)
    method = signed_rank_method(diffs)
    ranks, tie_term = _ranks_and_ties(np.abs(diffs))
    statistic = float(np.sum(ranks[diffs > 0]) + np.sum(ranks[diffs == 0]) / 2.0)
    blocks = diffs.size
    if method == "exact":
        cdf = _null_cdf(blocks)
        total = blocks * (blocks + 1) // 2
        rank_sum = round(statistic)
        lower_tail = cdf[rank_sum]
        upper_tail = cdf[total - rank_sum]  # P(T >= t) = P(T <= M - t): the null is symmetric
        return statistic, min(1.0, 2.0 * float(min(lower_tail, upper_tail))), method
    z = (statistic - blocks * (blocks + 1) / 4.0) / _normal_sd(blocks, tie_term)
    return statistic, float(2.0 * norm.sf(abs(z))), method


def _exact_interval_rank(blocks: int, confidence: float) -> tuple[int, float]:
    """c, the largest t with P(T <= t) <= (1 - confidence) / 2 (-1 if none), and the
    interval's achieved confidence 1 - 2 P(T <= c)."""
    cdf = _null_cdf(blocks)
    inside = np.flatnonzero(cdf <= (1.0 - confidence) / 2.0)
    if inside.size == 0:
        return -1, 1.0
    rank = int(inside[-1])
    return rank, 1.0 - 2.0 * float(cdf[rank])


def signed_rank_interval(
    log_diffs: LogDiffs, confidence: float = 0.95
) -> tuple[tuple[float, float], float, SignedRankMethod]:
    """The Wilcoxon signed-rank interval on d at `confidence`: the Walsh averages W_(c+1) and
    W_(M-c) (M of them, ascending), the thetas whose test of d - theta is not rejected. Returns
    (low, high), the achieved confidence and the null used; an end no Walsh average bounds is
    infinite (too few blocks for this confidence)."""
    diffs = _as_diffs(log_diffs)
    _check_confidence(confidence)
    method = signed_rank_method(diffs)
    walsh = walsh_averages(diffs)
    total = walsh.size
    if method == "exact":
        rank, achieved = _exact_interval_rank(diffs.size, confidence)
        # theta in (W_(j), W_(j+1)) is kept iff c + 1 <= j <= M - c - 1
        first_kept, achieved_confidence = rank + 1, achieved
    else:
        _, tie_term = _ranks_and_ties(diffs)  # between Walsh averages: ties of equal d only
        half_width = float(norm.ppf(0.5 + confidence / 2.0)) * _normal_sd(diffs.size, tie_term)
        # kept iff |M/2 - j| <= z * sd, the smallest such j
        first_kept, achieved_confidence = math.ceil(total / 2.0 - half_width), confidence
    if first_kept < 1:
        return (-math.inf, math.inf), achieved_confidence, method
    low, high = float(walsh[first_kept - 1]), float(walsh[total - first_kept])
    return (low, high), achieved_confidence, method


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def _pct_pair(pair: tuple[float, float]) -> tuple[float, float]:
    return log_to_pct(pair[0]), log_to_pct(pair[1])


def signed_rank_summary(log_diffs: LogDiffs, confidence: float = 0.95) -> SignedRankResult:
    """The Hodges-Lehmann change with its signed-rank interval at `confidence` and the
    signed-rank p-value of no change, as one result."""
    diffs = _as_diffs(log_diffs)
    interval, achieved, method = signed_rank_interval(diffs, confidence)
    statistic, p_value, _ = signed_rank_test(diffs)
    estimate = hodges_lehmann(diffs)
    return SignedRankResult(
        blocks=diffs.size,
        estimate_log=estimate,
        change_pct=log_to_pct(estimate),
        confidence=confidence,
        achieved_confidence=achieved,
        ci_log=interval,
        change_ci_pct=_pct_pair(interval),
        statistic=statistic,
        p_value=p_value,
        method=method,
    )


def paired_t_summary(log_diffs: LogDiffs, confidence: float = 0.95) -> PairedTResult:
    """The paired-t interval on mean d at `confidence`, and its p-value of mean 0 (all-equal
    d: a zero-width interval, p 1 at mean 0 and 0 otherwise)."""
    diffs = _as_diffs(log_diffs)
    _check_confidence(confidence)
    mean, sd = float(np.mean(diffs)), float(np.std(diffs, ddof=1))
    standard_error = sd / math.sqrt(diffs.size)
    degrees = diffs.size - 1
    half = float(student_t.ppf(0.5 + confidence / 2.0, degrees)) * standard_error
    if standard_error > 0.0:
        p_value = float(2.0 * student_t.sf(abs(mean) / standard_error, degrees))
    else:
        p_value = 1.0 if mean == 0.0 else 0.0
    interval = (mean - half, mean + half)
    return PairedTResult(
        blocks=diffs.size,
        mean_log=mean,
        sd_log=sd,
        change_pct=log_to_pct(mean),
        confidence=confidence,
        ci_log=interval,
        change_ci_pct=_pct_pair(interval),
        p_value=p_value,
    )
