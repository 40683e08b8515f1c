"""The cross-run test (analysis.history.change_points) on simulated histories drawn with the
between-run spread measured on this machine (perf/verdicts.py): false alarms on A/A histories, steps
at the minimal detectable change found within three runs, a single outlier not taken for a
change."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from analysis.history.change_points import (
    IMPROVED,
    MEDIAN_OF_3_VARIANCE,
    NO_CHANGE,
    REGRESSED,
    UNDECIDED,
    VerdictRule,
    judge_history,
)

# The between-run spread (sd of the log figure) of p50 latency measured by perf/verdicts.py on
# this machine: the method is scale-free (it estimates the spread from each history), so the
# rates below hold at any spread; this one keeps the 1% floor in realistic proportion.
BETWEEN_RUN_SD = 0.10
HISTORIES = 1000
RUNS = 20
METRICS = 12
# The demo's family: 4 (phase, pipeline) x queries_per_s, latency_p50_ms, latency_p99_ms. The
# false-alarm rate is per run, so a smaller family tests each metric at a looser level, and a
# lone outlier plus one run high by chance then more often looks like a change (10% of
# histories at 3 metrics: perf/verdicts.py reports both).


def _flagged(judgements: list) -> list[bool]:
    return [j.verdict in (REGRESSED, IMPROVED) for j in judgements]


def test_the_median_of_three_variance_is_the_order_statistic_integral() -> None:
    def integrand(x: float) -> float:
        return float(x * x * 6 * stats.norm.pdf(x) * stats.norm.cdf(x) * stats.norm.sf(x))

    assert integrate.quad(integrand, -np.inf, np.inf)[0] == pytest.approx(
        MEDIAN_OF_3_VARIANCE, abs=1e-6
    )


def test_a_short_history_is_undecided_and_says_what_it_needs() -> None:
    judgements = judge_history([10.0, 10.5, 9.8, 10.1], higher_is_better=False)
    assert {j.verdict for j in judgements} == {UNDECIDED}
    assert "4 run(s) in the history; a verdict needs 8" in judgements[-1].detail


@pytest.mark.slow
def test_aa_histories_flag_at_most_one_run_in_ten() -> None:
    rng = np.random.default_rng(20261128)
    flagged = np.zeros((HISTORIES, RUNS), dtype=bool)
    for history in range(HISTORIES):
        for _ in range(METRICS):
            values = np.exp(rng.normal(0.0, BETWEEN_RUN_SD, RUNS))
            flagged[history] |= _flagged(judge_history(values, False, METRICS))
    judged = flagged[:, 7:]  # runs with the 8 a verdict needs
    assert flagged.mean() <= 0.10
    assert judged.mean() <= 0.10
    assert judged.mean() > 0.01  # the test spends its false-alarm rate: it is not blind


@pytest.mark.parametrize("higher_is_better", [False, True])
def test_a_step_at_the_minimal_detectable_change_is_found_within_three_runs(
    higher_is_better: bool,
) -> None:
    rng = np.random.default_rng(7 + higher_is_better)
    found = 0
    for _ in range(HISTORIES):
        before = rng.normal(0.0, BETWEEN_RUN_SD, 12)
        mde_pct = judge_history(np.exp(before), higher_is_better, METRICS)[-1].mde_pct
        assert mde_pct is not None
        after = rng.normal(math.log1p(mde_pct / 100), BETWEEN_RUN_SD, 3)
        judged = judge_history(np.exp(np.r_[before, after]), higher_is_better, METRICS)
        wanted = IMPROVED if higher_is_better else REGRESSED
        found += any(j.verdict == wanted for j in judged[12:])
    assert found / HISTORIES >= 0.90


def test_a_single_outlier_run_is_not_a_change() -> None:
    rng = np.random.default_rng(3)
    taken = outliers_off_band = 0
    for _ in range(HISTORIES):
        logs = rng.normal(0.0, BETWEEN_RUN_SD, RUNS)
        logs[12] += 6 * BETWEEN_RUN_SD  # one run 80% slower
        judged = judge_history(np.exp(logs), False, METRICS)
        taken += any(j.change_point_index == 12 for j in judged)
        outliers_off_band += judged[12].verdict == UNDECIDED
    assert taken / HISTORIES <= 0.05
    # The outlier itself is off the band, with too few runs after it to be a change.
    assert outliers_off_band / HISTORIES >= 0.90


def test_a_change_reports_its_size_interval_and_start() -> None:
    values = [100.0, 102.0, 99.0, 101.0, 98.0, 100.0, 101.0, 99.0, 130.0, 131.0, 129.0]
    judged = judge_history(values, higher_is_better=False, metrics=3)
    # One run off the band is undecided; the second decides it (the median of three moved).
    assert judged[8].verdict == UNDECIDED
    assert "2 more runs decide whether it persists" in judged[8].detail
    change = judged[9]
    assert change.verdict == REGRESSED
    assert change.change_point_index == 8
    assert change.change_pct == pytest.approx(30.0, abs=1.0)
    low, high = change.change_ci95 or (0, 0)
    assert low < 30.0 < high
    # Flagged once: the next run is judged against the new regime.
    assert judged[10].verdict == NO_CHANGE


def test_a_change_below_the_one_percent_floor_is_no_change() -> None:
    # Throughput of an open-loop pipeline: the offered rate, nearly identical run to run.
    values = [100.0 + 0.001 * (i % 3) for i in range(10)] + [100.5, 100.5, 100.5]
    assert not any(_flagged(judge_history(values, higher_is_better=True, metrics=3)))


def test_more_metrics_per_run_widen_the_band() -> None:
    values = list(np.exp(np.random.default_rng(1).normal(0, 0.1, 12)))
    one = judge_history(values, False, 1)[-1].mde_pct
    twelve = judge_history(values, False, 12)[-1].mde_pct
    assert one is not None and twelve is not None and twelve > one
    assert VerdictRule().alpha_per_side(12) == pytest.approx(0.1 / 24)
