"""Event recording: per-thread row buffers on the hot path, one background writer for Parquet.

Each producer thread (a stage thread, the load generator) owns a `RowBuffer` and appends plain
tuples to it without locks. At least once a second, or every `CHUNK_ROWS` rows, the owner hands
the filled lists to the `Recorder`'s writer thread and starts new ones; the writer turns rows
into Arrow columns and writes one chunk file per hand-off. An owner busy in a long stage call,
or waiting for its next query, does not hand over, so the writer also takes the rows of every
overdue buffer itself (`_take`, lock-free: the owner only appends). A crash therefore loses at
most the last second of rows (plus one `DRAIN_TICK_S`), and memory stays bounded however long
the run.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.rundir.schemas import KEY_COLUMNS, SCHEMAS, STAGE_WRITTEN_TABLES
from stages.rundir.tables import ChunkWriter
from stages.runtime.counters import p99_ms
from stages.runtime.os_threads import lower_priority, name_os_thread
from stages.runtime.query import STATUS_NAMES
from stages.runtime.row_slices import IssueSchedule, rows_to_arrays

CHUNK_ROWS = 65_536
# Recent latencies behind the live p99 of progress displays, computed by the writer at each
# hand-off (a partial sort of at most this many, ~20 us), so a progress report only reads it.
LATENCY_WINDOW = 2_000
FLUSH_PERIOD_NS = 1_000_000_000
# The writer looks for overdue buffers this often; it bounds how late past its deadline a row
# held by a thread busy in a long call reaches disk.
DRAIN_TICK_S = 0.05

# Row layouts: the tuples producer threads append are their table's columns after the key
# columns (stages.rundir.schemas, which the layouts are derived from once, here), in schema
# order, with `stage` and `status` as codes: the stage's index in `stage_names` and the index
# of the status in STATUS_NAMES (names are looked up in C at the write).
# stage row: query_id, stage_index, visit, enqueued_ns, started_ns, finished_ns, status,
#            first_token_ns, tokens, joined_ns, graded, correct, loss, prompt_tokens
#            (a stage that records no outcome and joins nothing writes only the first
#            SHORT_STAGE_ROW fields, up to status: the rest are null, and the tuple is built
#            per visit)
# query row: query_id, scheduled_ns, issued_ns, completed_ns, status, samples, warmup
_CODE_TYPES = {"stage": pa.int32(), "status": pa.int8()}


def _row_layout(table: str) -> tuple[tuple[str, ...], tuple[pa.DataType, ...]]:
    """A table's row-tuple columns (its schema less the key columns) and their Arrow types
    (codes for `_CODE_TYPES` columns)."""
    fields = [field for field in SCHEMAS[table] if field.name not in KEY_COLUMNS]
    names = tuple(field.name for field in fields)
    return names, tuple(_CODE_TYPES.get(field.name, field.type) for field in fields)


STAGE_COLUMNS, _STAGE_ROW_TYPES = _row_layout("stage_events")
QUERY_COLUMNS, _QUERY_ROW_TYPES = _row_layout("queries")
SHORT_STAGE_ROW = STAGE_COLUMNS.index("status") + 1
# Tables a stage may write through `Recorder.write_rows` (StageContext.write_rows).
EXTRA_TABLES = STAGE_WRITTEN_TABLES
_STATUS_STRINGS = pa.array(STATUS_NAMES, type=pa.string())
# Typed scalars: an untyped Python number makes pyarrow infer its type, which imports pandas
# (0.4-1 s, at the first hand-off: inside the load window; stages.rundir.arrow_pandas).
_OK_STATUS = pa.scalar(0, type=pa.int8())


def _as_numpy(column: pa.ChunkedArray) -> np.ndarray:
    """An int64 column as numpy, read from its buffers: Arrow's `to_numpy` imports pandas
    (0.4-1 s, at the first hand-off: inside the load window). With nulls, `to_numpy`."""
    if column.null_count:
        return np.asarray(column.to_numpy())
    parts = [
        np.frombuffer(chunk.buffers()[1], np.int64, len(chunk), chunk.offset * 8)
        for chunk in column.chunks
    ]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _take(rows: list[Any]) -> list[Any]:
    """Remove and return the rows present now, while their owner may still append.

    Safe without a lock under the GIL because the owner only appends at the end and only the
    writer thread removes: `len`, the slice copy and the prefix delete are each atomic, and a
    row appended between them stays for the next take."""
    count = len(rows)
    if not count:
        return []
    taken = rows[:count]
    del rows[:count]
    return taken


class RowBuffer:
    """Rows produced by one thread; only that thread appends and flushes, and only the writer
    thread removes rows (`_take`)."""

    __slots__ = ("_recorder", "drained_ns", "next_flush_ns", "query_rows", "stage_rows")

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.stage_rows: list[tuple[Any, ...]] = []
        self.query_rows: list[tuple[Any, ...]] = []
        self.next_flush_ns = time.monotonic_ns() + FLUSH_PERIOD_NS
        self.drained_ns = 0
        """When the writer last took this buffer's rows itself (writer thread only)."""

    def due(self, now_ns: int) -> bool:
        return now_ns >= self.next_flush_ns or len(self.stage_rows) >= CHUNK_ROWS

    def flush(self) -> None:
        """Hand the rows to the writer and start fresh lists (callers re-read the attributes)."""
        if self.stage_rows or self.query_rows:
            self._recorder.submit(self.stage_rows, self.query_rows)
            self.stage_rows = []
            self.query_rows = []
        self.next_flush_ns = time.monotonic_ns() + FLUSH_PERIOD_NS


