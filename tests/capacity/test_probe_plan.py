"""Probe windows sized by rate, a ray's by its slowest pipeline, the per-probe cap and the time
budget (stages.capacity.probe_plan)."""

from __future__ import annotations

import pytest

from stages.capacity import probe_plan
from stages.contracts.capacity_files import ProbeRecord, SearchSettings


def _settings(**overrides: object) -> SearchSettings:
    values: dict[str, object] = {"search_id": "s", "pipeline": "p", "slo_ms": 50, "probe_s": 10}
    values.update(overrides)
    return SearchSettings.model_validate(values)


def _probe(duration_s: float, window_s: float | None) -> ProbeRecord:
    return ProbeRecord(
        index=0,
        rate=10.0,
        seed=0,
        queries=100,
        over_slo=0,
        verdict="met",
        p99_ms=1.0,
        run_dir=None,
        duration_s=duration_s,
        window_s=window_s,
    )


def test_the_minimum_count_is_loadgens_for_the_percentile_unless_given() -> None:
    """LoadGen's h(0) at the first look's confidence (99.5%; 459, 90 and 44 at 99%)."""
    assert probe_plan.min_probe_queries(_settings()) == 528
    assert probe_plan.min_probe_queries(_settings(percentile=0.9)) == 51
    assert probe_plan.min_probe_queries(_settings(percentile=0.95)) == 104
    assert probe_plan.min_probe_queries(_settings(min_queries=2000)) == 2000


def test_a_window_is_probe_s_or_long_enough_for_the_minimum_count() -> None:
    settings = _settings()
    assert probe_plan.window_s(settings, 100.0) == 10.0  # 581 queries take 5.8 s
    assert probe_plan.window_s(settings, 5.0) == pytest.approx(1.1 * 528 / 5.0)


def test_a_ray_window_is_sized_by_its_slowest_pipeline() -> None:
    """Near the A axis B runs at s * 2 q/s: at s = 1 it needs 290 s for 528 queries of its own."""
    ray = _settings(pipeline="a+b", ray={"a": 100.0, "b": 2.0})
    assert probe_plan.slowest_rate_qps(ray, 1.0) == 2.0
    assert probe_plan.window_s(ray, 1.0) == pytest.approx(1.1 * 528 / 2.0)


def test_the_budget_caps_a_window_and_so_sets_the_lowest_decidable_rate() -> None:
    settings = _settings(budget_s=900.0)
    assert probe_plan.max_window_s(settings) == 150.0
    assert probe_plan.lowest_decidable_rate(settings) == pytest.approx(1.1 * 528 / 150.0)
    assert probe_plan.lowest_decidable_rate(_settings()) == 0.0  # no budget, no cap
    # Deciding 1 q/s needs a 581 s window, so a six-probe budget of 58.1 min.
    assert probe_plan.budget_minutes_for(settings, 1.0) == pytest.approx(58.08)


def test_a_probe_fits_the_budget_by_what_earlier_probes_took() -> None:
    settings = _settings(budget_s=100.0)
    done = [_probe(23.0, 20.0), _probe(33.0, 30.0)]  # 56 s spent, 3 s start-up each
    assert probe_plan.overhead_s(done) == 3.0
    assert probe_plan.fits_budget(settings, done, 41.0)
    assert not probe_plan.fits_budget(settings, done, 42.0)
    assert probe_plan.overhead_s([]) == probe_plan.DEFAULT_OVERHEAD_S


def test_the_plan_line_names_the_count_the_floor_and_the_budget() -> None:
    settings = _settings(budget_s=600.0)
    ceiling = _probe(10.0, 10.0).model_copy(update={"kind": "ceiling", "throughput_qps": 31.0})
    line = probe_plan.search_plan(settings, [ceiling]).line(settings)
    assert line.startswith("plan: about 8 probes")
    assert "p99 needs >= 528 queries a probe (windows of 37 s near the start rate)" in line
    assert "undecidable below 5.81 q/s; budget 10 min (probes of at most 100 s)" in line
