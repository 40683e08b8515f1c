"""The recorder writer keeps its GIL-holding conversion slices clear of the open-loop issuer's
announced next issue (`IssueSchedule`), with a bounded wait."""

from __future__ import annotations

import pytest

from stages.runtime import recorder as recorder_module
from stages.runtime import row_slices
from stages.runtime.driver import run_pipeline
from stages.runtime.recorder import QUERY_COLUMNS
from stages.runtime.row_slices import (
    ISSUE_CLEAR_AFTER_NS,
    ISSUE_CLEAR_BEFORE_NS,
    SLICE_WAIT_MAX_NS,
    IssueSchedule,
)
from stages.spec.models import PipelineSpec


class FakeClock:
    """`time` for `row_slices`: `sleep` advances `monotonic_ns` and is logged."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000
        self.sleeps_ns: list[int] = []
        self.on_wake: list[object] = []

    def monotonic_ns(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.sleeps_ns.append(round(seconds * 1e9))
        self.now_ns += round(seconds * 1e9)
        for hook in self.on_wake:
            hook()  # type: ignore[operator]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(row_slices, "time", fake)
    return fake


def test_no_wait_without_an_issue_announced_or_with_one_far_ahead(clock: FakeClock) -> None:
    schedule = IssueSchedule()
    schedule.wait_for_gap()  # nothing announced: closed loop, offline
    schedule.next_issue_ns = clock.now_ns + ISSUE_CLEAR_BEFORE_NS + 1
    schedule.wait_for_gap()
    schedule.next_issue_ns = clock.now_ns - ISSUE_CLEAR_AFTER_NS - 1  # long past
    schedule.wait_for_gap()
    assert clock.sleeps_ns == []


def test_an_issue_due_soon_is_waited_out_with_its_first_stage(clock: FakeClock) -> None:
    schedule = IssueSchedule()
    schedule.next_issue_ns = clock.now_ns + 150_000
    schedule.wait_for_gap()
    assert clock.sleeps_ns == [150_000 + ISSUE_CLEAR_AFTER_NS]
    clock.sleeps_ns.clear()
    schedule.next_issue_ns = clock.now_ns - 20_000  # issued 20 us ago: entering the pipeline
    schedule.wait_for_gap()
    assert clock.sleeps_ns == [ISSUE_CLEAR_AFTER_NS - 20_000]


def test_the_wait_is_bounded_when_issues_follow_each_other(clock: FakeClock) -> None:
    schedule = IssueSchedule()

    def announce_the_next() -> None:  # the issuer always has one due 100 us ahead
        schedule.next_issue_ns = clock.now_ns + 100_000

    clock.on_wake.append(announce_the_next)
    announce_the_next()
    start_ns = clock.now_ns
    schedule.wait_for_gap()
    assert clock.now_ns - start_ns == SLICE_WAIT_MAX_NS
    assert len(clock.sleeps_ns) > 1


def test_every_conversion_slice_asks_for_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    class Counting(IssueSchedule):
        def wait_for_gap(self) -> None:
            asked.append(1)

    monkeypatch.setattr(row_slices, "SLICE_PAUSE_S", 0.0)
    rows = [(i, 0, 1, 2, 0, 1, False) for i in range(200)]
    columns = row_slices.rows_to_arrays(
        QUERY_COLUMNS, recorder_module._QUERY_ROW_TYPES, rows, Counting()
    )
    assert columns["query_id"].to_pylist() == list(range(200))
    assert len(asked) == -(-200 // row_slices.SLICE_ROWS)


def _noop_pipeline(loadgen: dict[str, object]) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {"name": "p", "loadgen": loadgen, "stages": [{"id": "a", "type": "noop"}]}
    )


def test_an_open_loop_issuer_announces_each_issue_and_closed_loop_none() -> None:
    result, recorder = run_pipeline(
        _noop_pipeline({"type": "constant", "rate": 500, "max_queries": 20}), seed=1
    )
    assert result.status == "ok"
    last_scheduled_ns = max(recorder.table("queries")["scheduled_ns"])
    assert recorder.issue_schedule.next_issue_ns == last_scheduled_ns
    result, recorder = run_pipeline(
        _noop_pipeline({"type": "closed_loop", "concurrency": 1, "max_queries": 20}), seed=1
    )
    assert result.status == "ok" and recorder.issue_schedule.next_issue_ns == 0
