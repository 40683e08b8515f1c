"""The planned stopping rule and the sample-size arithmetic of an A/B session: looks at fixed
block counts with the false-alarm rate spent across them, the blocks a change needs, and the
smallest change a budget can decide (what the plan printed before block 1 says).

Looks: the classical group-sequential boundaries of Pocock (a constant z at every look) and
O'Brien-Fleming (z shrinking as 1/sqrt(information)), both of the Wang-Tsiatis family
b_k = c * t_k^(shape - 1/2), t_k = blocks_k / blocks_last, with c solved so that the chance of
crossing at any look under no change is the family alpha. The crossing chance is the exact
Armitage-McPherson-Rowe recursion of the z-statistics' joint normal law (independent increments
in information), integrated by Simpson's rule; not a Lan-DeMets spending function, so equal
looks reproduce the published tables (Pocock 3 looks: 0.0221 each; O'Brien-Fleming: 0.0005,
0.0141, 0.0451) and unequal looks get the same shape with c solved for them. A look decides a
figure when its (Holm-adjusted) signed-rank p-value is at most that look's nominal alpha: the
boundaries assume asymptotically normal statistics with independent increments, which the
signed-rank statistic of a growing set of blocks is. Looks planned in advance only: a look moved
after seeing the data needs the plan solved again for the blocks actually used.

Sample size: K = ((z_{1-a/2} + z_{power}) * sd(d) / ln(1 + change))^2 / efficiency, rounded up
to an even count (AB and BA in equal numbers). `efficiency` is the test's asymptotic relative
efficiency against the t-test: 3/pi = 0.955 for the signed-rank test under normal d (it needs
~5% more blocks; under heavy tails it needs fewer, so 0.955 is the safe side).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import brentq
from scipy.stats import norm

from stages.ab.stats.paired_stats import log_to_pct, pct_to_log

WILCOXON_ARE = 3.0 / math.pi
"""Asymptotic relative efficiency of the signed-rank test against the t-test under normal d
(0.955): the signed-rank test needs 1/0.955 times the t-test's blocks."""
DEFAULT_POWER = 0.9
_GRID_POINTS = 401  # Simpson nodes per look: > 20 per sd of the smallest increment at 24 looks

BoundaryKind = Literal["pocock", "obrien-fleming"]
BOUNDARY_SHAPES: dict[BoundaryKind, float] = {"pocock": 0.5, "obrien-fleming": 0.0}
"""Wang-Tsiatis shape of each boundary kind: b_k = c * t_k^(shape - 1/2)."""

FloatArray = NDArray[np.float64]


class LookPlan(BaseModel):
    """Where a session looks and at what nominal level each look decides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: BoundaryKind = Field(description="The boundary shape: pocock or obrien-fleming.")
    family_alpha: float = Field(description="Two-sided false-alarm rate over all looks.")
    looks_blocks: tuple[int, ...] = Field(description="Block counts at which the looks fall.")
    boundary_z: tuple[float, ...] = Field(description="|z| that decides at each look.")
    nominal_alpha: tuple[float, ...] = Field(
        description="Two-sided p-value that decides at each look: 2 * (1 - Phi(boundary_z))."
    )
    cumulative_alpha: tuple[float, ...] = Field(
        description="Chance under no change of having decided by each look (last: family_alpha)."
    )


def _simpson_weights(points: int, step: float) -> FloatArray:
    weights = np.full(points, 2.0)
    weights[1::2] = 4.0
    weights[0] = weights[-1] = 1.0
    return weights * step / 3.0


def crossing_probabilities(
    boundary_z: Sequence[float], information: Sequence[float]
) -> list[float]:
    """P(first |Z_k| >= b_k at look k) under no change, for looks at increasing `information`
    (any scale): the recursion on the density of the score S_k = Z_k sqrt(I_k) among the paths
    not yet stopped."""
    nodes = np.zeros(1)
    mass = np.ones(1)  # point mass at S_0 = 0, then Simpson-weighted densities
    previous, crossings = 0.0, []
    for bound_z, info in zip(boundary_z, information, strict=True):
        spread, bound = math.sqrt(info - previous), bound_z * math.sqrt(info)
        tails = norm.sf((bound - nodes) / spread) + norm.cdf((-bound - nodes) / spread)
        crossings.append(float(np.dot(mass, tails)))
        new_nodes = np.linspace(-bound, bound, _GRID_POINTS)
        kernel = norm.pdf((new_nodes[:, None] - nodes[None, :]) / spread) / spread
        density = kernel @ mass
        mass = density * _simpson_weights(_GRID_POINTS, new_nodes[1] - new_nodes[0])
        nodes, previous = new_nodes, info
    return crossings


def _check_looks(looks_blocks: Sequence[int], family_alpha: float) -> None:
    if not looks_blocks or any(b <= a for a, b in itertools.pairwise(looks_blocks)):
        raise ValueError(f"looks must be increasing block counts, got {list(looks_blocks)}")
    if any(blocks < 2 or blocks % 2 for blocks in looks_blocks):
        raise ValueError(f"each look needs an even block count >= 2, got {list(looks_blocks)}")
    if not 0.0 < family_alpha < 1.0:
        raise ValueError(f"family_alpha must lie in (0, 1), got {family_alpha}")


def plan_looks(
    looks_blocks: Sequence[int] = (8, 16, 24),
    family_alpha: float = 0.05,
    kind: BoundaryKind = "obrien-fleming",
) -> LookPlan:
    """The nominal two-sided level of each look such that a session with no change decides
    at some look with chance `family_alpha` (Wang-Tsiatis boundaries, see the module)."""
    _check_looks(looks_blocks, family_alpha)
    fractions = [blocks / looks_blocks[-1] for blocks in looks_blocks]
    exponent = BOUNDARY_SHAPES[kind] - 0.5

    def shape(constant: float) -> list[float]:
        return [constant * fraction**exponent for fraction in fractions]

    def excess(constant: float) -> float:
        return sum(crossing_probabilities(shape(constant), fractions)) - family_alpha

    single = float(norm.isf(family_alpha / 2.0))  # one look: c; more looks need a larger c
    constant = float(brentq(excess, single * 0.5, single * 3.0, xtol=1e-10))
    bounds = shape(constant)
    spent = np.cumsum(crossing_probabilities(bounds, fractions))
    return LookPlan(
        kind=kind,
        family_alpha=family_alpha,
        looks_blocks=tuple(looks_blocks),
        boundary_z=tuple(bounds),
        nominal_alpha=tuple(float(2.0 * norm.sf(b)) for b in bounds),
        cumulative_alpha=tuple(float(a) for a in spent),
    )


def _z_sum(alpha: float, power: float) -> float:
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha}, {power}")
    return float(norm.isf(alpha / 2.0) + norm.ppf(power))


def min_blocks_for_alpha(alpha: float) -> int:
    """The fewest (even) blocks whose exact signed-rank test can reach two-sided `alpha` at
    all: 2 * 2^-n <= alpha (all signs alike). Fewer blocks can never decide."""
    blocks = math.ceil(1.0 - math.log2(alpha) - 1e-12)
    return max(2, blocks + blocks % 2)


def blocks_needed(
    sd_log: float,
    change_pct: float,
    alpha: float,
    power: float = DEFAULT_POWER,
    efficiency: float = WILCOXON_ARE,
) -> int:
    """Blocks to see `change_pct` at two-sided `alpha` with `power`, given the per-block
    spread sd(d): ((z_{1-a/2} + z_power) sd / ln(1 + change))^2 / efficiency, rounded up to
    an even count and to at least `min_blocks_for_alpha`. For a Holm family, pass alpha / m;
    for planned looks, the last look's nominal alpha."""
    effect_log = abs(pct_to_log(change_pct))
    if effect_log == 0.0 or sd_log < 0.0:
        raise ValueError(f"need a nonzero change and sd >= 0, got {change_pct}%, {sd_log}")
    raw = (_z_sum(alpha, power) * sd_log / effect_log) ** 2 / efficiency
    blocks = math.ceil(raw - 1e-9)
    return max(min_blocks_for_alpha(alpha), blocks + blocks % 2)


