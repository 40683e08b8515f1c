"""A Chrome / Perfetto trace (JSON) of one run, to open in https://ui.perfetto.dev.

Layout: one process track per (pipeline, phase, trial), with a thread track per stage and one
slice per stage visit (service time, started_ns to finished_ns; args: query id, visit, status,
queue and join wait); flow arrows (`s`/`f` events with one id per hop) along each query's path
from visit to visit; operator spans (torch.profiler rows of `operator_spans`) on their own
threads per stage and device where profiling recorded them; counter tracks for GPU power and
utilisation, host CPU and host power (slope of the cumulative energy) in a "host and devices"
process, and each worker's CPU in its pipeline's process.

Timestamps are microseconds of the run's monotonic clock (ns / 1000, fractional), the clock
every row of the run directory shares, so the trace lines up with the warehouse's numbers.
Big runs are capped: each (pipeline, phase, trial) keeps its first `max_queries` query ids;
`otherData.capped` lists every capped track with its counts. All data comes from the warehouse
over a read-only connection (SQL in analysis/sql/trace/*.sql).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from analysis.reports.report import latest_run_id
from analysis.warehouse.reader import connect_read_only
from analysis.warehouse.sql_files import sql_text

TRACE_NAME = "trace.json"
MAX_QUERIES = 2000  # per (pipeline, phase, trial): a trace ui.perfetto.dev opens in seconds
HOST_PID = 1
FIRST_PIPELINE_PID = 10

Event = dict[str, Any]


@dataclass(frozen=True)
class TraceSummary:
    """What write_trace wrote: the file and its event counts by kind."""

    path: Path
    slices: int
    flows: int
    counters: int
    operator_spans: int
    capped_tracks: int


def _us(ns: int) -> float:
    return ns / 1000.0


def _fetch(connection: duckdb.DuckDBPyConnection, name: str, **params: Any) -> list[dict[str, Any]]:
    result = connection.execute(sql_text(f"trace/{name}.sql"), params)
    columns = [column[0] for column in result.description or []]
    return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]


class _Lanes:
    """Thread ids for spans of one (process, name): a span goes on the first lane where it
    either starts after everything open there has ended or (when nesting is allowed) lies
    wholly inside the innermost open span, so every lane holds properly nested slices, which
    is what Chrome and Perfetto require of one thread."""

    def __init__(self, nest: bool) -> None:
        self.nest = nest
        self.open: list[list[int]] = []  # per lane: end times of the spans still open

    def place(self, start: int, end: int) -> int:
        for lane, stack in enumerate(self.open):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or (self.nest and end <= stack[-1]):
                stack.append(end)
                return lane
        self.open.append([end])
        return len(self.open) - 1


class _Builder:
    """Allocates process and thread ids and collects the events."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.pids: dict[tuple[Any, ...], int] = {}
        self.tids: dict[tuple[int, str, int], int] = {}
        self.lanes: dict[tuple[int, str], _Lanes] = {}
        self.next_tid: dict[int, int] = {}
        self._meta(HOST_PID, None, "process_name", "host and devices")
        self._meta(HOST_PID, None, "process_sort_index", 0, key="sort_index")

    def _meta(self, pid: int, tid: int | None, name: str, value: Any, key: str = "name") -> None:
        event: Event = {"ph": "M", "pid": pid, "name": name, "args": {key: value}}
        if tid is not None:
            event["tid"] = tid
        self.events.append(event)

    def pid(self, pipeline: str | None, phase: str, trial: int, trials: int) -> int:
        """The process track of (pipeline, phase, trial); created on first use."""
        key = (pipeline, phase, trial)
        if key not in self.pids:
            pid = FIRST_PIPELINE_PID + len(self.pids)
            self.pids[key] = pid
            label = f"{pipeline} · {phase}" + (f" · trial {trial}" if trials > 1 else "")
            self._meta(pid, None, "process_name", label)
            self._meta(pid, None, "process_sort_index", pid, key="sort_index")
        return self.pids[key]

    def tid(self, pid: int, thread: str, start: int, end: int, nest: bool) -> int:
        """The thread of `thread` in `pid` where [start, end] fits (see _Lanes)."""
        lanes = self.lanes.setdefault((pid, thread), _Lanes(nest))
        lane = lanes.place(start, end)
        key = (pid, thread, lane)
        if key not in self.tids:
            tid = self.next_tid.get(pid, 1)
            self.next_tid[pid] = tid + 1
            self.tids[key] = tid
            self._meta(pid, tid, "thread_name", thread if lane == 0 else f"{thread} #{lane + 1}")
            self._meta(pid, tid, "thread_sort_index", tid, key="sort_index")
        return self.tids[key]


