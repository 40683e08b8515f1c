"""Scenarios: how a pipeline's queries are issued and when its load window ends.

Open loop (server, constant, trace) issues on a precomputed schedule whatever the pipeline
does, and records a query the entry queue cannot take as `dropped` (or issues it late,
`on_full: backlog`), so overload shows instead of hiding (no coordinated omission). Closed
loop (closed_loop, single_stream, multi_stream) keeps N queries outstanding. Offline issues
everything at once, after its warm-up has ended. Latency always counts from `scheduled_ns`.

Every arrival due inside the window gets a row: when issuing stops early (timeout, pipeline
stop), the arrivals already due are recorded `not_issued`.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

from stages.runtime.loadgen.arrivals import ARRIVAL_PROCESSES
from stages.runtime.loadgen.timing import ArrivalClock
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import RowBuffer
from stages.spec.models import LoadgenSpec


@dataclass
class LoadOutcome:
    """What the load generator did and why it stopped."""

    issued: int
    dropped: int
    stopped_by: str  # duration | max_queries | timeout | schedule_end | all_issued | pipeline
    start_ns: int
    last_issue_ns: int
    not_issued: int = 0
    """Arrivals due inside the window when issuing stopped early, recorded `not_issued`."""


EARLY_STOPS = ("timeout", "pipeline")
"""Reasons that stop issuing before the window's end: the arrivals already due are recorded."""


class EndConditions:
    """MLPerf's rule: stop when both the duration and the minimum query count are met, or at
    `max_queries`, or at `timeout_s`. Warm-up precedes the measured window and counts only
    toward `max_queries`: the duration runs from the first measured query, and `min_queries`
    counts measured queries."""

    def __init__(self, spec: LoadgenSpec) -> None:
        self.max_queries = spec.max_queries
        self.min_queries = spec.min_queries
        self.duration_ns = int(spec.duration_s * 1e9)
        self.timeout_ns = int(spec.timeout_s * 1e9)
        self.warmup_queries = spec.warmup_queries
        self.warmup_ns = int(spec.warmup_s * 1e9)
        self.measured_start_ns: int | None = None
        """Offset of the first measured (non-warm-up) query; the measured duration starts
        there. None until one is issued."""

    def is_warmup(self, query_index: int, offset_ns: int) -> bool:
        """Whether the query is warm-up; call it once per issued query, in order (the first
        measured one opens the measured window)."""
        warmup = query_index < self.warmup_queries or offset_ns < self.warmup_ns
        if not warmup and self.measured_start_ns is None:
            self.measured_start_ns = offset_ns
        return warmup

    def reached(self, offset_ns: int, issued: int, measured: int) -> str | None:
        """Reason to stop before issuing a query due at `offset_ns`, or None."""
        if self.max_queries is not None and issued >= self.max_queries:
            return "max_queries"
        # Before the first measured query the window would open at this one.
        start_ns = self.measured_start_ns if self.measured_start_ns is not None else offset_ns
        if offset_ns >= start_ns + self.duration_ns and measured >= self.min_queries:
            return "duration"
        if offset_ns >= self.timeout_ns:
            return "timeout"
        return None