def detectable_change_pct(
    sd_log: float,
    blocks: int,
    alpha: float,
    power: float = DEFAULT_POWER,
    efficiency: float = WILCOXON_ARE,
) -> float:
    """The smallest change (in %, as an increase) `blocks` blocks see with `power` at two-sided
    `alpha`: exp((z_{1-a/2} + z_power) sd / sqrt(blocks * efficiency)) - 1; inf when the
    exact test cannot reach `alpha` with so few blocks."""
    if blocks < min_blocks_for_alpha(alpha):
        return math.inf
    return log_to_pct(_z_sum(alpha, power) * sd_log / math.sqrt(blocks * efficiency))


class BudgetPlan(BaseModel):
    """What one figure's target change costs, and what the budget can decide instead."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sd_log: float = Field(description="The per-block spread sd(d) the plan assumes.")
    change_pct: float = Field(description="The change the user wants to see, in %.")
    blocks_needed: int = Field(description="Blocks to see change_pct (even).")
    minutes_needed: float = Field(description="blocks_needed * block duration, in minutes.")
    within_budget: bool = Field(description="Whether minutes_needed fits the budget.")
    budget_blocks: int = Field(description="The most (even) blocks the budget holds.")
    budget_detectable_change_pct: float = Field(
        description="The smallest change decidable within the budget, in % (inf: none)."
    )


def budget_plan(
    sd_log: float,
    change_pct: float,
    budget_min: float,
    block_s: float,
    alpha: float,
    power: float = DEFAULT_POWER,
    efficiency: float = WILCOXON_ARE,
) -> BudgetPlan:
    """The blocks and minutes `change_pct` needs at the stored spread `sd_log` with blocks of
    `block_s` seconds (both arms, switches included), and the smallest change decidable in
    `budget_min`: the plan's "about 16 blocks, 13 min, to see 5% in p50; undecidable within the
    budget: p99 below 18%"."""
    if block_s <= 0.0 or budget_min < 0.0:
        raise ValueError(f"need block_s > 0 and budget_min >= 0, got {block_s}, {budget_min}")
    needed = blocks_needed(sd_log, change_pct, alpha, power, efficiency)
    minutes = needed * block_s / 60.0
    affordable = math.floor(budget_min * 60.0 / block_s + 1e-9)
    affordable -= affordable % 2
    return BudgetPlan(
        sd_log=sd_log,
        change_pct=change_pct,
        blocks_needed=needed,
        minutes_needed=minutes,
        within_budget=minutes <= budget_min + 1e-9,
        budget_blocks=affordable,
        budget_detectable_change_pct=detectable_change_pct(
            sd_log, affordable, alpha, power, efficiency
        ),
    )
