"""Bursts of over-SLO queries, the design effect they give the count, the counts the verdict
uses, and the concrete SloRule over analysis.reports.early_stopping."""

from __future__ import annotations

import numpy as np
import pytest

from stages.capacity.clustering import burst_sizes, design_effect, effective_counts
from stages.contracts.slo_verdict import LoadgenSloRule, max_passing_over_slo, slo_verdict_by_counts


def test_runs_closer_than_the_merge_gap_are_one_burst() -> None:
    over = np.zeros(200, dtype=bool)
    over[10:14] = True  # 4 over
    over[20:22] = True  # 2 over, 6 within the SLO after the first run: same burst
    over[100:103] = True  # 3 over, far away: a burst of its own
    assert burst_sizes(over, merge_gap=20).tolist() == [6, 3]
    assert burst_sizes(over, merge_gap=0).tolist() == [4, 2, 3]
    assert burst_sizes(np.zeros(5, dtype=bool)).size == 0


def test_design_effect_is_sum_of_squared_burst_sizes_over_their_sum() -> None:
    over = np.zeros(300, dtype=bool)
    over[0:6] = True
    over[200:203] = True
    assert design_effect(over) == pytest.approx((36 + 9) / 9)
    scattered = np.zeros(3000, dtype=bool)
    scattered[::100] = True
    assert design_effect(scattered) == 1.0 and design_effect([False] * 10) == 1.0


def test_effective_counts_shrink_a_bursty_probe_so_it_no_longer_passes() -> None:
    assert effective_counts(4600, 28, 1.0) == (4600, 28)
    assert effective_counts(4600, 28, 10.0) == (460, 3)
    assert slo_verdict_by_counts(4600, 28) == "met"
    assert slo_verdict_by_counts(*effective_counts(4600, 28, 10.0)) != "met"


def test_loadgen_rule_delegates_to_the_early_stopping_functions() -> None:
    rule = LoadgenSloRule()
    assert rule.verdict(700, 0, 0.99) == "met"
    assert rule.verdict(340, 17, 0.99) == "missed"
    assert rule.verdict(400, 3, 0.99) == "undecided"
    assert rule.max_passing_over_slo(3000, 0.99) == max_passing_over_slo(3000, 0.99) >= 0
    assert LoadgenSloRule(confidence=0.9).max_passing_over_slo(
        3000, 0.99
    ) > rule.max_passing_over_slo(3000, 0.99)