class Scenario(ABC):
    """One extension point per issuing discipline."""

    def __init__(self, spec: LoadgenSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.end = EndConditions(spec)

    def prepare(self, runtime: PipelineRuntime) -> None:  # noqa: B027 - optional hook
        """Work done before the start barrier (building query records for offline)."""

    @abstractmethod
    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        """Issue queries from `start_ns` until an end condition; runs in the issuing thread."""

    def record_not_issued(
        self,
        runtime: PipelineRuntime,
        buffer: RowBuffer,
        due: Iterable[tuple[int, int, int]],
        start_ns: int,
        stop_ns: int,
        issued: int,
        measured: int,
    ) -> int:
        """Record as `not_issued` the arrivals `(query_id, scheduled_ns, samples)` (in time
        order) that were due by `stop_ns` and inside the window the end conditions would have
        given, as if each had been issued. Returns how many."""
        end = self.end
        recorded = 0
        for query_id, scheduled_ns, samples in due:
            offset_ns = scheduled_ns - start_ns
            if scheduled_ns > stop_ns or end.reached(offset_ns, issued, measured) is not None:
                break
            warmup = end.is_warmup(query_id, offset_ns)
            runtime.record_not_issued(query_id, scheduled_ns, samples, warmup, buffer)
            recorded += 1
            issued += 1
            measured += not warmup
        buffer.flush()
        return recorded


class OpenLoopScenario(Scenario):
    """server (Poisson or gamma), constant and trace: issue on schedule, never wait for the
    pipeline; a full entry queue means `dropped` (or a late issue under `on_full: backlog`)."""

    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        arrivals = ARRIVAL_PROCESSES[self.spec.type](self.spec)
        clock = ArrivalClock()
        block = self.spec.on_full == "backlog"
        end = self.end
        issued = measured = dropped = 0
        last_issue_ns = start_ns
        stopped_by = "schedule_end"
        not_issued = 0
        stop_issuing = runtime.stop_issuing
        deadline_ns = start_ns + end.timeout_ns
        numbered = enumerate(arrivals.schedule(random.Random(self.seed)))
        for index, (offset_ns, samples) in numbered:
            reason = end.reached(offset_ns, issued, measured)
            if reason is None and time.monotonic_ns() >= deadline_ns:
                reason = "timeout"  # the pipeline fell so far behind that real time ran out
            if reason is None and stop_issuing.is_set():
                reason = "pipeline"
            if reason is None:
                scheduled_ns = start_ns + offset_ns
                warmup = end.is_warmup(index, offset_ns)
                query = runtime.new_query(index, scheduled_ns, samples, warmup)
                clock.sleep_until(scheduled_ns)
                if runtime.issue(query, block, deadline_ns):
                    last_issue_ns = query.issued_ns
                elif block:  # no room before the timeout, or the pipeline stopped meanwhile
                    reason = "pipeline" if stop_issuing.is_set() else "timeout"
                else:
                    dropped += 1
                    runtime.record_dropped(query, buffer, time.monotonic_ns())
            if reason is not None:
                stopped_by = reason
                if reason in EARLY_STOPS:
                    rest = itertools.chain([(index, (offset_ns, samples))], numbered)
                    not_issued = self.record_not_issued(
                        runtime,
                        buffer,
                        ((i, start_ns + offset, size) for i, (offset, size) in rest),
                        start_ns,
                        time.monotonic_ns(),
                        issued,
                        measured,
                    )
                break
            issued += 1
            measured += not warmup
            if len(buffer.query_rows) >= 4096 or last_issue_ns >= buffer.next_flush_ns:
                buffer.flush()
        return LoadOutcome(issued, dropped, stopped_by, start_ns, last_issue_ns, not_issued)


class ClosedLoopScenario(Scenario):
    """closed_loop (N clients, optional think time), single_stream (one client) and
    multi_stream (one client, `samples_per_query` samples a query): the next query of a client
    is scheduled when its previous one ends, plus think time."""

    def clients(self) -> int:
        return self.spec.concurrency if self.spec.type == "closed_loop" else 1

    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        completions: queue.SimpleQueue[int] = queue.SimpleQueue()
        runtime.on_complete = lambda root: completions.put(root.completed_ns)
        think_ns = int(self.spec.think_time_ms * 1e6)
        samples = self.spec.samples_per_query if self.spec.type == "multi_stream" else 1
        clock = ArrivalClock()
        end = self.end
        due: list[int] = [start_ns] * self.clients()  # next scheduled time of each idle client
        issued = measured = 0
        last_issue_ns = start_ns
        stopped_by = "duration"
        outstanding = 0
        stop_issuing = runtime.stop_issuing
        while True:
            if stop_issuing.is_set():
                stopped_by = "pipeline"
                break
            now_ns = time.monotonic_ns()
            if due:
                next_ns = due[0]
                reason = end.reached(next_ns - start_ns, issued, measured)
                if reason is None and now_ns - start_ns >= end.timeout_ns:
                    reason = "timeout"
                if reason is not None:
                    stopped_by = reason
                    break
                # Due now, or nothing outstanding that could complete first: sleep to it.
                if next_ns - clock.margin_ns <= now_ns or not outstanding:
                    heapq.heappop(due)
                    clock.sleep_until(next_ns)
                    warmup = end.is_warmup(issued, next_ns - start_ns)
                    query = runtime.new_query(issued, next_ns, samples, warmup)
                    if not runtime.issue(query, True, start_ns + end.timeout_ns):
                        # No room before the timeout, or the pipeline stopped: still due.
                        stopped_by = "pipeline" if stop_issuing.is_set() else "timeout"
                        heapq.heappush(due, next_ns)
                        break
                    last_issue_ns = query.issued_ns
                    issued += 1
                    measured += not warmup
                    outstanding += 1
                    if last_issue_ns >= buffer.next_flush_ns:
                        buffer.flush()
                    continue
                wait_s = (next_ns - clock.margin_ns - now_ns) / 1e9
            else:
                wait_s = (start_ns + end.timeout_ns - now_ns) / 1e9
                if wait_s <= 0:
                    stopped_by = "timeout"
                    break
            try:
                # Capped so a pipeline that stops taking load is noticed within 0.25 s.
                completed_ns = completions.get(timeout=min(wait_s, 0.25))
            except queue.Empty:
                continue
            outstanding -= 1
            heapq.heappush(due, completed_ns + think_ns)
        runtime.on_complete = None
        not_issued = 0
        if stopped_by in EARLY_STOPS:
            stop_ns = time.monotonic_ns()
            while True:  # clients whose query ended but that the loop had not taken up yet
                try:
                    due.append(completions.get_nowait() + think_ns)
                except queue.Empty:
                    break
            not_issued = self.record_not_issued(
                runtime,
                buffer,
                ((issued + n, due_ns, samples) for n, due_ns in enumerate(sorted(due))),
                start_ns,
                stop_ns,
                issued,
                measured,
            )
        return LoadOutcome(issued, 0, stopped_by, start_ns, last_issue_ns, not_issued)


class OfflineScenario(Scenario):
    """offline: `samples_per_query` one-sample queries (at most `max_queries`), handed over at
    once, as MLPerf Offline does; throughput is the figure. The warm-up queries go first, at
    the start, and the measured ones only once every warm-up query has ended: issued together,
    they would be served behind the warm-up and the window would count its time."""

    def prepare(self, runtime: PipelineRuntime) -> None:
        total = self.spec.samples_per_query
        if self.spec.max_queries is not None:
            total = min(total, self.spec.max_queries)
        self._queries: list[Query] = [
            runtime.new_query(index, 0, 1, self.end.is_warmup(index, 0)) for index in range(total)
        ]
        runtime.register_offline(self._queries)

    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        queries, self._queries = self._queries, []
        warmup = [query for query in queries if query.warmup]
        measured = [query for query in queries if not query.warmup]
        ArrivalClock().sleep_until(start_ns)
        if warmup:
            ended = self._issue_warmup(runtime, warmup, start_ns)
            if not ended:
                # Timed out or the pipeline stopped: the measured queries are never issued.
                stop_ns = time.monotonic_ns()
                runtime.unregister_offline(measured)
                for query in measured:
                    runtime.record_not_issued(
                        query.query_id, stop_ns, query.samples, query.warmup, buffer
                    )
                buffer.flush()
                stopped_by = "pipeline" if runtime.stop_issuing.is_set() else "timeout"
                last_issue_ns = warmup[-1].issued_ns
                return LoadOutcome(
                    len(warmup), 0, stopped_by, start_ns, last_issue_ns, len(measured)
                )
        # The measured window opens now: the measured queries are scheduled as they are issued.
        runtime.issue_offline(measured, time.monotonic_ns())
        last_issue_ns = queries[-1].issued_ns if queries else start_ns
        return LoadOutcome(len(queries), 0, "all_issued", start_ns, last_issue_ns)

    def _issue_warmup(self, runtime: PipelineRuntime, warmup: list[Query], start_ns: int) -> bool:
        """Issue the warm-up queries at `start_ns` and wait until every one has ended; False if
        `timeout_s` ran out or the pipeline stopped taking load first."""
        ended = threading.Event()
        ended_count = itertools.count(1)  # next() is atomic: exit stages may finish at once
        total = len(warmup)

        def on_complete(root: Query) -> None:
            if runtime.stop_issuing.is_set() or (root.warmup and next(ended_count) >= total):
                ended.set()

        runtime.on_complete = on_complete
        try:
            runtime.issue_offline(warmup, start_ns)
            ended.wait(max(0.0, (start_ns + self.end.timeout_ns - time.monotonic_ns()) / 1e9))
        finally:
            runtime.on_complete = None
        return ended.is_set() and not runtime.stop_issuing.is_set()


SCENARIOS: dict[str, type[Scenario]] = {
    "server": OpenLoopScenario,
    "constant": OpenLoopScenario,
    "trace": OpenLoopScenario,
    "closed_loop": ClosedLoopScenario,
    "single_stream": ClosedLoopScenario,
    "multi_stream": ClosedLoopScenario,
    "offline": OfflineScenario,
}
