"""A probe stops once it can no longer pass (LoadGen's count rule for its planned size) or its
backlog grows with certainty; a stable queue is left alone; the stop is raised once, as an
interruption the launcher already handles."""

from __future__ import annotations

import random

import pytest

from stages.capacity.early_abort import (
    AbortMonitor,
    ProbeAborted,
    cannot_pass,
    growing_backlog,
    watch,
)
from stages.collocation.results import LauncherInterrupted, ProgressEvent
from stages.contracts.slo_verdict import LoadgenSloRule

RULE = LoadgenSloRule()


def progress(pipeline: str, **counts: int) -> ProgressEvent:
    return ProgressEvent("progress", 0, "solo", pipeline, data=counts)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_the_count_rule_fires_just_past_what_a_met_probe_allows() -> None:
    pipeline = watch(100, 50, 30, RULE, 0.99)  # 3000 planned
    allowed = pipeline.max_over_slo
    assert allowed == RULE.max_passing_over_slo(3000, 0.99) == 17  # research note, 1.4
    assert cannot_pass(pipeline, allowed) is None
    assert cannot_pass(pipeline, allowed + 1) == (
        f"cannot pass: {allowed + 1} over SLO > {allowed} allowed for 3000 planned"
    )


def test_a_sequential_stage_counts_against_its_rates_last_look() -> None:
    """One over the SLO would stop a probe planned for 600 queries on its own (none may be
    over); a stage of a sequential test may count what the controller allows it."""
    assert RULE.max_passing_over_slo(600, 0.99) == 0
    pipeline = watch(20, 50, 30, RULE, 0.99, max_over_slo=7)
    assert cannot_pass(pipeline, 7) is None
    assert cannot_pass(pipeline, 8) == "cannot pass: 8 over SLO > 7 allowed by the last look"


def test_a_probe_too_short_to_ever_pass_is_not_stopped_by_the_count_rule() -> None:
    pipeline = watch(10, 50, 10, RULE, 0.99)  # 100 planned: below the 459 any pass needs
    assert pipeline.max_over_slo == -1
    assert cannot_pass(pipeline, 50) is None


def test_a_linearly_growing_backlog_is_stopped_after_five_seconds() -> None:
    noise = random.Random(1)
    samples = [(t / 2, int(30 * t / 2 + noise.randint(0, 20))) for t in range(8)]
    assert growing_backlog(samples, limit=5) is None  # 3.5 s: too early
    samples += [(t / 2, int(30 * t / 2 + noise.randint(0, 20))) for t in range(8, 12)]
    reason = growing_backlog(samples, limit=5)
    assert reason is not None and reason.startswith("backlog grows: ")
    assert growing_backlog(samples, limit=10_000) is None  # not yet past rate x SLO


def test_a_stable_queue_is_left_alone() -> None:
    noise = random.Random(2)
    fired = 0
    for _ in range(200):
        samples = [(t / 2, noise.randint(0, 40)) for t in range(40)]
        fired += any(growing_backlog(samples[:n], limit=8) for n in range(10, 41))
    assert fired <= 10  # at most 5% of stable 20 s probes, tested at every report


def test_the_monitor_raises_once_as_an_interruption_and_passes_events_on() -> None:
    seen: list[ProgressEvent] = []
    clock = Clock()
    monitor = AbortMonitor(
        {"target": watch(100, 50, 30, RULE, 0.99)}, then=seen.append, clock=clock
    )
    monitor(progress("co-runner", measured_over_slo=500, issued=10))  # not watched
    monitor(progress("target", measured_over_slo=17, issued=10))
    assert monitor.abort_reason is None
    clock.now_s = 2.0
    monitor(progress("target", measured_over_slo=18, issued=10))  # cannot pass, but at 2 s
    assert monitor.abort_reason is None  # the backlog rule has not had its 5 s yet
    clock.now_s = 5.0
    with pytest.raises(ProbeAborted) as raised:
        monitor(progress("target", measured_over_slo=18, issued=10))
    assert isinstance(raised.value, LauncherInterrupted)
    assert str(raised.value) == monitor.abort_reason and not monitor.overloaded
    monitor(progress("target", measured_over_slo=99, issued=10))  # the shutdown's reports
    assert len(seen) == 5


def test_an_overloaded_probe_is_stopped_by_its_backlog_as_a_proven_miss() -> None:
    """The count rule fires first, yet waits for the backlog rule, which proves the miss."""
    clock = Clock()
    monitor = AbortMonitor({"target": watch(100, 50, 30, RULE, 0.99)}, clock=clock)
    raised: ProbeAborted | None = None
    for step in range(20):
        clock.now_s = step / 2
        counts = {"measured_over_slo": 40 * step, "issued": 50 * step + 1, "inflight": 30 * step}
        try:
            monitor(progress("target", **counts))
        except ProbeAborted as stopped:
            raised = stopped
            break
    assert raised is not None and str(raised).startswith("backlog grows")
    assert monitor.overloaded and clock.now_s >= 5.0


def test_a_ray_names_the_pipeline_that_cannot_pass() -> None:
    clock = Clock()
    monitor = AbortMonitor(
        {"a": watch(100, 50, 30, RULE, 0.99), "b": watch(100, 50, 30, RULE, 0.99)}, clock=clock
    )
    monitor(progress("b", measured_over_slo=18, issued=10))
    clock.now_s = 6.0
    with pytest.raises(ProbeAborted, match=r"^b: cannot pass: 18 over SLO"):
        monitor(progress("b", measured_over_slo=18, issued=10))
    assert monitor.aborted_pipeline == "b"
