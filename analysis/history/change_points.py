"""Changes across runs: a metric's history judged against how much runs differ from each other
(between-run spread), not against one run's sampling error.

The method (docs/design.md, "Verdicts across runs"), on the log of each run's figure, so a change
is a ratio and spreads of fast and slow metrics compare:
- The history is replayed run by run, as a nightly schedule meets it. It is cut into regimes at
  the change points found so far; the between-run spread `s` is pooled over every regime's runs
  before the newest three (each run's distance from its own regime's mean).
- A change is persistent by definition: it is found when the *median* of the newest
  RUNS_AFTER_CHANGE (3) runs lies outside the band of the regime's earlier runs, by a Student t
  test on (median - regime mean) / (s sqrt(v3 + 1/n)), v3 the variance of the median of three
  normal draws. One odd run cannot move a median of three, so an outlier alone is never a
  change; two runs past a change can already decide it.
- The run flagged is the third after the change: the change point itself is the first of the
  three that lies past the midpoint between the old regime and the new one.
- A family of metrics per run shares the false-alarm rate: each side of each metric is tested at
  false_alarm_rate / (2 m) (Bonferroni), so a run is flagged by chance at most 1 time in 10.
- A newest run outside the band of its regime, with fewer than three runs to show whether it
  persists, is `undecided` and says how many more runs decide it.
- The minimal detectable change is the shift this test finds with 90% power once three runs lie
  past it, given the spread (averaged over the spread's own sampling error, not plugged in).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

RUNS_AFTER_CHANGE = 3
"""Runs past a change that decide it (the median of these is tested)."""
MEDIAN_OF_3_VARIANCE = 0.448671
"""Variance of the median of three independent N(0, 1) draws (the order-statistic integral;
tests/analysis/test_change_points.py recomputes it)."""

REGRESSED = "regressed"
IMPROVED = "improved"
NO_CHANGE = "no change"
UNDECIDED = "undecided"
VERDICTS = (REGRESSED, IMPROVED, NO_CHANGE, UNDECIDED)
SPREAD_QUANTILES = 2000
"""Points of the spread's sampling distribution the power calculation averages over."""


@dataclass(frozen=True)
class VerdictRule:
    """The settings of the cross-run test (the defaults are what collobench uses)."""

    false_alarm_rate: float = 0.10
    """Chance that a run with no change is flagged on any of its metrics."""
    mde_power: float = 0.925
    """The power the minimal detectable change is computed at under the normal model: 92.5%,
    so that at least 90% of steps of that size are found in simulated histories (the model's
    90% came out at 89-91%: the median of three is not quite normal and the spread is
    estimated from the same runs)."""
    min_spread_runs: int = 5
    """Runs (before the newest three) the between-run spread needs: 4 degrees of freedom."""
    min_regime_runs: int = 3
    """Runs of the current regime before the newest three that the tail test compares with."""
    min_change_pct: float = 1.0
    """A change smaller than this is `no change` however well measured (as in compare)."""

    def alpha_per_side(self, metrics: int) -> float:
        """The false-alarm rate one side of one metric may spend (Bonferroni over the run)."""
        return self.false_alarm_rate / (2 * max(1, metrics))


@dataclass(frozen=True)
class RunJudgement:
    """The verdict on one run of one metric's history (the newest run when it was judged)."""

    verdict: str
    change_pct: float | None
    """The change in percent: over the runs since a change point for a change, else this run
    against its regime's mean."""
    change_ci95: tuple[float, float] | None
    mde_pct: float | None
    """The smallest change the history so far finds with 90% power, three runs after it."""
    change_point_index: int | None
    """For `regressed` / `improved`: the index of the first run of the new regime."""
    detail: str
    """Why, in one line (the runs it has and needs when undecided)."""


@dataclass(frozen=True)
class _Spread:
    sd: float
    df: int