def _clean(value: Any) -> Any:
    """JSON-safe arg values: NaN and infinities become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _visit_args(visit: dict[str, Any], start: int) -> dict[str, Any]:
    """A visit slice's args: query, visit, statuses, queue and join wait (ms), tokens."""
    arrived = visit["joined_ns"] if visit["joined_ns"] is not None else visit["enqueued_ns"]
    args = {
        "query_id": visit["query_id"],
        "visit": visit["visit"],
        "status": visit["status"],
        "query_status": visit["query_status"],
        "warmup": visit["warmup"],
        "queue_wait_ms": (start - int(arrived)) / 1e6,
        "join_wait_ms": None
        if visit["joined_ns"] is None
        else (int(visit["joined_ns"]) - int(visit["enqueued_ns"])) / 1e6,
        "tokens": visit["tokens"],
    }
    return {key: _clean(value) for key, value in args.items() if value is not None}


def _add_visits(builder: _Builder, visits: list[dict[str, Any]], trials: int) -> int:
    """One slice per stage visit on its stage's thread, and a flow arrow (an `s`/`f` pair)
    from each visit to the next visit of the same query; returns the number of arrows."""
    flows = 0
    previous: dict[str, Any] | None = None
    for visit in visits:
        pid = builder.pid(visit["pipeline"], visit["phase"], visit["trial"], trials)
        start, end = int(visit["started_ns"]), int(visit["finished_ns"])
        tid = builder.tid(pid, str(visit["stage"]), start, end, nest=False)
        visit["pid"], visit["tid"] = pid, tid
        builder.events.append(
            {
                "ph": "X",
                "name": f"q{visit['query_id']}",
                "cat": f"stage,{visit['stage']}",
                "pid": pid,
                "tid": tid,
                "ts": _us(start),
                "dur": _us(end - start),
                "args": _visit_args(visit, start),
            }
        )
        if previous is not None and all(
            previous[key] == visit[key] for key in ("pipeline", "phase", "trial", "query_id")
        ):
            flows += 1
            hop = {"name": "query", "cat": "query", "id": flows}
            builder.events.append(
                {
                    **hop,
                    "ph": "s",
                    "pid": previous["pid"],
                    "tid": previous["tid"],
                    "ts": _us(int(previous["started_ns"])),
                }
            )
            builder.events.append(
                {**hop, "ph": "f", "bp": "e", "pid": pid, "tid": tid, "ts": _us(start)}
            )
        previous = visit
    return flows


def _add_operators(builder: _Builder, operators: list[dict[str, Any]], trials: int) -> None:
    """One slice per operator span, on a thread per stage and device (spans nest)."""
    for span in operators:
        pid = builder.pid(span["pipeline"], span["phase"], span["trial"], trials)
        start, end = int(span["start_ns"]), int(span["end_ns"])
        device = str(span["device_type"])
        where = "cpu" if device == "window" else device
        if span["device_index"] is not None and device == "cuda":
            where = f"cuda:{span['device_index']}"
        tid = builder.tid(pid, f"{span['stage']} · operators ({where})", start, end, nest=True)
        args = {
            "query_id": span["query_id"],
            "visit": span["visit"],
            "self_cpu_us": None if span["self_cpu_ns"] is None else span["self_cpu_ns"] / 1e3,
            "input_shapes": span["input_shapes"],
        }
        builder.events.append(
            {
                "ph": "X",
                "name": str(span["operator"]),
                "cat": f"operator,{device}",
                "pid": pid,
                "tid": tid,
                "ts": _us(start),
                "dur": _us(end - start),
                "args": {key: value for key, value in args.items() if value is not None},
            }
        )


