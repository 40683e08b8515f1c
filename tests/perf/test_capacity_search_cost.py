"""perf/capacity_search_cost.py: the simulator figures it reports, on a few searches."""

from __future__ import annotations

from perf import capacity_search_cost


def test_simulated_figures_hold_the_reported_keys_and_count_every_search() -> None:
    figures = capacity_search_cost.simulate(searches=3, probe_s=20.0, true_qps=154.7)
    assert figures["searches"] == 3 and sum(figures["stop_reasons"].values()) == 3
    assert 0.0 <= figures["certified_le_true"] <= 1.0 and 0.0 <= figures["ci95_coverage"] <= 1.0
    assert 4 <= figures["probes_median"] <= figures["probes_max"] <= 14
    assert set(figures["met"]) == {"certified_le_true", "ci95_coverage", "probes_median"}
