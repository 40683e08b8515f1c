"""The signed-rank change, interval and p-value checked independently: against
scipy.stats.wilcoxon, by inverting scipy's test at the interval's ends, against a bootstrap of
the Hodges-Lehmann estimate, and by simulated coverage; the paired-t against scipy's."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from scipy.stats import ttest_1samp, wilcoxon

from stages.ab.stats.paired_stats import (
    FewBlocksError,
    hodges_lehmann,
    log_to_pct,
    paired_t_summary,
    pct_to_log,
    signed_rank_interval,
    signed_rank_summary,
    signed_rank_test,
    walsh_averages,
)


def _untied(seed: int, blocks: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.03, 0.08, blocks)


def _tied(seed: int, blocks: int, decimals: int = 2) -> np.ndarray:
    """Rounded to 0.01: ties in d, ties in |d| between signs, and exact zeros."""
    return np.round(np.random.default_rng(seed).normal(0.01, 0.04, blocks), decimals)


def _scipy_p(diffs: np.ndarray, method: str) -> float:
    if method == "exact":
        return float(wilcoxon(diffs, method="exact").pvalue)
    return float(
        wilcoxon(diffs, zero_method="zsplit", correction=False, method="asymptotic").pvalue
    )


def test_hodges_lehmann_is_the_median_of_the_walsh_averages() -> None:
    diffs = _untied(1, 9)
    pairs = itertools.combinations_with_replacement(diffs.tolist(), 2)
    by_hand = statistics.median((a + b) / 2 for a, b in pairs)
    assert hodges_lehmann(diffs) == pytest.approx(by_hand, abs=1e-15)
    assert walsh_averages(diffs).size == 9 * 10 // 2
    assert hodges_lehmann(diffs + 0.25) == pytest.approx(by_hand + 0.25, abs=1e-12)


@pytest.mark.parametrize("blocks", [5, 8, 13, 20, 35, 50])
def test_the_exact_p_value_is_scipys(blocks: int) -> None:
    diffs = _untied(blocks, blocks)
    statistic, p_value, method = signed_rank_test(diffs)
    assert method == "exact"
    assert p_value == pytest.approx(_scipy_p(diffs, "exact"), abs=1e-9)
    # scipy reports min(T+, T-) for a two-sided test; ours is T+, the one the interval inverts
    total = blocks * (blocks + 1) / 2
    assert min(statistic, total - statistic) == wilcoxon(diffs, method="exact").statistic


@pytest.mark.parametrize(("seed", "blocks"), [(3, 9), (2, 20), (3, 40), (4, 80)])
def test_the_normal_p_value_is_scipys_with_ties_and_zeros(seed: int, blocks: int) -> None:
    diffs = _tied(seed, blocks)
    assert np.any(diffs == 0.0) and np.unique(np.abs(diffs)).size < blocks  # both present
    _, p_value, method = signed_rank_test(diffs)
    assert method == "normal"
    assert p_value == pytest.approx(_scipy_p(diffs, "normal"), abs=1e-9)


def test_many_untied_blocks_take_the_normal_approximation_as_scipy_does() -> None:
    diffs = _untied(60, 60)
    _, p_value, method = signed_rank_test(diffs)
    assert method == "normal"
    assert p_value == pytest.approx(float(wilcoxon(diffs).pvalue), abs=1e-9)


def _step_beside(diffs: np.ndarray, bound: float) -> float:
    """A quarter of the gap from `bound` to the nearest other Walsh average: a shift by it moves
    across no other Walsh average."""
    walsh = walsh_averages(diffs)
    gaps = np.abs(walsh - bound)
    return float(np.min(gaps[gaps > 1e-12])) / 4.0


@pytest.mark.parametrize(
    ("diffs", "confidence"),
    [
        (_untied(11, 12), 0.95),
        (_untied(12, 30), 0.95),
        (_untied(13, 30), 0.90),
        (_tied(14, 24), 0.95),
        (_tied(15, 60), 0.90),
    ],
    ids=["exact-12", "exact-30", "exact-30-90pct", "ties-24", "ties-60-90pct"],
)
def test_the_interval_is_the_set_the_test_does_not_reject(
    diffs: np.ndarray, confidence: float
) -> None:
    """Just outside either end scipy's test (on d - theta) rejects at 1 - confidence, just
    inside it does not: the ends are exactly where the p-value crosses alpha. The exact null is
    discrete, so outside the p-value equals 1 - the achieved confidence (at most alpha)."""
    (low, high), achieved, method = signed_rank_interval(diffs, confidence)
    alpha = 1.0 - confidence
    for bound, outward in ((low, -1.0), (high, 1.0)):
        step = _step_beside(diffs, bound)
        p_outside = _scipy_p(diffs - (bound + outward * step), method)
        p_inside = _scipy_p(diffs - (bound - outward * step), method)
        assert p_outside <= alpha < p_inside, (bound, p_outside, p_inside)
        if method == "exact":
            assert p_outside == pytest.approx(1.0 - achieved, abs=1e-12)
    assert low <= hodges_lehmann(diffs) <= high


def _bootstrap_hl_interval(diffs: np.ndarray, replicates: int, seed: int) -> np.ndarray:
    picks = np.random.default_rng(seed).integers(0, diffs.size, size=(replicates, diffs.size))
    resampled = diffs[picks]
    upper_i, upper_j = np.triu_indices(diffs.size)
    estimates = np.median((resampled[:, upper_i] + resampled[:, upper_j]) / 2.0, axis=1)
    return np.quantile(estimates, [0.025, 0.975])


@pytest.mark.parametrize(
    "diffs",
    [
        _untied(21, 30),
        0.02 + 0.05 * np.random.default_rng(22).standard_t(3, 30),
        _tied(23, 30, decimals=3),
    ],
    ids=["normal", "t3", "ties"],
)
def test_a_bootstrap_of_the_estimate_gives_about_the_same_interval(diffs: np.ndarray) -> None:
    """A percentile bootstrap of the HL estimate (2,000 replicates) estimates the same 95%
    interval by another route. Tolerance: each end within 0.25 of the signed-rank half-width.
    Measured over 40 seeded normal samples of 30: the bootstrap ends sit ~0.04 half-widths
    inside (percentile intervals run narrow at small n), scatter with sd ~0.05, at most 0.23;
    the exactness of the ends is the inversion test's job. The tied sample is rounded to 0.001
    only: coarser, the bootstrap's quantiles jump in steps of a sizeable part of the width."""
    assert signed_rank_summary(_tied(23, 30, decimals=3)).method == "normal"  # it has ties
    result = signed_rank_summary(diffs)
    low, high = result.ci_log
    boot_low, boot_high = _bootstrap_hl_interval(diffs, 2000, seed=7)
    half_width = (high - low) / 2.0
    assert abs(boot_low - low) <= 0.25 * half_width
    assert abs(boot_high - high) <= 0.25 * half_width


