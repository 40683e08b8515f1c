"""Operator profiling on sampled queries: torch.profiler around every Nth query of a stage.

A model stage wraps its model call in `with self.profiler.around(query):`. On every
`profile_every`-th query this stage runs (counted in run order, warm-up included; the first
profiled one is the Nth), `torch.profiler` records the call, and each of its events becomes a
row of the run directory's `operator_spans` table, on the run's monotonic clock. Every other
query costs one integer increment and compare (~0.1 µs with the `with` statement around it).

The profiled query's own stage event still counts in every latency figure: it includes the
profiler's cost (start, stop and turning events into rows: ~1-2 ms on a small CNN here), and
so do the queries queued behind it. Measure latency with profiling off; use a profiled run for
where the time goes (`operator_summary`).
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from stages.runtime.query import Query
from stages.runtime.stage import StageContext

TABLE = "operator_spans"
WINDOW = "window"
"""`device_type` of the one row per profiled query that spans the profiler's whole window (its
`operator` is `WINDOW_OPERATOR`): it marks the query as profiled even if no event was seen."""
WINDOW_OPERATOR = "[profiler window]"

# Above this, a profiler timestamp is nanoseconds since the epoch (CLOCK_REALTIME, what torch's
# profiler uses on Linux: c10::getTime); below, it would be a monotonic clock (years of uptime).
_EPOCH_NS_THRESHOLD = 10**17

_NO_PROFILE: AbstractContextManager[None] = nullcontext()
# torch.profiler (kineto) is one per process: two stage threads must not profile at once.
_PROFILER_LOCK = threading.Lock()


class OperatorProfiler:
    """Profiles every `every`-th query a stage runs (0 = never).

    Create it before the start barrier (in the stage's `__init__` or `prepare`): when on, it
    pays torch.profiler's one-time start-up there (1.5 s on the first CPU profile here, 6 s
    with CUDA on an H100), not in the first profiled query. `record_shapes` also records each
    operator's input shapes (JSON).
    """

    def __init__(self, every: int, context: StageContext, *, record_shapes: bool = False) -> None:
        if every < 0:
            raise ValueError(f"profile_every must be >= 0, got {every}")
        self.every = every
        self.context = context
        self.record_shapes = record_shapes
        self._runs = 0
        self._next_profiled = every  # 0 when off: the run count (>= 1) never equals it
        self.profiled_queries = 0
        self.deferred = 0
        """Sampled queries that found another stage of this process profiling: the next query
        of this stage was profiled instead."""
        if every > 0:
            # kineto prints two log lines per profile (level USDT) to the worker's stderr, and
            # torch warns once that a profile's events end with it (as intended here).
            os.environ.setdefault("KINETO_LOG_LEVEL", "6")
            warnings.filterwarnings(
                "ignore", message="Warning: Profiler clears events", category=UserWarning
            )
            self._warm_up()

    def around(self, query: Query) -> AbstractContextManager[None]:
        """Wrap one query's model call: profiled when it is a sampled one, else free."""
        self._runs += 1
        if self._runs != self._next_profiled:
            return _NO_PROFILE
        return self._profiled(query)

    # ----------------------------------------------------------------- profiled queries

    def _activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        activities = [ProfilerActivity.CPU]
        if self.context.device.startswith("cuda"):
            activities.append(ProfilerActivity.CUDA)
        return activities

    def _warm_up(self) -> None:
        """One empty profile, so kineto's start-up is paid before the barrier."""
        from torch.profiler import profile

        with _PROFILER_LOCK:
            profiler = profile(activities=self._activities())
            profiler.start()
            profiler.stop()
            profiler.events()

    @contextmanager
    def _profiled(self, query: Query) -> Iterator[None]:
        if not _PROFILER_LOCK.acquire(blocking=False):
            self._next_profiled = self._runs + 1
            self.deferred += 1
            yield
            return
        try:
            self._next_profiled = self._runs + self.every
            yield from self._record(query)
        finally:
            _PROFILER_LOCK.release()

    def _record(self, query: Query) -> Iterator[None]:
        from torch.profiler import profile

        visit = query.visits[self.context.stage_index]
        profiler = profile(activities=self._activities(), record_shapes=self.record_shapes)
        window_start_ns = time.monotonic_ns()
        profiler.start()
        try:
            yield
            if self.context.device.startswith("cuda"):
                # Kernels still queued when the profiler stops would be lost.
                from stages.library.core.torch_common import device_synchronizer

                device_synchronizer(self.context.device)()
        finally:
            profiler.stop()
            window_end_ns = time.monotonic_ns()
            rows = [
                _row(query.query_id, self.context.stage_id, visit, WINDOW_OPERATOR, WINDOW)
                | {"start_ns": window_start_ns, "end_ns": window_end_ns}
            ]
            rows += self._event_rows(profiler, query.query_id, visit)
            self.context.write_rows(TABLE, rows)
            self.profiled_queries += 1

    def _event_rows(self, profiler: Any, query_id: int, visit: int) -> list[dict[str, Any]]:
        """The profiler's events as `operator_spans` rows on the monotonic clock."""
        from torch.profiler import DeviceType

        results = profiler.profiler.kineto_results
        if hasattr(results, "trace_start_ns"):
            trace_start_ns = int(results.trace_start_ns())
        else:  # older torch
            trace_start_ns = int(results.trace_start_us()) * 1000
        if trace_start_ns > _EPOCH_NS_THRESHOLD:
            trace_start_ns -= realtime_minus_monotonic_ns()
        rows = []
        for event in profiler.events():
            on_cpu = event.device_type == DeviceType.CPU
            row = _row(
                query_id,
                self.context.stage_id,
                visit,
                event.name,
                "cpu" if on_cpu else str(event.device_type).rsplit(".", 1)[-1].lower(),
            )
            row["start_ns"] = trace_start_ns + round(event.time_range.start * 1000)
            row["end_ns"] = trace_start_ns + round(event.time_range.end * 1000)
            if on_cpu:
                row["thread_id"] = event.thread
                row["self_cpu_ns"] = round(event.self_cpu_time_total * 1000)
                row["total_cpu_ns"] = round(event.cpu_time_total * 1000)
            else:
                row["device_index"] = event.device_index
                row["thread_id"] = getattr(event, "device_resource_id", event.thread)  # stream
            if self.record_shapes and event.input_shapes:
                row["input_shapes"] = json.dumps(event.input_shapes)
            rows.append(row)
        return rows


def _row(query_id: int, stage: str, visit: int, operator: str, device_type: str) -> dict[str, Any]:
    return {
        "query_id": query_id,
        "stage": stage,
        "visit": visit,
        "operator": operator,
        "start_ns": 0,
        "end_ns": 0,
        "device_type": device_type,
        "device_index": None,
        "thread_id": None,
        "self_cpu_ns": None,
        "total_cpu_ns": None,
        "input_shapes": None,
    }


def realtime_minus_monotonic_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now, from the closest of a few paired reads (±~50 ns)."""
    best_gap_ns, offset_ns = None, 0
    for _ in range(3):
        before_ns = time.monotonic_ns()
        wall_ns = time.time_ns()
        after_ns = time.monotonic_ns()
        if best_gap_ns is None or after_ns - before_ns < best_gap_ns:
            best_gap_ns = after_ns - before_ns
            offset_ns = wall_ns - (before_ns + after_ns) // 2
    return offset_ns
