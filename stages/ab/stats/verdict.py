"""The verdict per figure of an A/B session: `regressed`, `improved`, `equivalent` or
`undecided` (exact strings: a contract of `collobench ab`'s JSON and the `ab_verdicts` view).

In order: a figure whose Holm-adjusted signed-rank p-value is at most the family alpha is
`regressed` or `improved`, by the sign of its change and what the figure means (higher latency
is worse, higher throughput better); else `equivalent` when its 90% signed-rank interval lies
inside +-margin_pct (two one-sided tests at alpha 0.05 each, per figure: equivalence is not
corrected across figures); else `undecided`. Every figure carries `mde_pct`, the change its
session could have seen with 90% power: (z_{1-a'/2} + z_{0.9}) sd(d) / sqrt(K * 0.955) as a %,
with a' = family alpha / figures (Holm's first, strictest step, so the figure is decidable
whatever the others do) and 0.955 the signed-rank test's efficiency against the t-test under
normal d (looks.WILCOXON_ARE). Holm is computed here, with its adjusted p-values. At a
planned look, pass the look's nominal alpha (looks.plan_looks) as the family alpha. An end of an
interval too few blocks cannot bound is infinite (-100% or inf; JSON null).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from stages.ab.stats.looks import DEFAULT_POWER, WILCOXON_ARE, detectable_change_pct
from stages.ab.stats.paired_stats import SignedRankMethod, paired_t_summary, signed_rank_summary

Verdict = Literal["regressed", "improved", "equivalent", "undecided"]
VERDICTS: Final[tuple[Verdict, ...]] = ("regressed", "improved", "equivalent", "undecided")
DEFAULT_FAMILY_ALPHA = 0.05
DEFAULT_MARGIN_PCT = 5.0
EQUIVALENCE_ALPHA = 0.05
"""Each one-sided test of TOST: the 1 - 2 * 0.05 = 90% interval inside the margin."""


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest p times
    (m - i + 1), made non-decreasing in that order and capped at 1. A figure is rejected at
    family alpha iff its adjusted p-value is at most alpha."""
    count = len(p_values)
    adjusted = [1.0] * count
    running = 0.0
    for step, index in enumerate(sorted(range(count), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (count - step) * p_values[index]))
        adjusted[index] = running
    return adjusted


class FigureDifferences(BaseModel):
    """One figure of a session (a pipeline's p50, p99, throughput...) and its block differences."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    figure: str = Field(description="Which figure, e.g. 'pipeline_a/latency_p50_ms'.")
    higher_is_worse: bool = Field(
        description="True for latencies (B above A regressed), False for throughput."
    )
    log_diffs: tuple[float, ...] = Field(description="d_k = ln B - ln A, one per kept block.")


class FigureVerdict(BaseModel):
    """A figure's judgement with the figures behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    figure: str = Field(description="Which figure, as given.")
    verdict: Verdict = Field(description="regressed, improved, equivalent or undecided.")
    change_pct: float = Field(description="exp(Hodges-Lehmann of d) - 1, in %.")
    change_ci95: tuple[float, float] = Field(
        description="95% Wilcoxon signed-rank interval of the change (low, high), in %."
    )
    change_ci90: tuple[float, float] = Field(
        description="90% signed-rank interval (low, high) in %: the equivalence test's."
    )
    p_value: float = Field(description="Two-sided signed-rank p-value of no change.")
    p_holm: float = Field(description="p_value adjusted by Holm across the session's figures.")
    mde_pct: float = Field(description="The change the session could see at 90% power, in %.")
    blocks: int = Field(description="How many block differences the verdict rests on.")
    sd_log: float = Field(description="sd(d), the per-block spread behind mde_pct.")
    method: SignedRankMethod = Field(description="The signed-rank null: exact or normal.")
    paired_t_change_pct: float = Field(description="exp(mean d) - 1, in %.")
    paired_t_ci95: tuple[float, float] = Field(description="95% paired-t interval, in %.")


def _direction(change_pct: float, higher_is_worse: bool) -> Verdict:
    if change_pct == 0.0:
        return "undecided"
    return "regressed" if (change_pct > 0.0) == higher_is_worse else "improved"


def _inside(interval: tuple[float, float], margin_pct: float) -> bool:
    return -margin_pct < interval[0] and interval[1] < margin_pct


def judge_figure(
    figure: FigureDifferences,
    p_holm: float,
    figures_in_family: int,
    family_alpha: float = DEFAULT_FAMILY_ALPHA,
    margin_pct: float = DEFAULT_MARGIN_PCT,
) -> FigureVerdict:
    """One figure's verdict, given its Holm-adjusted p-value among `figures_in_family`."""
    wide = signed_rank_summary(figure.log_diffs, 0.95)
    narrow = signed_rank_summary(figure.log_diffs, 1.0 - 2.0 * EQUIVALENCE_ALPHA)
    t_test = paired_t_summary(figure.log_diffs, 0.95)
    verdict: Verdict = "undecided"
    if p_holm <= family_alpha:
        verdict = _direction(wide.change_pct, figure.higher_is_worse)
    elif _inside(narrow.change_ci_pct, margin_pct):
        verdict = "equivalent"
    per_figure_alpha = family_alpha / figures_in_family
    mde = detectable_change_pct(
        t_test.sd_log, wide.blocks, per_figure_alpha, DEFAULT_POWER, WILCOXON_ARE
    )
    return FigureVerdict(
        figure=figure.figure,
        verdict=verdict,
        change_pct=wide.change_pct,
        change_ci95=wide.change_ci_pct,
        change_ci90=narrow.change_ci_pct,
        p_value=wide.p_value,
        p_holm=p_holm,
        mde_pct=mde,
        blocks=wide.blocks,
        sd_log=t_test.sd_log,
        method=wide.method,
        paired_t_change_pct=t_test.change_pct,
        paired_t_ci95=t_test.change_ci_pct,
    )


def judge_session(
    figures: Sequence[FigureDifferences],
    family_alpha: float = DEFAULT_FAMILY_ALPHA,
    margin_pct: float = DEFAULT_MARGIN_PCT,
) -> list[FigureVerdict]:
    """Every figure's verdict, Holm-corrected across `figures` so that the chance of any false
    `regressed`/`improved` in the session is at most `family_alpha`."""
    if not figures:
        return []
    if not (0.0 < family_alpha < 1.0 and margin_pct > 0.0 and math.isfinite(margin_pct)):
        raise ValueError(f"need 0 < alpha < 1 and margin > 0, got {family_alpha}, {margin_pct}")
    p_values = [signed_rank_summary(f.log_diffs).p_value for f in figures]
    adjusted = holm_adjust(p_values)
    return [
        judge_figure(figure, p_holm, len(figures), family_alpha, margin_pct)
        for figure, p_holm in zip(figures, adjusted, strict=True)
    ]


def order_effect_pct(log_diffs: Sequence[float], orders: Sequence[str]) -> float:
    """Mean d of the AB blocks minus mean d of the BA blocks, as a % change: a carry-over from
    the first segment of a block into the second shows as a difference between the orders
    (the runner warns when it exceeds the interval's half-width)."""
    diffs, kinds = np.asarray(log_diffs, dtype=np.float64), np.asarray(orders)
    if diffs.size != kinds.size or not {"AB", "BA"} <= set(kinds.tolist()):
        raise ValueError("need one order per difference, and both AB and BA blocks")
    return (
        math.expm1(float(np.mean(diffs[kinds == "AB"])) - float(np.mean(diffs[kinds == "BA"])))
        * 100.0
    )
