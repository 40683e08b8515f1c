"""The recorder's hand-over of rows from producer threads to its writer thread: by the owner at
its deadline, and by the writer itself when the owner is stuck in a long call."""

from __future__ import annotations

import time
from typing import Any

import pytest

from stages.runtime import recorder as recorder_module
from stages.runtime.recorder import Recorder


def stage_row(query_id: int) -> tuple[Any, ...]:
    """An ok stage row of stage 0 (layout: `recorder.STAGE_COLUMNS`)."""
    return (query_id, 0, 1, 0, 1, 2, 0, None, None, None, None, None, None)


def query_row(query_id: int) -> tuple[Any, ...]:
    """An ok, measured query row (layout: `recorder.QUERY_COLUMNS`)."""
    return (query_id, 0, 1, 2, 0, 1, False)


def test_a_hand_off_of_query_rows_alone_is_written() -> None:
    # The load generator's buffer holds only query rows (not-issued queries).
    recorder = Recorder(None, {}, ["s"], "x")
    buffer = recorder.buffer()
    buffer.query_rows.extend(query_row(i) for i in range(3))
    buffer.flush()
    recorder.close()
    assert recorder.table("queries")["query_id"] == [0, 1, 2]
    assert recorder.table("stage_events") == {}


def test_the_writer_takes_overdue_rows_while_their_owner_is_busy() -> None:
    recorder = Recorder(None, {}, ["s"], "x")
    buffer = recorder.buffer()
    buffer.stage_rows.extend(stage_row(i) for i in range(5))
    buffer.query_rows.extend(query_row(i) for i in range(5))
    buffer.next_flush_ns = time.monotonic_ns()  # due now; the owner never flushes
    deadline = time.monotonic() + 5
    while not recorder.kept_in_memory["queries"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.table("queries")["query_id"] == list(range(5))
    assert recorder.table("stage_events")["query_id"] == list(range(5))
    assert buffer.stage_rows == [] and buffer.query_rows == []
    # Back from its call, the owner appends and flushes as usual: nothing is written twice.
    buffer.stage_rows.append(stage_row(5))
    buffer.flush()
    recorder.close()
    assert recorder.table("stage_events")["query_id"] == list(range(6))


def test_a_buffer_not_yet_due_is_left_to_its_owner() -> None:
    recorder = Recorder(None, {}, ["s"], "x")
    buffer = recorder.buffer()
    buffer.stage_rows.append(stage_row(0))
    time.sleep(5 * recorder_module.DRAIN_TICK_S)  # several writer ticks, deadline ~1 s away
    assert recorder.kept_in_memory["stage_events"] == []
    recorder.close()  # what a thread still holds at close is written
    assert recorder.table("stage_events")["query_id"] == [0]


def test_draining_while_the_owner_appends_and_flushes_loses_and_repeats_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every buffer overdue at every tick, ticks as often as possible: the writer takes rows
    # while the owner appends to the same list and swaps it at its own flushes.
    monkeypatch.setattr(recorder_module, "FLUSH_PERIOD_NS", 0)
    monkeypatch.setattr(recorder_module, "DRAIN_TICK_S", 0.0005)
    recorder = Recorder(None, {}, ["s"], "x")
    buffer = recorder.buffer()
    total = 200_000
    for query_id in range(total):
        buffer.stage_rows.append(stage_row(query_id))
        buffer.query_rows.append(query_row(query_id))
        if query_id % 7_919 == 0:
            buffer.flush()
    recorder.close()
    for table in ("stage_events", "queries"):
        ids = recorder.table(table)["query_id"]
        assert sorted(ids) == list(range(total)), table
    # The test raced for real: the writer took rows itself, not only at the owner's flushes.
    assert len(recorder.kept_in_memory["queries"]) > total // 7_919 + 2
