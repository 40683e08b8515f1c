"""The recorder's hand-over of rows from producer threads to its writer thread: by the owner at
its deadline, and by the writer itself when the owner is stuck in a long call."""

from __future__ import annotations

import time
from typing import Any

import pytest

from stages.runtime import recorder as recorder_module
from stages.runtime import row_slices
from stages.runtime.recorder import Recorder


def stage_row(query_id: int) -> tuple[Any, ...]:
    """An ok stage row of stage 0 (layout: `recorder.STAGE_COLUMNS`)."""
    return (query_id, 0, 1, 0, 1, 2, 0, None, None, None, None, None, None)


def query_row(query_id: int) -> tuple[Any, ...]:
    """An ok, measured query row (layout: `recorder.QUERY_COLUMNS`)."""
    return (query_id, 0, 1, 2, 0, 1, False)


@pytest.mark.slow
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


@pytest.mark.slow
def test_draining_while_the_owner_appends_and_flushes_loses_and_repeats_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every buffer overdue at every tick, ticks as often as possible: the writer takes rows
    # while the owner appends to the same list and swaps it at its own flushes.
    monkeypatch.setattr(recorder_module, "FLUSH_PERIOD_NS", 0)
    monkeypatch.setattr(recorder_module, "DRAIN_TICK_S", 0.0005)
    # No pause between conversion slices: the writer takes as often as it can.
    monkeypatch.setattr(row_slices, "SLICE_PAUSE_S", 0.0)
    recorder = Recorder(None, {}, ["s"], "x")
    buffer = recorder.buffer()
    total = 200_000
    for query_id in range(total):
        buffer.stage_rows.append(stage_row(query_id))
        buffer.query_rows.append(query_row(query_id))
        if query_id % 7_919 == 0:
            buffer.flush()
        if query_id % 10_007 == 0:
            # The owner in a stage call that lets go of the interpreter lock, mid-buffer: the
            # case the writer's own takes exist for. Without it the owner appends 200,000 rows
            # in ~0.15 s holding the lock, and whether the writer takes any was left to chance.
            # 10 ms: 20 writer ticks, and room for the writer thread's wake-up on a loaded
            # machine (with 2 ms it took one row set too few under a load of 7 on 2 cores).
            time.sleep(0.01)
    recorder.close()
    for table in ("stage_events", "queries"):
        ids = recorder.table(table)["query_id"]
        assert sorted(ids) == list(range(total)), table
    # The test raced for real: the writer took rows itself, not only at the owner's flushes.
    assert len(recorder.kept_in_memory["queries"]) > total // 7_919 + 2


def test_the_live_verdict_counts_match_the_query_latency_view_rules() -> None:
    # query row: query_id, scheduled_ns, issued_ns, completed_ns, status, samples, warmup
    rows = [
        (0, 0, 1, 40_000_000, 0, 1, False),  # ok within 50 ms
        (1, 0, 1, 60_000_000, 0, 1, False),  # ok, 60 ms: over
        (2, 0, 1, 90_000_000, 0, 1, True),  # warm-up: not counted at all
        (3, 0, 1, 5_000_000, 1, 1, False),  # error: over whatever its time
        (4, 0, None, None, 3, 1, False),  # timeout (status 3): over
        (5, 0, 1, 50_000_000, 0, 1, False),  # exactly the SLO: not over (the view's `>`)
    ]
    recorder = Recorder(None, {}, ["s"], "x", slo_ms=50)
    buffer = recorder.buffer()
    buffer.query_rows.extend(rows)
    buffer.flush()
    recorder.close()
    assert (recorder.measured, recorder.measured_over_slo) == (5, 3)
    no_slo = Recorder(None, {}, ["s"], "x")
    no_slo.buffer().query_rows.extend(rows)
    no_slo.close()
    assert (no_slo.measured, no_slo.measured_over_slo) == (5, 2)  # only the failures


def test_the_live_p99_covers_the_latest_window_of_ok_measured_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(recorder_module, "LATENCY_WINDOW", 100)
    recorder = Recorder(None, {}, ["s"], "x")
    assert recorder.live_p99_ms is None
    buffer = recorder.buffer()
    # 150 ok queries of 1..150 ms, then a failed and a warm-up one of 10 s: not counted.
    buffer.query_rows.extend((i, 0, 1, (i + 1) * 1_000_000, 0, 1, False) for i in range(150))
    buffer.query_rows.append((150, 0, 1, 10**10, 1, 1, False))
    buffer.query_rows.append((151, 0, 1, 10**10, 0, 1, True))
    buffer.flush()
    recorder.close()
    # The newest 100 (51..150 ms), nearest rank below: the 99th of 100 is 150 ms.
    assert recorder.live_p99_ms == 150.0
    window = Recorder(None, {}, ["s"], "x")
    window.buffer().query_rows.extend((i, 0, 1, 1_000_000, 0, 1, False) for i in range(10))
    window.close()
    assert window.live_p99_ms == 1.0


def test_conversion_releases_the_row_tuples_it_converted() -> None:
    rows = [query_row(i) for i in range(300)]
    columns = row_slices.rows_to_arrays(
        recorder_module.QUERY_COLUMNS,
        recorder_module._QUERY_ROW_TYPES,
        rows,
        row_slices.IssueSchedule(),
    )
    assert columns["query_id"].to_pylist() == list(range(300))
    assert rows == [None] * 300  # freed slice by slice, inside the slices' GIL holds


def test_short_stage_rows_write_nulls_in_the_columns_after_theirs() -> None:
    """A stage with no outcome and no join writes `SHORT_STAGE_ROW` fields; its rows get the
    same columns, with nulls after theirs, even in a hand-off beside full rows."""
    recorder = Recorder(None, {}, ["s"], "x")
    short = stage_row(0)[: recorder_module.SHORT_STAGE_ROW]
    full = (1, 0, 1, 0, 1, 2, 0, 5, 3, 4, None, None, 0.5)
    buffer = recorder.buffer()
    buffer.stage_rows.extend([short] * row_slices.SLICE_ROWS + [full])
    buffer.flush()
    recorder.close()
    table = recorder.table("stage_events")
    assert set(table) == set(recorder_module.STAGE_COLUMNS)
    assert table["finished_ns"] == [2] * (row_slices.SLICE_ROWS + 1)
    assert table["tokens"] == [None] * row_slices.SLICE_ROWS + [3]
    assert table["joined_ns"] == [None] * row_slices.SLICE_ROWS + [4]
    assert table["loss"] == [None] * row_slices.SLICE_ROWS + [0.5]
    assert recorder.write_errors == []


def test_short_stage_rows_after_full_ones_end_their_columns_with_nulls() -> None:
    recorder = Recorder(None, {}, ["s"], "x")
    short = stage_row(0)[: recorder_module.SHORT_STAGE_ROW]
    full = (1, 0, 1, 0, 1, 2, 0, 5, 3, 4, None, None, 0.5)
    buffer = recorder.buffer()
    buffer.stage_rows.extend([full] * row_slices.SLICE_ROWS + [short] * 3)
    buffer.flush()
    recorder.close()
    table = recorder.table("stage_events")
    assert table["tokens"] == [3] * row_slices.SLICE_ROWS + [None] * 3
    assert table["query_id"] == [1] * row_slices.SLICE_ROWS + [0] * 3