class Recorder:
    """Owns the writer thread and the chunk writers of one pipeline phase."""

    def __init__(
        self,
        run_dir: Path | None,
        keys: dict[str, Any],
        stage_names: Sequence[str],
        label: str,
        keep_in_memory: bool = True,
        slo_ms: float | None = None,
    ) -> None:
        """`run_dir` None keeps rows in memory (tests), or drops them if not `keep_in_memory`
        (overhead studies of the hot path alone). `slo_ms`: the pipeline's latency objective,
        against which the live `measured_over_slo` count is kept (None: only failures)."""
        self.stage_names = list(stage_names)
        self._stage_strings = pa.array(self.stage_names, type=pa.string())
        self._keep_in_memory = keep_in_memory
        self._inbox: queue.SimpleQueue[tuple[Any, list[Any]] | None] = queue.SimpleQueue()
        self._buffers: list[RowBuffer] = []
        self._writers: dict[str, ChunkWriter] = {}
        self._run_dir = run_dir
        self._keys = keys
        self._label = label
        if run_dir is not None:
            for table in ("queries", "stage_events", "errors"):
                self._writers[table] = ChunkWriter(run_dir, table, label, keys)
                self._writers[table].warm_up()
        self.kept_in_memory: dict[str, list[dict[str, list[Any]]]] = {
            "queries": [],
            "stage_events": [],
            **{table: [] for table in EXTRA_TABLES},
        }
        self.write_errors: list[str] = []
        self._closed = False
        self._recent_latency_ns = np.empty(0, dtype=np.int64)
        self.live_p99_ms: float | None = None
        """p99 latency of the latest LATENCY_WINDOW ok, measured queries written (None: none
        yet), as fresh as the rows."""
        self._slo_ns = None if slo_ms is None else int(slo_ms * 1e6)
        self.measured = 0
        """Non-warm-up queries written so far, failures included (the verdict's N, live)."""
        self.measured_over_slo = 0
        """Of those, the ones not ok or later than `slo_ms` after their schedule (its T)."""
        self.issue_schedule = IssueSchedule()
        """Announced by the open-loop issuer; the writer's slices keep clear of it."""
        self._thread = threading.Thread(target=self._write_loop, name="recorder", daemon=True)
        self._thread.start()

    def buffer(self) -> RowBuffer:
        """A new row buffer for the calling thread, watched by the writer for overdue rows."""
        buffer = RowBuffer(self)
        self._buffers.append(buffer)
        return buffer

    def submit(self, stage_rows: list[Any], query_rows: list[Any]) -> None:
        self._inbox.put((stage_rows, query_rows))

    def write_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Rows of an extra table (`EXTRA_TABLES`), as dicts of its columns without the key
        columns; written by the writer thread as a chunk of their own, off the caller's path.
        This is `StageContext.write_rows` of every stage of the pipeline."""
        if table not in EXTRA_TABLES:
            raise ValueError(
                f"{table!r} is not a table stages write (one of {sorted(EXTRA_TABLES)})"
            )
        if rows:
            self._inbox.put((table, rows))

    def _write_loop(self) -> None:
        # The writer is not measured: the measured threads come first (os_threads).
        name_os_thread("recorder")
        lower_priority()
        next_drain_ns = time.monotonic_ns() + int(DRAIN_TICK_S * 1e9)
        while True:
            try:
                item = self._inbox.get(timeout=DRAIN_TICK_S)
            except queue.Empty:
                pass  # nothing handed over: only look for overdue buffers
            else:
                if item is None:
                    # Rows of a thread still stuck in a call at close (a hang past the timeout)
                    # ended before it: keep them.
                    self._drain(drain_all=True)
                    return
                self._write_item(*item)
            now_ns = time.monotonic_ns()
            if now_ns >= next_drain_ns:
                self._drain(drain_all=False)
                next_drain_ns = now_ns + int(DRAIN_TICK_S * 1e9)

    def _write_item(self, first: Any, rows: list[Any]) -> None:
        """One inbox item: an extra table's rows (`first` names it) or an owner's hand-off."""
        if isinstance(first, str):
            try:
                self._write_extra(first, rows)
            except Exception as error:
                self.write_errors.append(f"{first}: {type(error).__name__}: {error}")
            return
        # The owner no longer appends to handed-off lists. Emptied after the write, so a drain
        # that still finds them on a buffer its owner is swapping writes nothing twice (drains
        # run on this thread, never during the write).
        self._write_hand_off(first, rows)
        first.clear()
        rows.clear()

    def _drain(self, drain_all: bool) -> None:
        """Write the rows of each buffer whose owner is overdue (busy in a long stage call),
        at most once per flush period per buffer; `drain_all` at close takes every buffer."""
        now_ns = time.monotonic_ns()
        for buffer in tuple(self._buffers):
            if not drain_all and now_ns < max(
                buffer.next_flush_ns, buffer.drained_ns + FLUSH_PERIOD_NS
            ):
                continue
            stage_rows, query_rows = _take(buffer.stage_rows), _take(buffer.query_rows)
            if stage_rows or query_rows:
                buffer.drained_ns = now_ns
                self._write_hand_off(stage_rows, query_rows)

    def _write_hand_off(self, stage_rows: list[Any], query_rows: list[Any]) -> None:
        """One chunk per table; each table on its own: a failed stage_events chunk must not
        take the queries of the same hand-off with it (nor kill the stage threads: a full
        disk is reported)."""
        if stage_rows:
            try:
                self._write("stage_events", self._stage_arrays(stage_rows))
            except Exception as error:
                self.write_errors.append(f"stage_events: {type(error).__name__}: {error}")
        if query_rows:
            try:
                self._write("queries", self._query_arrays(query_rows))
            except Exception as error:
                self.write_errors.append(f"queries: {type(error).__name__}: {error}")

    def _stage_arrays(self, rows: list[tuple[Any, ...]]) -> dict[str, pa.ChunkedArray]:
        columns = rows_to_arrays(STAGE_COLUMNS, _STAGE_ROW_TYPES, rows, self.issue_schedule)
        columns["stage"] = self._stage_strings.take(columns["stage"])
        columns["status"] = _STATUS_STRINGS.take(columns["status"])
        return columns

    def _query_arrays(self, rows: list[tuple[Any, ...]]) -> dict[str, pa.ChunkedArray]:
        columns = rows_to_arrays(QUERY_COLUMNS, _QUERY_ROW_TYPES, rows, self.issue_schedule)
        measured = pc.invert(columns["warmup"])
        measured_ok = pc.and_(pc.equal(columns["status"], _OK_STATUS), measured)
        latency = pc.subtract(
            pc.filter(columns["completed_ns"], measured_ok),
            pc.filter(columns["scheduled_ns"], measured_ok),
        )
        self._update_live_p99(latency)
        self._count_measured(measured, measured_ok, latency)
        columns["status"] = _STATUS_STRINGS.take(columns["status"])
        return columns

    def _update_live_p99(self, latency: pa.ChunkedArray) -> None:
        """The live p99 over the latest LATENCY_WINDOW latencies (nearest rank, as
        `stages.runtime.counters.p99_ms`)."""
        newest = _as_numpy(latency.slice(max(0, len(latency) - LATENCY_WINDOW)))
        window = np.concatenate([self._recent_latency_ns, newest])[-LATENCY_WINDOW:]
        self._recent_latency_ns = window
        self.live_p99_ms = p99_ms(window)

    def _count_measured(
        self, measured: pa.ChunkedArray, measured_ok: pa.ChunkedArray, latency: pa.ChunkedArray
    ) -> None:
        """The live verdict counts, on the writer thread (off the stage threads' hot path, as
        fresh as the rows: at most a flush period late). Every status but ok counts as over
        the SLO, as in the `query_latency` view."""
        queries = pc.sum(measured).as_py() or 0
        ok = pc.sum(measured_ok).as_py() or 0
        late = 0
        if self._slo_ns is not None and len(latency):
            slo_ns = pa.scalar(self._slo_ns, type=pa.int64())
            late = pc.sum(pc.greater(latency, slo_ns)).as_py() or 0
        self.measured += queries
        self.measured_over_slo += queries - ok + late

    def _write(self, table: str, columns: dict[str, pa.ChunkedArray]) -> None:
        writer = self._writers.get(table)
        if writer is None:
            if self._keep_in_memory:
                self.kept_in_memory[table].append(
                    {name: column.to_pylist() for name, column in columns.items()}
                )
        else:
            writer.write_arrays(columns)

    def _write_extra(self, table: str, rows: list[dict[str, Any]]) -> None:
        columns = {name: [row.get(name) for row in rows] for name in rows[0]}
        if self._run_dir is None:
            if self._keep_in_memory:
                self.kept_in_memory[table].append(columns)
            return
        writer = self._writers.get(table)
        if writer is None:  # created on first use: the table exists only when someone wrote it
            writer = ChunkWriter(self._run_dir, table, self._label, self._keys)
            self._writers[table] = writer
        writer.write_columns(columns)

    def write_errors_table(self, errors: list[dict[str, Any]]) -> None:
        """One row per distinct stage error (stage, first_query_id, count, error)."""
        writer = self._writers.get("errors")
        if writer is not None and errors:
            columns = {name: [row[name] for row in errors] for name in errors[0]}
            try:
                writer.write_columns(columns)
            except OSError as error:  # a full disk: reported with the phase's status
                self.write_errors.append(f"errors: {type(error).__name__}: {error}")

    def close(self, timeout_s: float = 30.0) -> None:
        """Write everything submitted so far and stop the writer thread (once; again is a
        no-op). After it, `write_errors` holds every failed write of the phase."""
        if not self._closed:
            self._closed = True
            self._inbox.put(None)
        self._thread.join(timeout_s)

    def table(self, name: str) -> dict[str, list[Any]]:
        """In-memory mode: all rows of `queries`, `stage_events` or an extra table as columns."""
        merged: dict[str, list[Any]] = {}
        for chunk in self.kept_in_memory[name]:
            for column, values in chunk.items():
                merged.setdefault(column, []).extend(values)
        return merged
