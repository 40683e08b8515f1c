"""Scenarios: how a pipeline's queries are issued and when its load window ends.

Open loop (server, constant, trace) issues on a precomputed schedule whatever the pipeline
does, and records a query the entry queue cannot take as `dropped` (or issues it late,
`on_full: backlog`), so overload shows instead of hiding (no coordinated omission). Closed
loop (closed_loop, single_stream, multi_stream) keeps N queries outstanding. Offline issues
everything at once. Latency always counts from `scheduled_ns`.
"""

from __future__ import annotations

import heapq
import queue
import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

from stages.runtime.loadgen.arrivals import ARRIVAL_PROCESSES
from stages.runtime.loadgen.timing import ArrivalClock
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.query import Query
from stages.runtime.recorder import RowBuffer
from stages.spec import LoadgenSpec


@dataclass
class LoadOutcome:
    """What the load generator did and why it stopped."""

    issued: int
    dropped: int
    stopped_by: str  # duration | max_queries | timeout | schedule_end | all_issued | pipeline
    start_ns: int
    last_issue_ns: int


class EndConditions:
    """MLPerf's rule: stop when both the duration and the minimum query count are met, or at
    `max_queries`, or at `timeout_s`. Warm-up precedes the measured window and counts only
    toward `max_queries`."""

    def __init__(self, spec: LoadgenSpec) -> None:
        self.max_queries = spec.max_queries
        self.min_queries = spec.min_queries
        self.measured_end_ns = int((spec.warmup_s + spec.duration_s) * 1e9)
        self.timeout_ns = int(spec.timeout_s * 1e9)
        self.warmup_queries = spec.warmup_queries
        self.warmup_ns = int(spec.warmup_s * 1e9)

    def is_warmup(self, query_index: int, offset_ns: int) -> bool:
        return query_index < self.warmup_queries or offset_ns < self.warmup_ns

    def reached(self, offset_ns: int, issued: int, measured: int) -> str | None:
        """Reason to stop before issuing a query due at `offset_ns`, or None."""
        if self.max_queries is not None and issued >= self.max_queries:
            return "max_queries"
        if offset_ns >= self.measured_end_ns and measured >= self.min_queries:
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
        stop_issuing = runtime.stop_issuing
        for index, (offset_ns, samples) in enumerate(arrivals.schedule(random.Random(self.seed))):
            reason = end.reached(offset_ns, issued, measured)
            if reason is None and time.monotonic_ns() - start_ns >= end.timeout_ns:
                reason = "timeout"  # the pipeline fell so far behind that real time ran out
            if reason is None and stop_issuing.is_set():
                reason = "pipeline"
            if reason is not None:
                stopped_by = reason
                break
            scheduled_ns = start_ns + offset_ns
            warmup = end.is_warmup(index, offset_ns)
            query = runtime.new_query(index, scheduled_ns, samples, warmup)
            clock.sleep_until(scheduled_ns)
            if not runtime.issue(query, block):
                dropped += 1
                runtime.record_dropped(query, buffer, time.monotonic_ns())
            last_issue_ns = query.issued_ns or last_issue_ns
            issued += 1
            measured += not warmup
            if len(buffer.query_rows) >= 4096 or last_issue_ns >= buffer.next_flush_ns:
                buffer.flush()
        return LoadOutcome(issued, dropped, stopped_by, start_ns, last_issue_ns)


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
                    runtime.issue(query, block=True)
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
        return LoadOutcome(issued, 0, stopped_by, start_ns, last_issue_ns)


class OfflineScenario(Scenario):
    """offline: `samples_per_query` one-sample queries (at most `max_queries`), all scheduled at
    the start and handed over at once, as MLPerf Offline does; throughput is the figure."""

    def prepare(self, runtime: PipelineRuntime) -> None:
        total = self.spec.samples_per_query
        if self.spec.max_queries is not None:
            total = min(total, self.spec.max_queries)
        self._queries: list[Query] = [
            runtime.new_query(index, 0, 1, self.end.is_warmup(index, 0)) for index in range(total)
        ]
        runtime.register_offline(self._queries)

    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        queries = self._queries
        ArrivalClock().sleep_until(start_ns)
        runtime.issue_offline(queries, start_ns)
        self._queries = []
        last_issue_ns = queries[-1].issued_ns if queries else start_ns
        return LoadOutcome(len(queries), 0, "all_issued", start_ns, last_issue_ns)


SCENARIOS: dict[str, type[Scenario]] = {
    "server": OpenLoopScenario,
    "constant": OpenLoopScenario,
    "trace": OpenLoopScenario,
    "closed_loop": ClosedLoopScenario,
    "single_stream": ClosedLoopScenario,
    "multi_stream": ClosedLoopScenario,
    "offline": OfflineScenario,
}