def _add_counters(builder: _Builder, counters: list[dict[str, Any]], trials: int) -> None:
    """One counter event per sample: host and devices on HOST_PID, a worker's CPU in its
    pipeline's process."""
    for sample in counters:
        if sample["pipeline"] is None:
            pid = HOST_PID
        else:
            pid = builder.pid(sample["pipeline"], sample["phase"], sample["trial"], trials)
        builder.events.append(
            {
                "ph": "C",
                "name": str(sample["track"]),
                "pid": pid,
                "ts": _us(int(sample["ts_ns"])),
                "args": {"value": _clean(float(sample["value"]))},
            }
        )


def _capped(tracks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tracks that kept fewer query ids than they had, with their counts."""
    return [
        {
            "pipeline": track["pipeline"],
            "phase": track["phase"],
            "trial": track["trial"],
            "queries": track["queries"],
            "kept": track["kept"],
            "last_kept_query_id": track["last_kept_query_id"],
        }
        for track in tracks
        if track["kept"] < track["queries"]
    ]


def build_trace(
    connection: duckdb.DuckDBPyConnection, run_id: str, max_queries: int = MAX_QUERIES
) -> dict[str, Any]:
    """The trace of `run_id` as a Chrome JSON object ({"traceEvents": [...], ...})."""
    tracks = _fetch(connection, "traced_queries", run_id=run_id, max_queries=max_queries)
    # Which queries to draw is decided once (traced_queries.sql), and passed to the others.
    kept = [track for track in tracks if track["kept"]]
    visits = _fetch(connection, "visits", run_id=run_id, tracks=kept) if kept else []
    operators = _fetch(connection, "operators", run_id=run_id, tracks=kept) if kept else []
    counters = _fetch(connection, "counters", run_id=run_id)
    trials = len({row["trial"] for row in tracks}) or 1
    builder = _Builder()
    for track in tracks:  # process tracks in a stable order, before any slice
        builder.pid(track["pipeline"], track["phase"], track["trial"], trials)
    flows = _add_visits(builder, visits, trials)
    _add_operators(builder, operators, trials)
    _add_counters(builder, counters, trials)
    capped = _capped(tracks)
    return {
        "traceEvents": builder.events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run_id": run_id,
            "clock": "run monotonic clock, microseconds (ns / 1000)",
            "max_queries_per_track": max_queries,
            "capped": capped,
            "note": (
                f"each track keeps its first {max_queries} query ids; {len(capped)} track(s) capped"
            ),
            "slices": len(visits),
            "operator_spans": len(operators),
            "flows": flows,
            "counter_samples": len(counters),
        },
    }


def write_trace(
    db_path: Path | str,
    run_id: str | None = None,
    out_dir: Path | None = None,
    max_queries: int = MAX_QUERIES,
) -> TraceSummary:
    """Write `trace.json` for `run_id` (latest when None) into `out_dir`, by default the run's
    directory; returns its path and counts. LookupError for an unknown run."""
    from analysis.reports.report_file import run_directory

    chosen = run_id if run_id is not None else latest_run_id(db_path)
    target = Path(out_dir) if out_dir is not None else run_directory(db_path, chosen)
    connection = connect_read_only(db_path)
    try:
        trace = build_trace(connection, chosen, max_queries)
    finally:
        connection.close()
    target.mkdir(parents=True, exist_ok=True)
    path = target / TRACE_NAME
    path.write_text(json.dumps(trace, separators=(",", ":")), encoding="utf-8")
    other = trace["otherData"]
    return TraceSummary(
        path=path,
        slices=other["slices"],
        flows=other["flows"],
        counters=other["counter_samples"],
        operator_spans=other["operator_spans"],
        capped_tracks=len(other["capped"]),
    )