def judge_history(
    values: list[float] | np.ndarray,
    higher_is_better: bool,
    metrics: int = 1,
    rule: VerdictRule | None = None,
) -> list[RunJudgement]:
    """Replay a metric's history (oldest first, positive figures) and judge each run as it came.

    `metrics` is how many metrics each run is judged on (the family the false-alarm rate covers).
    A non-finite or non-positive figure is judged `undecided` and left out of the spread.
    """
    rule = rule or VerdictRule()
    logs = [
        math.log(v) if v is not None and math.isfinite(v) and v > 0 else math.nan for v in values
    ]
    alpha = rule.alpha_per_side(metrics)
    change_points: list[int] = []
    judgements: list[RunJudgement] = []
    for index in range(len(logs)):
        judgement = _judge_newest(logs[: index + 1], change_points, higher_is_better, alpha, rule)
        if judgement.change_point_index is not None:
            change_points.append(judgement.change_point_index)
        judgements.append(judgement)
    return judgements


def _judge_newest(
    logs: list[float],
    change_points: list[int],
    higher_is_better: bool,
    alpha: float,
    rule: VerdictRule,
) -> RunJudgement:
    newest = len(logs) - 1
    regime_start = change_points[-1] if change_points else 0
    if not math.isfinite(logs[newest]):
        return RunJudgement(UNDECIDED, None, None, None, None, "no finite figure in this run")
    tail_start = max(regime_start, newest + 1 - RUNS_AFTER_CHANGE)
    min_df = rule.min_spread_runs - 1
    spread = _pooled_spread(logs[: newest + 1 - RUNS_AFTER_CHANGE], change_points, min_df)
    regime = _finite(logs[regime_start:newest])
    # The test three runs from now compares with this regime, this run included.
    spread_now = _pooled_spread(logs, change_points, min_df)
    mde = _mde_pct(spread_now, len(regime) + 1, alpha, rule) if spread_now else None
    if spread is None:
        have = len(_finite(logs[:newest]))
        return RunJudgement(
            UNDECIDED, None, None, None, None,
            f"{have + 1} run(s) in the history; a verdict needs "
            f"{rule.min_spread_runs + RUNS_AFTER_CHANGE} on one machine class",
        )  # fmt: skip
    baseline = _finite(logs[regime_start:tail_start])
    if newest + 1 - regime_start >= rule.min_regime_runs + RUNS_AFTER_CHANGE:
        change = _tail_change(logs, baseline, tail_start, spread, higher_is_better, alpha, rule)
        if change is not None:
            verdict, change_pct, interval, point = change
            return RunJudgement(
                verdict, change_pct, interval, mde, point,
                f"a shift since run {point + 1} of the history, {newest + 1 - point} run(s) on "
                f"(the newest three's median against the {len(baseline)} runs before; "
                f"spread {_pct(spread.sd):.1f}%)",
            )  # fmt: skip
    return _judge_alone(logs[newest], regime, spread, mde, alpha, rule)


def _judge_alone(
    newest: float,
    regime: list[float],
    spread: _Spread,
    mde: float | None,
    alpha: float,
    rule: VerdictRule,
) -> RunJudgement:
    """The newest run against its regime's earlier runs: inside the band, or off it with too
    few runs after it to call it a change."""
    if not regime:
        return RunJudgement(NO_CHANGE, None, None, mde, None, "the first run since a change point")
    diff = newest - _mean(regime)
    se = spread.sd * math.sqrt(1 + 1 / len(regime))
    interval = _interval_pct(diff, se, spread.df)
    t_crit = _t_quantile(1 - alpha, spread.df)
    off_band = abs(diff) > t_crit * se and abs(_pct(diff)) >= rule.min_change_pct
    if off_band:
        return RunJudgement(
            UNDECIDED, _pct(diff), interval, mde, None,
            f"this run lies {_pct(diff):+.1f}% off the band of the {len(regime)} runs before; "
            f"{RUNS_AFTER_CHANGE - 1} more runs decide whether it persists",
        )  # fmt: skip
    return RunJudgement(
        NO_CHANGE, _pct(diff), interval, mde, None,
        f"within the band of the {len(regime)} runs before (spread {_pct(spread.sd):.1f}%)",
    )  # fmt: skip


