"""Event recording: per-thread row buffers on the hot path, one background writer for Parquet.

Each producer thread (a stage thread, the load generator) owns a `RowBuffer` and appends plain
tuples to it without locks. At least once a second, or every `CHUNK_ROWS` rows, the owner hands
the filled lists to the `Recorder`'s writer thread and starts new ones; the writer turns rows
into Arrow columns and writes one chunk file per hand-off. A crash therefore loses at most the
last second of rows, and memory stays bounded however long the run.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stages.rundir import ChunkWriter
from stages.runtime.query import STATUS_NAMES

CHUNK_ROWS = 65_536
LATENCY_WINDOW = 20_000  # recent latencies kept for the live p99
FLUSH_PERIOD_NS = 1_000_000_000

# Row layouts (tuples, in this order).
# stage row: query_id, stage_index, visit, enqueued_ns, started_ns, finished_ns, status,
#            first_token_ns, tokens
# query row: query_id, scheduled_ns, issued_ns, completed_ns, status, samples, warmup
STAGE_COLUMNS = (
    "query_id",
    "stage",
    "visit",
    "enqueued_ns",
    "started_ns",
    "finished_ns",
    "status",
    "first_token_ns",
    "tokens",
)
QUERY_COLUMNS = (
    "query_id",
    "scheduled_ns",
    "issued_ns",
    "completed_ns",
    "status",
    "samples",
    "warmup",
)


def _columns(names: tuple[str, ...], rows: list[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """Row tuples -> {column name: values}."""
    return {name: list(values) for name, values in zip(names, zip(*rows, strict=True), strict=True)}


class RowBuffer:
    """Rows produced by one thread; only that thread appends and flushes."""

    __slots__ = ("_recorder", "next_flush_ns", "query_rows", "stage_rows")

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.stage_rows: list[tuple[Any, ...]] = []
        self.query_rows: list[tuple[Any, ...]] = []
        self.next_flush_ns = time.monotonic_ns() + FLUSH_PERIOD_NS

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
    ) -> None:
        """`run_dir` None keeps rows in memory (tests), or drops them if not `keep_in_memory`
        (overhead studies of the hot path alone)."""
        self.stage_names = list(stage_names)
        self._keep_in_memory = keep_in_memory
        self._inbox: queue.SimpleQueue[tuple[list[Any], list[Any]] | None] = queue.SimpleQueue()
        self._writers: dict[str, ChunkWriter] = {}
        if run_dir is not None:
            for table in ("queries", "stage_events", "errors"):
                self._writers[table] = ChunkWriter(run_dir, table, label, keys)
                self._writers[table].warm_up()
        self.rows_written = {"queries": 0, "stage_events": 0}
        self.kept_in_memory: dict[str, list[dict[str, list[Any]]]] = {
            "queries": [],
            "stage_events": [],
        }
        self.write_errors: list[str] = []
        self.recent_latency_ns: collections.deque[int] = collections.deque(maxlen=LATENCY_WINDOW)
        """Latencies of the latest ok, non-warm-up queries written: the live p99's input."""
        self._thread = threading.Thread(target=self._write_loop, name="recorder", daemon=True)
        self._thread.start()

    def buffer(self) -> RowBuffer:
        return RowBuffer(self)

    def submit(self, stage_rows: list[Any], query_rows: list[Any]) -> None:
        self._inbox.put((stage_rows, query_rows))

    def _write_loop(self) -> None:
        while True:
            item = self._inbox.get()
            if item is None:
                return
            stage_rows, query_rows = item
            try:
                if stage_rows:
                    self._write("stage_events", self._stage_columns(stage_rows))
                if query_rows:
                    self._write("queries", self._query_columns(query_rows))
            except Exception as error:  # a full disk must not kill the stage threads
                self.write_errors.append(f"{type(error).__name__}: {error}")

    def _stage_columns(self, rows: list[tuple[Any, ...]]) -> dict[str, list[Any]]:
        columns = _columns(STAGE_COLUMNS, rows)
        names = self.stage_names
        columns["stage"] = [names[index] for index in columns["stage"]]
        columns["status"] = [STATUS_NAMES[code] for code in columns["status"]]
        return columns

    def _query_columns(self, rows: list[tuple[Any, ...]]) -> dict[str, list[Any]]:
        self.recent_latency_ns.extend(
            row[3] - row[1] for row in rows[-LATENCY_WINDOW:] if row[4] == 0 and not row[6]
        )
        columns = _columns(QUERY_COLUMNS, rows)
        columns["status"] = [STATUS_NAMES[code] for code in columns["status"]]
        return columns

    def _write(self, table: str, columns: dict[str, list[Any]]) -> None:
        self.rows_written[table] += len(columns["query_id"])
        writer = self._writers.get(table)
        if writer is None:
            if self._keep_in_memory:
                self.kept_in_memory[table].append(columns)
        else:
            writer.write_columns(columns)

    def write_errors_table(self, errors: list[dict[str, Any]]) -> None:
        """One row per distinct stage error (stage, first_query_id, count, error)."""
        writer = self._writers.get("errors")
        if writer is not None and errors:
            columns = {name: [row[name] for row in errors] for name in errors[0]}
            writer.write_columns(columns)

    def close(self, timeout_s: float = 30.0) -> None:
        """Write everything submitted so far and stop the writer thread."""
        self._inbox.put(None)
        self._thread.join(timeout_s)

    def table(self, name: str) -> dict[str, list[Any]]:
        """In-memory mode: all rows of `queries` or `stage_events` as columns."""
        merged: dict[str, list[Any]] = {}
        for chunk in self.kept_in_memory[name]:
            for column, values in chunk.items():
                merged.setdefault(column, []).extend(values)
        return merged
