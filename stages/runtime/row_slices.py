"""Row tuples to Arrow columns in the recorder's writer thread, in slices that keep out of
the measured threads' way: a short hold of the interpreter lock each, a real pause between
them, and none started just before an open-loop issue (`IssueSchedule`)."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

SLICE_ROWS = 64  # rows converted per GIL hold in the writer thread (~0.035 ms here)
# A real pause between slices, not `sleep(0)`: CPython 3.11 asks a GIL holder to let go only
# after a waiter saw no switch for 5 ms, and `sleep(0)` drops and retakes the GIL within a
# microsecond, a switch that restarts that wait: an issuing thread waited up to 1.4 ms behind
# one conversion. A pause leaves the waiter the GIL at once (0.24-0.38 ms at most).
SLICE_PAUSE_S = 50e-6
# An open-loop issuer announces its next issue (`IssueSchedule`, the recorder's
# `issue_schedule`); the writer starts no slice that could still hold the GIL when it is due
# (ISSUE_CLEAR_BEFORE_NS before it) or while the query just issued enters the pipeline
# (ISSUE_CLEAR_AFTER_NS after it). Waiting is bounded per slice (SLICE_WAIT_MAX_NS), so the
# writer keeps up at any rate.
ISSUE_CLEAR_BEFORE_NS = 200_000
ISSUE_CLEAR_AFTER_NS = 50_000
SLICE_WAIT_MAX_NS = 1_000_000


class IssueSchedule:
    """The open-loop issuer's next issue time, read by the writer to keep its conversion
    slices out of the way of issuing (`wait_for_gap`). 0: no issue announced (closed loop,
    offline), the writer never waits."""

    __slots__ = ("next_issue_ns",)

    def __init__(self) -> None:
        self.next_issue_ns = 0
        """When the issuer issues next (monotonic ns); written by the issuer only."""

    def wait_for_gap(self) -> None:
        """Sleep while an issue is due within ISSUE_CLEAR_BEFORE_NS or was due less than
        ISSUE_CLEAR_AFTER_NS ago, at most SLICE_WAIT_MAX_NS in all."""
        now_ns = time.monotonic_ns()
        give_up_ns = now_ns + SLICE_WAIT_MAX_NS
        while now_ns < give_up_ns:
            due_in_ns = self.next_issue_ns - now_ns
            if not -ISSUE_CLEAR_AFTER_NS < due_in_ns < ISSUE_CLEAR_BEFORE_NS:
                return
            clear_ns = min(give_up_ns, now_ns + due_in_ns + ISSUE_CLEAR_AFTER_NS)
            time.sleep((clear_ns - now_ns) / 1e9)
            now_ns = time.monotonic_ns()


def rows_to_arrays(
    names: tuple[str, ...],
    types: tuple[pa.DataType, ...],
    rows: list[Any],
    schedule: IssueSchedule,
) -> dict[str, pa.ChunkedArray]:
    """Row tuples -> Arrow columns, a slice at a time with a GIL release between slices, so
    the measured threads never wait more than one slice on the writer, and no slice started
    just before an announced issue (`schedule`).

    Each slice is converted in one call, as a struct array of its rows (half the time of a
    call per column), whose fields are the columns. The rows of one slice have one width (a
    row of another raises); short rows (`recorder.SHORT_STAGE_ROW`) leave the columns after
    theirs null.

    Consumes `rows`: each slice's tuples are released (their places set to None) inside that
    slice's hold of the GIL. Freed all at once after the write, a hand-off's ~2,000 tuples
    held the GIL 65-500 us at an unannounced moment, the issuer's largest stall left in the
    writer (`perf record` on `collobench run`: `tupledealloc` in the recorder thread)."""
    chunks: list[list[pa.Array]] = [[] for _ in names]
    # Rows a column still owes nulls for (short rows): one null chunk per run of them, added
    # before the column's next real chunk (a column's chunks need not line up with another's).
    nulls_owed = [0] * len(names)
    structs: dict[int, pa.StructType] = {}
    wait_for_gap = schedule.wait_for_gap
    for start in range(0, len(rows), SLICE_ROWS):
        wait_for_gap()
        part = rows[start : start + SLICE_ROWS]
        count, width = len(part), len(part[0])
        struct = structs.get(width)
        if struct is None:
            fields = [pa.field(name, kind) for name, kind in zip(names, types, strict=True)]
            struct = structs[width] = pa.struct(fields[:width])
        converted = pa.array(part, type=struct)
        rows[start : start + count] = [None] * count
        del part  # the slice's last references: its tuples are freed here
        for index in range(width):
            if nulls_owed[index]:
                chunks[index].append(pa.nulls(nulls_owed[index], type=types[index]))
                nulls_owed[index] = 0
            chunks[index].append(converted.field(index))
        for index in range(width, len(types)):
            nulls_owed[index] += count
        time.sleep(SLICE_PAUSE_S)  # the GIL to issuing and stage threads (see SLICE_PAUSE_S)
    for index, owed in enumerate(nulls_owed):
        if owed:
            chunks[index].append(pa.nulls(owed, type=types[index]))
    return {
        name: pa.chunked_array(parts, type=arrow_type)
        for name, parts, arrow_type in zip(names, chunks, types, strict=True)
    }