def _tail_change(
    logs: list[float],
    baseline: list[float],
    tail_start: int,
    spread: _Spread,
    higher_is_better: bool,
    alpha: float,
    rule: VerdictRule,
) -> tuple[str, float, tuple[float, float], int] | None:
    """(verdict, change %, its interval, change point) when the newest runs' median lies off
    the baseline's band; None otherwise."""
    tail = logs[tail_start:]
    if len(baseline) < rule.min_regime_runs or not all(math.isfinite(x) for x in tail):
        return None
    base_mean = _mean(baseline)
    shift = sorted(tail)[len(tail) // 2] - base_mean
    se = spread.sd * math.sqrt(MEDIAN_OF_3_VARIANCE + 1 / len(baseline))
    if abs(shift) <= _t_quantile(1 - alpha, spread.df) * se:
        return None
    # The change point: the first newest run past the midpoint between the regimes.
    middle = base_mean + shift / 2
    point = next(tail_start + offset for offset, x in enumerate(tail) if (x - middle) * shift > 0)
    after = logs[point:]
    change = _mean(after) - base_mean
    if abs(_pct(change)) < rule.min_change_pct:
        return None
    interval = _interval_pct(
        change, spread.sd * math.sqrt(1 / len(after) + 1 / len(baseline)), spread.df
    )
    worse = (change < 0) if higher_is_better else (change > 0)
    return (REGRESSED if worse else IMPROVED), _pct(change), interval, point


def _pooled_spread(logs: list[float], change_points: list[int], min_df: int) -> _Spread | None:
    """The between-run standard deviation of the logs, pooled over the regimes (each run
    against its own regime's mean); None with fewer than min_spread_runs - 1 degrees of freedom."""
    bounds = [0, *[p for p in change_points if p < len(logs)], len(logs)]
    squares, df = 0.0, 0
    for start, end in itertools.pairwise(bounds):
        segment = _finite(logs[start:end])
        if len(segment) >= 2:
            mean = _mean(segment)
            squares += sum((x - mean) ** 2 for x in segment)
            df += len(segment) - 1
    if df < min_df:
        return None
    return _Spread(math.sqrt(squares / df), df)


def _mde_pct(spread: _Spread, baseline_runs: int, alpha: float, rule: VerdictRule) -> float:
    """The smallest change (percent, either way) found with `rule.power` three runs after it."""
    multiple = _power_multiple(spread.df, alpha, rule.mde_power)
    shift = multiple * spread.sd * math.sqrt(MEDIAN_OF_3_VARIANCE + 1 / baseline_runs)
    return max(rule.min_change_pct, _pct(shift))


@functools.lru_cache(maxsize=4096)
def _power_multiple(df: int, alpha: float, power: float) -> float:
    """m such that a shift of m * s * c is found with probability `power` by the test
    |shift| > t(1 - alpha, df) * s * c, s the spread estimated with df degrees of freedom:
    E over s of Phi((m - t) s / sigma) = power, s / sigma distributed as sqrt(chi2(df) / df)
    (the expectation over SPREAD_QUANTILES equally likely quantiles of that distribution)."""
    t_crit = _t_quantile(1 - alpha, df)
    levels = (np.arange(SPREAD_QUANTILES) + 0.5) / SPREAD_QUANTILES
    ratios = stats.chi.ppf(levels, df) / math.sqrt(df)

    def found(multiple: float) -> float:
        return float(np.mean(stats.norm.cdf((multiple - t_crit) * ratios))) - power

    return float(optimize.brentq(found, t_crit, t_crit + 20))


@functools.lru_cache(maxsize=4096)
def _t_quantile(probability: float, df: int) -> float:
    return float(stats.t.ppf(probability, df))


def _interval_pct(diff: float, se: float, df: int) -> tuple[float, float]:
    half = _t_quantile(0.975, df) * se
    return _pct(diff - half), _pct(diff + half)


def _pct(log_change: float) -> float:
    """A difference of logs as a percent change."""
    return 100.0 * math.expm1(log_change)


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def _finite(logs: list[float]) -> list[float]:
    return [x for x in logs if math.isfinite(x)]