@pytest.mark.parametrize("shape", ["normal", "t3"])
def test_the_95pct_interval_covers_the_true_change(shape: str) -> None:
    """600 seeded sessions of 16 blocks, true centre 0.05 (t3: heavy tails, still symmetric).
    Coverage must lie in [0.92, 0.98]: with 600 draws its sd is 0.009 at the exact interval's
    0.956, so a right interval passes with > 3 sd to spare, and an interval covering 0.90
    (sd 0.012) fails with probability ~0.95."""
    rng = np.random.default_rng(2026 if shape == "normal" else 2027)
    covered = 0
    for _ in range(600):
        noise = rng.normal(0.0, 0.08, 16) if shape == "normal" else 0.05 * rng.standard_t(3, 16)
        low, high = signed_rank_interval(0.05 + noise, 0.95)[0]
        covered += low <= 0.05 <= high
    assert 0.92 <= covered / 600 <= 0.98


def test_the_paired_t_interval_is_scipys() -> None:
    diffs = _untied(31, 14)
    result = paired_t_summary(diffs, 0.95)
    reference = ttest_1samp(diffs, 0.0)
    ci = reference.confidence_interval(0.95)
    assert result.ci_log == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert result.p_value == pytest.approx(reference.pvalue, abs=1e-12)
    assert result.change_ci_pct == pytest.approx((log_to_pct(ci.low), log_to_pct(ci.high)))


def test_a_summary_states_the_change_in_percent() -> None:
    diffs = [math.log(1.05)] * 3 + [math.log(1.05) - 0.01, math.log(1.05) + 0.01] * 4
    result = signed_rank_summary(diffs)
    assert result.change_pct == pytest.approx(5.0, abs=1e-9)
    assert result.change_ci_pct[0] < 5.0 < result.change_ci_pct[1]
    assert result.method == "normal"  # the repeated values are ties
    assert log_to_pct(pct_to_log(-12.5)) == pytest.approx(-12.5)
    assert log_to_pct(-math.inf) == -100.0


def test_too_few_blocks_give_an_unbounded_interval_or_a_reason() -> None:
    """Five untied blocks cannot reach 95% (the least p is 2 / 2^5 = 0.0625): no finite end."""
    assert signed_rank_interval(_untied(41, 5), 0.95)[0] == (-math.inf, math.inf)
    assert signed_rank_interval(_untied(41, 6), 0.95)[0][0] > -math.inf
    with pytest.raises(FewBlocksError, match="at least 2"):
        signed_rank_summary([0.1])
    with pytest.raises(FewBlocksError, match="finite"):
        paired_t_summary([0.1, math.nan])
    with pytest.raises(ValueError, match="confidence"):
        paired_t_summary([0.1, 0.2, 0.3], confidence=95)
