"""Holm's correction and the four verdicts: each reached by constructed block differences, the
direction read from what the figure means, and mde_pct from the stated formula."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy.stats import norm

from stages.ab.stats.paired_stats import signed_rank_summary
from stages.ab.stats.verdict import (
    VERDICTS,
    FigureDifferences,
    holm_adjust,
    judge_session,
    order_effect_pct,
)


def _spread(centre: float, half_range: float, blocks: int) -> tuple[float, ...]:
    """Evenly spread, untied differences about `centre` (no randomness in the verdict table)."""
    return tuple(float(x) for x in centre + np.linspace(-half_range, half_range, blocks))


def _figure(name: str, diffs: tuple[float, ...], higher_is_worse: bool = True) -> FigureDifferences:
    return FigureDifferences(figure=name, higher_is_worse=higher_is_worse, log_diffs=diffs)


def test_holm_adjusts_a_hand_worked_example() -> None:
    """p = 0.01, 0.04, 0.03, 0.005: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 gives
    0.02, 0.03, 0.06, 0.04; made non-decreasing: 0.02, 0.03, 0.06, 0.06."""
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjust([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm_adjust([]) == []


def _holm_rejections_stepwise(p_values: list[float], alpha: float) -> set[int]:
    """Holm as the textbook states it: walk up the sorted p-values, reject while
    p_(i) <= alpha / (m - i + 1), stop at the first that is not."""
    rejected: set[int] = set()
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    for step, index in enumerate(order):
        if p_values[index] > alpha / (len(p_values) - step):
            break
        rejected.add(index)
    return rejected


def test_holm_adjusted_p_values_reject_what_the_stepwise_procedure_rejects() -> None:
    chooser = random.Random(44)
    for _ in range(300):
        p_values = [chooser.random() ** 3 for _ in range(chooser.randint(1, 8))]
        adjusted = holm_adjust(p_values)
        for alpha in (0.01, 0.05, 0.2):
            by_adjusted = {i for i, p in enumerate(adjusted) if p <= alpha}
            assert by_adjusted == _holm_rejections_stepwise(p_values, alpha)


def test_each_verdict_is_reached() -> None:
    figures = [
        _figure("slower_p50", _spread(0.10, 0.02, 16)),
        _figure("faster_p50", _spread(-0.10, 0.02, 16)),
        _figure("same_p50", _spread(0.0, 0.02, 20)),
        _figure("noisy_p99", _spread(0.02, 0.40, 8)),
    ]
    verdicts = {v.figure: v.verdict for v in judge_session(figures)}
    assert verdicts == {
        "slower_p50": "regressed",
        "faster_p50": "improved",
        "same_p50": "equivalent",
        "noisy_p99": "undecided",
    }
    assert set(verdicts.values()) == set(VERDICTS)
    assert VERDICTS == ("regressed", "improved", "equivalent", "undecided")


def test_lower_throughput_is_a_regression_and_higher_an_improvement() -> None:
    lower = _figure("throughput_qps", _spread(-0.10, 0.02, 16), higher_is_worse=False)
    higher = _figure("throughput_qps", _spread(0.10, 0.02, 16), higher_is_worse=False)
    assert judge_session([lower])[0].verdict == "regressed"
    assert judge_session([higher])[0].verdict == "improved"


def test_holm_keeps_a_lone_significant_figure_undecided_among_six() -> None:
    """Ten blocks, eight above 0: p = 0.037 alone decides; among six figures (the others
    clearly null) Holm asks 0.05/6 of it, and it is not decided."""
    diffs = (0.08, 0.07, 0.06, 0.05, 0.045, 0.04, 0.03, 0.02, -0.01, -0.015)
    alone = judge_session([_figure("p50", diffs)])[0]
    assert alone.p_value < 0.05 and alone.verdict == "regressed"
    nulls = [_figure(f"null_{i}", _spread(0.0, 0.30, 10)) for i in range(5)]
    among_six = judge_session([_figure("p50", diffs), *nulls])[0]
    assert among_six.p_value == alone.p_value
    assert among_six.p_holm > 0.05 and among_six.verdict == "undecided"


def test_mde_pct_follows_the_stated_formula() -> None:
    """mde = exp((z_{1-a'/2} + z_0.9) sd / sqrt(K 0.955)) - 1, a' = 0.05 / figures, where
    0.955 is 3/pi, the signed-rank test's efficiency under normal d."""
    diffs = _spread(0.02, 0.40, 8)
    verdict = judge_session([_figure("p99", diffs), _figure("p50", _spread(0.0, 0.01, 8))])[0]
    sd = float(np.std(diffs, ddof=1))
    z_sum = norm.isf(0.05 / 2 / 2) + norm.ppf(0.9)
    assert verdict.mde_pct == pytest.approx(
        math.expm1(z_sum * sd / math.sqrt(8 * 3 / math.pi)) * 100
    )
    assert verdict.sd_log == pytest.approx(sd)
    assert verdict.blocks == 8


def test_a_verdict_carries_the_signed_rank_and_paired_t_figures() -> None:
    diffs = _spread(0.10, 0.02, 16)
    verdict = judge_session([_figure("p50", diffs)])[0]
    summary = signed_rank_summary(diffs)
    assert verdict.change_pct == pytest.approx(summary.change_pct)
    assert verdict.change_ci95 == pytest.approx(summary.change_ci_pct)
    ci90 = signed_rank_summary(diffs, 0.90).change_ci_pct
    assert verdict.change_ci90 == pytest.approx(ci90)
    assert verdict.method == "exact"
    assert verdict.paired_t_change_pct == pytest.approx(math.expm1(0.10) * 100)
    assert verdict.paired_t_ci95[0] < verdict.paired_t_change_pct < verdict.paired_t_ci95[1]


def test_equivalence_needs_the_90pct_interval_inside_the_margin() -> None:
    within = _figure("p50", _spread(0.0, 0.02, 20))
    assert judge_session([within], margin_pct=5.0)[0].verdict == "equivalent"
    assert judge_session([within], margin_pct=0.5)[0].verdict == "undecided"


def test_the_order_effect_compares_ab_with_ba_blocks() -> None:
    diffs = [0.10, 0.0, 0.10, 0.0]
    assert order_effect_pct(diffs, ["AB", "BA", "AB", "BA"]) == pytest.approx(
        math.expm1(0.10) * 100
    )
    with pytest.raises(ValueError, match="both AB and BA"):
        order_effect_pct(diffs, ["AB"] * 4)
