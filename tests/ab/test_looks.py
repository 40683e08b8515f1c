"""The planned looks against the published boundaries and a simulation of unequal looks, the
blocks a change needs against the issue's worked example, and the budget plan."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stages.ab.stats.looks import (
    BoundaryKind,
    blocks_needed,
    budget_plan,
    detectable_change_pct,
    min_blocks_for_alpha,
    plan_looks,
)

PUBLISHED_TOLERANCE = 6e-5
"""The published nominal levels are rounded to 4 decimals (+-5e-5); the recursion's own error
is below 1e-6."""


def test_pocock_three_looks_spend_0_0221_each() -> None:
    plan = plan_looks((8, 16, 24), 0.05, "pocock")
    assert plan.nominal_alpha == pytest.approx((0.0221,) * 3, abs=PUBLISHED_TOLERANCE)
    assert plan.cumulative_alpha[-1] == pytest.approx(0.05, abs=1e-9)


def test_obrien_fleming_three_looks_match_the_published_levels() -> None:
    plan = plan_looks((8, 16, 24), 0.05, "obrien-fleming")
    assert plan.nominal_alpha == pytest.approx((0.0005, 0.0141, 0.0451), abs=PUBLISHED_TOLERANCE)
    assert plan.cumulative_alpha[-1] == pytest.approx(0.05, abs=1e-9)


@pytest.mark.parametrize(
    ("kind", "looks", "constant"),
    [("pocock", 5, 2.413), ("obrien-fleming", 5, 2.040), ("obrien-fleming", 3, 2.004)],
)
def test_boundary_constants_match_jennison_and_turnbull(
    kind: BoundaryKind, looks: int, constant: float
) -> None:
    """Jennison & Turnbull (2000), Tables 2.1 and 2.3: C_P(K, 0.05) and C_B(K, 0.05), to 3
    decimals; the O'Brien-Fleming boundary at the last look is C_B."""
    plan = plan_looks(tuple(range(2, 2 * looks + 1, 2)), 0.05, kind)
    assert plan.boundary_z[-1] == pytest.approx(constant, abs=6e-4)


def test_one_look_is_the_fixed_sample_test() -> None:
    plan = plan_looks((16,), 0.05)
    assert plan.boundary_z[0] == pytest.approx(1.959964, abs=1e-5)


@pytest.mark.parametrize("kind", ["pocock", "obrien-fleming"])
def test_unequal_looks_keep_the_false_alarm_rate_in_simulation(kind: BoundaryKind) -> None:
    """Looks at 6, 10 and 24 blocks: 200,000 simulated null sessions (z-statistics of a
    random walk in blocks) cross some boundary 5% of the time. The rate's sd is 0.0005, so 0.002
    is 4 sd; a plan that ignored the looks' correlation (Bonferroni-like) would be off by more
    than 0.005."""
    looks = np.array([6, 10, 24])
    plan = plan_looks(tuple(int(x) for x in looks), 0.05, kind)
    rng = np.random.default_rng(6)
    increments = rng.normal(size=(200_000, 3)) * np.sqrt(np.diff(looks, prepend=0))
    z = np.cumsum(increments, axis=1) / np.sqrt(looks)
    crossed = np.any(np.abs(z) >= np.array(plan.boundary_z), axis=1)
    assert float(np.mean(crossed)) == pytest.approx(0.05, abs=0.002)


def test_looks_must_be_increasing_even_block_counts() -> None:
    with pytest.raises(ValueError, match="increasing"):
        plan_looks((16, 8))
    with pytest.raises(ValueError, match="even"):
        plan_looks((7, 14))


def test_blocks_needed_for_the_issues_worked_example() -> None:
    """Issue 44: 7.7% per block, 5%, 90% power, 6 figures under Holm (alpha 0.05/6) -> "about
    37 blocks". z_{1-a/2} + z_0.9 = 2.638 + 1.282 = 3.920; with the change as ln(1.05) = 0.0488
    that is (3.920 * 0.077 / 0.0488)^2 = 38.3 -> 40 (even); the issue's 37 took the change as
    0.05 (36.4 -> 37, even 38). The signed-rank allowance (/0.955) makes it 40.1 -> 42."""
    alpha = 0.05 / 6
    assert blocks_needed(0.077, 5.0, alpha, 0.9, efficiency=1.0) == 40
    as_the_issue = math.expm1(0.05) * 100  # the change whose log is 0.05
    assert blocks_needed(0.077, as_the_issue, alpha, 0.9, efficiency=1.0) == 38
    assert blocks_needed(0.077, 5.0, alpha, 0.9) == 42


def test_the_detectable_change_is_the_inverse_of_blocks_needed() -> None:
    for sd_log, change_pct in ((0.05, 5.0), (0.15, 20.0), (0.02, -2.0)):
        blocks = blocks_needed(sd_log, change_pct, 0.01)
        assert detectable_change_pct(sd_log, blocks, 0.01) <= abs(change_pct) + 1e-9
        assert detectable_change_pct(sd_log, blocks - 2, 0.01) > abs(change_pct)


def test_too_few_blocks_can_never_decide() -> None:
    """The exact signed-rank test's least p-value is 2 / 2^n: 6 blocks reach 0.05, 8 reach
    0.05/6; below that nothing is detectable, and no plan asks for fewer."""
    assert min_blocks_for_alpha(0.05) == 6
    assert min_blocks_for_alpha(0.05 / 6) == 8
    assert detectable_change_pct(0.01, 6, 0.05 / 6) == math.inf
    assert blocks_needed(0.001, 50.0, 0.05 / 6) == 8


def test_the_budget_plan_says_what_fits_and_what_the_budget_decides() -> None:
    """50-s blocks in 15 min: 18 blocks. p50 at 5% per block needs 18 blocks, 15 min; p99 at
    20% per block cannot see 20% there, and the plan says what it can."""
    alpha = 0.05 / 6
    p50 = budget_plan(0.05, 5.0, budget_min=15.0, block_s=50.0, alpha=alpha)
    assert p50.blocks_needed == blocks_needed(0.05, 5.0, alpha)
    assert p50.minutes_needed == pytest.approx(p50.blocks_needed * 50.0 / 60.0)
    assert p50.budget_blocks == 18 and p50.within_budget
    p99 = budget_plan(0.20, 20.0, budget_min=15.0, block_s=50.0, alpha=alpha)
    assert not p99.within_budget and p99.minutes_needed > 15.0
    assert p99.budget_detectable_change_pct == pytest.approx(detectable_change_pct(0.20, 18, alpha))
    assert p99.budget_detectable_change_pct > 20.0
