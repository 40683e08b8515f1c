"""Garbage collection at idle moments of an open-loop window (stages.runtime.loadgen.idle_gc):
automatic collection is off inside the window and restored after it; the issuing thread
collects only before a long enough sleep with nothing in flight, or when too much is pending."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import Field

from stages.runtime.driver import run_pipeline
from stages.runtime.loadgen import idle_gc, open_loop
from stages.runtime.loadgen.idle_gc import IdleCollector
from stages.runtime.query import Query
from stages.runtime.registry import stage_type
from stages.runtime.stage import Route, Stage, StageConfig
from stages.spec.models import PipelineSpec


class CyclesConfig(StageConfig):
    cycles: int = Field(100, description="Reference cycles left behind per query.")


@stage_type("test.cycles")
class CyclesStage(Stage[CyclesConfig]):
    """Leaves reference cycles behind: garbage that only a collection frees."""

    def run(self, query: Query) -> Route:
        _cycles(self.config.cycles)
        return None


@pytest.fixture
def collections() -> Iterator[list[tuple[str, int, int]]]:
    """(thread name, generation, monotonic ns) of every collection while the test runs."""
    seen: list[tuple[str, int, int]] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append((threading.current_thread().name, info["generation"], time.monotonic_ns()))

    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)


def test_automatic_collection_is_off_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with IdleCollector():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with IdleCollector():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def _cycles(count: int) -> None:
    """Leave `count` reference cycles behind (pending young objects no refcount frees)."""
    for _ in range(count):
        cycle: list[Any] = []
        cycle.append(cycle)


def _in_flight(timeout_s: float) -> bool:
    return False


def _idle(timeout_s: float) -> bool:
    return True


def test_a_pass_only_once_idle_with_time_left_and_garbage_pending(
    collections: list[tuple[str, int, int]],
) -> None:
    with IdleCollector() as collector:
        _cycles(2 * idle_gc.MIN_PENDING)  # a pass frees cycles after it resets the count
        later_ns = time.monotonic_ns() + 10 * idle_gc.PASS_BUDGET_NS
        collector.before_sleep(later_ns, _in_flight)  # never idle before the budget
        collector.before_sleep(time.monotonic_ns() + idle_gc.PASS_BUDGET_NS, _idle)  # no time
        assert collector.passes == 0 and not collections
        collector.before_sleep(later_ns, _idle)
        assert collector.passes == 1 and collector.forced == 0
        assert [(name, generation) for name, generation, _ in collections] == [
            (threading.current_thread().name, 0)
        ]
        assert gc.get_count()[0] < idle_gc.MIN_PENDING
        collector.before_sleep(later_ns, _idle)  # nothing worth collecting now
        assert collector.passes == 1


def test_the_wait_for_idle_ends_a_pass_budget_before_the_next_issue() -> None:
    timeouts: list[float] = []

    def in_flight(timeout_s: float) -> bool:
        timeouts.append(timeout_s)
        return False

    with IdleCollector() as collector:
        _cycles(2 * idle_gc.MIN_PENDING)
        collector.before_sleep(time.monotonic_ns() + 3 * idle_gc.PASS_BUDGET_NS, in_flight)
    (timeout_s,) = timeouts
    assert 0 < timeout_s <= 2 * idle_gc.PASS_BUDGET_NS / 1e9


def test_the_pending_bound_forces_a_pass_with_queries_in_flight() -> None:
    with IdleCollector() as collector:
        _cycles(idle_gc.FORCE_PENDING)
        collector.before_sleep(time.monotonic_ns(), _in_flight)
        assert collector.passes == 1 and collector.forced == 1
        assert gc.get_count()[0] < idle_gc.MIN_PENDING


def test_every_tenth_pass_includes_the_middle_generation(
    collections: list[tuple[str, int, int]],
) -> None:
    with IdleCollector() as collector:
        for _ in range(idle_gc.OLDER_EVERY):
            _cycles(2 * idle_gc.MIN_PENDING)
            collector.before_sleep(time.monotonic_ns() + 10 * idle_gc.PASS_BUDGET_NS, _idle)
    generations = [generation for _, generation, _ in collections]
    assert generations == [0] * (idle_gc.OLDER_EVERY - 1) + [1]


def _pipeline(loadgen: dict[str, Any], cycles: int) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {
            "name": "p",
            "loadgen": {"duration_s": 1.0, "timeout_s": 20, **loadgen},
            "stages": [{"id": "garbage", "type": "test.cycles", "config": {"cycles": cycles}}],
        }
    )


def test_an_open_loop_window_collects_only_in_the_issuing_thread(
    collections: list[tuple[str, int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 200 q/s (5 ms apart) a query is seldom in flight at the next issue: the garbage the
    stage leaves is collected by the issuer between queries, never in the stage's thread
    while queries are issued."""
    used: list[IdleCollector] = []

    class Recorded(IdleCollector):
        def __enter__(self) -> IdleCollector:
            used.append(self)
            return super().__enter__()

    monkeypatch.setattr(open_loop, "IdleCollector", Recorded)
    result, _ = run_pipeline(_pipeline({"type": "server", "rate": 200}, 100), seed=1)
    assert result.status == "ok" and result.counters.ok > 100
    (collector,) = used
    assert collector.passes > 0 and collector.forced == 0
    window = range(result.outcome.start_ns, result.outcome.last_issue_ns + 1)
    in_window = {name for name, _, at_ns in collections if at_ns in window}
    assert in_window == {threading.current_thread().name}  # the issuer's, never the stage's


def test_closed_loop_keeps_automatic_collection(collections: list[tuple[str, int, int]]) -> None:
    """Closed loop always has a query in flight: CPython collects as usual, in the stage's
    thread that leaves the garbage."""
    result, _ = run_pipeline(_pipeline({"type": "closed_loop"}, 1000), seed=1)
    assert result.status == "ok"
    assert "stage:garbage" in {name for name, _, _ in collections}
