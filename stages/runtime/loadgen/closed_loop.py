"""Closed loop (closed_loop, single_stream, multi_stream): each client issues its next query
when its previous one ends, plus think time, so a fixed number of queries is outstanding."""

from __future__ import annotations

import heapq
import queue
import threading
import time

from stages.runtime.loadgen.scenarios import EARLY_STOPS, EndConditions, LoadOutcome, Scenario
from stages.runtime.loadgen.timing import ArrivalClock
from stages.runtime.pipeline import PipelineRuntime
from stages.runtime.recorder import RowBuffer
from stages.spec.loadgen import ClosedLoopLoadgen, MultiStreamLoadgen, SingleStreamLoadgen

COMPLETION_POLL_S = 0.25
"""Longest wait for a completion, so a pipeline that stops taking load is noticed in time."""


class ClosedLoopScenario(Scenario[ClosedLoopLoadgen | SingleStreamLoadgen | MultiStreamLoadgen]):
    """closed_loop (N clients, optional think time), single_stream (one client) and
    multi_stream (one client, `samples_per_query` samples a query): the next query of a client
    is scheduled when its previous one ends, plus think time."""

    def clients(self) -> int:
        return self.spec.concurrency if isinstance(self.spec, ClosedLoopLoadgen) else 1

    def samples(self) -> int:
        """Samples of every query: multi_stream's `samples_per_query`, else one."""
        return self.spec.samples_per_query if isinstance(self.spec, MultiStreamLoadgen) else 1

    def drive(self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer) -> LoadOutcome:
        if self.clients() == 1 and not self.spec.think_time_ms:
            return self._drive_inline(runtime, start_ns, buffer)
        clients = _Clients(self, runtime, start_ns, buffer)
        completions = clients.completions
        runtime.on_complete = lambda root: completions.put(root.completed_ns)
        stopped_by = clients.issue_until_stopped()
        runtime.on_complete = None
        not_issued = 0
        if stopped_by in EARLY_STOPS:
            stop_ns = time.monotonic_ns()
            due = clients.still_due()
            not_issued = self.record_not_issued(
                runtime,
                buffer,
                ((clients.issued + n, due_ns, clients.samples) for n, due_ns in enumerate(due)),
                start_ns,
                stop_ns,
                clients.issued,
                clients.measured,
            )
        return LoadOutcome(
            clients.issued, 0, stopped_by, start_ns, clients.last_issue_ns, not_issued
        )

    def _drive_inline(
        self, runtime: PipelineRuntime, start_ns: int, buffer: RowBuffer
    ) -> LoadOutcome:
        """One client without think time: the thread that completes a query issues the next
        at once (`_InlineClient`), one thread hand-off fewer per query than waking this
        thread to issue it. This thread issues the first query and waits for the end."""
        client = _InlineClient(self, runtime, start_ns)
        runtime.on_complete = lambda root: client.issue_next(root.completed_ns)
        ArrivalClock().sleep_until(start_ns)  # the window opens at start_ns, never before
        client.issue_next(start_ns)
        stopped_by = client.wait_for_end()
        runtime.on_complete = None
        not_issued = 0
        if stopped_by in EARLY_STOPS and client.due_ns is not None:
            not_issued = self.record_not_issued(
                runtime,
                buffer,
                [(client.issued, client.due_ns, client.samples)],
                start_ns,
                time.monotonic_ns(),
                client.issued,
                client.measured,
            )
        return LoadOutcome(client.issued, 0, stopped_by, start_ns, client.last_issue_ns, not_issued)


class _InlineClient:
    """The state of a one-client closed loop driven from the completing thread. `issue_next`
    runs in whichever thread calls it (the load generator's for the first query, then the
    thread of the stage that completed the previous one) under a lock, so queries are still
    issued one at a time and in order, by the same rules as `_Clients`: scheduled when the
    previous one completed, the end conditions checked before each."""

    __slots__ = (
        "deadline_ns",
        "due_ns",
        "end",
        "ended",
        "error",
        "issued",
        "last_issue_ns",
        "lock",
        "measured",
        "runtime",
        "samples",
        "start_ns",
        "stopped_by",
    )

    def __init__(
        self, scenario: ClosedLoopScenario, runtime: PipelineRuntime, start_ns: int
    ) -> None:
        self.runtime = runtime
        self.start_ns = start_ns
        self.end: EndConditions = scenario.end
        self.deadline_ns = start_ns + scenario.end.timeout_ns
        self.samples = scenario.samples()
        self.issued = self.measured = 0
        self.last_issue_ns = start_ns
        self.lock = threading.Lock()
        self.ended = threading.Event()
        self.stopped_by: str | None = None
        self.due_ns: int | None = None
        """The query that was due when issuing stopped early (recorded `not_issued`)."""
        self.error: Exception | None = None

    def issue_next(self, due_ns: int) -> None:
        """Issue the query due at `due_ns`, or end the loop with the reason not to. An error
        here ends the loop and is raised again in the load generator's thread, never in the
        stage thread that called it."""
        with self.lock:
            if self.stopped_by is not None:
                return
            try:
                self._issue_or_stop(due_ns)
            except Exception as error:
                self.error = error
                self._stop("pipeline")

    def _issue_or_stop(self, due_ns: int) -> None:
        """`issue_next`'s work, under its lock: the end checks in `_Clients`'s order, then the
        issue."""
        runtime = self.runtime
        if runtime.stop_issuing.is_set():
            reason: str | None = "pipeline"
        else:
            reason = self.end.reached(due_ns - self.start_ns, self.issued, self.measured)
        if reason is None and time.monotonic_ns() >= self.deadline_ns:
            reason = "timeout"
        if reason is None:
            warmup = self.end.is_warmup(self.issued, due_ns - self.start_ns)
            query = runtime.new_query(self.issued, due_ns, self.samples, warmup)
            # Nothing else is in flight, so the entry has room unless the load stopped.
            if runtime.issue(query, True, self.deadline_ns):
                self.issued += 1
                self.measured += not warmup
                self.last_issue_ns = query.issued_ns
                return
            reason = "pipeline" if runtime.stop_issuing.is_set() else "timeout"
        self.due_ns = due_ns
        self._stop(reason)

    def wait_for_end(self) -> str:
        """Wait until the loop ended; a stop of the pipeline or the timeout ends it from here
        (the query in flight then completes without a successor)."""
        stop_issuing = self.runtime.stop_issuing
        while not self.ended.wait(COMPLETION_POLL_S):
            reason = "pipeline" if stop_issuing.is_set() else None
            if reason is None and time.monotonic_ns() >= self.deadline_ns:
                reason = "timeout"
            if reason is not None:
                with self.lock:
                    if self.stopped_by is None:
                        self._stop(reason)
        if self.error is not None:
            raise self.error
        assert self.stopped_by is not None
        return self.stopped_by

    def _stop(self, reason: str) -> None:
        self.stopped_by = reason
        self.ended.set()


class _Clients:
    """The state of one closed-loop drive: when each idle client is next due, and tallies."""

    __slots__ = (
        "buffer",
        "clock",
        "completions",
        "deadline_ns",
        "due",
        "end",
        "issued",
        "last_issue_ns",
        "measured",
        "outstanding",
        "runtime",
        "samples",
        "start_ns",
        "think_ns",
    )

    def __init__(
        self,
        scenario: ClosedLoopScenario,
        runtime: PipelineRuntime,
        start_ns: int,
        buffer: RowBuffer,
    ) -> None:
        self.runtime = runtime
        self.buffer = buffer
        self.start_ns = start_ns
        self.end: EndConditions = scenario.end
        self.deadline_ns = start_ns + scenario.end.timeout_ns
        self.completions: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.clock = ArrivalClock()
        self.think_ns = int(scenario.spec.think_time_ms * 1e6)
        self.samples = scenario.samples()
        self.due: list[int] = [start_ns] * scenario.clients()  # a heap of next issue times
        self.issued = self.measured = self.outstanding = 0
        self.last_issue_ns = start_ns

    def issue_until_stopped(self) -> str:
        """Issue each client's query when due, until an end condition; returns the reason."""
        stop_issuing = self.runtime.stop_issuing
        due = self.due
        while not stop_issuing.is_set():
            now_ns = time.monotonic_ns()
            if due:
                next_ns = due[0]
                reason = self.end.reached(next_ns - self.start_ns, self.issued, self.measured)
                if reason is None and now_ns >= self.deadline_ns:
                    reason = "timeout"
                if reason is not None:
                    return reason
                # Due now, or nothing outstanding that could complete first: sleep to it.
                if next_ns - self.clock.margin_ns <= now_ns or not self.outstanding:
                    reason = self._issue(next_ns)
                    if reason is not None:
                        return reason
                    continue
                wait_s = (next_ns - self.clock.margin_ns - now_ns) / 1e9
            else:
                wait_s = (self.deadline_ns - now_ns) / 1e9
                if wait_s <= 0:
                    return "timeout"
            self._take_completion(min(wait_s, COMPLETION_POLL_S))
        return "pipeline"

    def _issue(self, next_ns: int) -> str | None:
        """Issue the query due at `next_ns`; the stop reason if it could not be issued."""
        heapq.heappop(self.due)
        self.clock.sleep_until(next_ns)
        warmup = self.end.is_warmup(self.issued, next_ns - self.start_ns)
        query = self.runtime.new_query(self.issued, next_ns, self.samples, warmup)
        if not self.runtime.issue(query, True, self.deadline_ns):
            # No room before the timeout, or the pipeline stopped: still due.
            heapq.heappush(self.due, next_ns)
            return "pipeline" if self.runtime.stop_issuing.is_set() else "timeout"
        self.last_issue_ns = query.issued_ns
        self.issued += 1
        self.measured += not warmup
        self.outstanding += 1
        if self.last_issue_ns >= self.buffer.next_flush_ns:
            self.buffer.flush()
        return None

    def _take_completion(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for a completion; its client is due after its think time."""
        try:
            completed_ns = self.completions.get(timeout=timeout_s)
        except queue.Empty:
            return
        self.outstanding -= 1
        heapq.heappush(self.due, completed_ns + self.think_ns)

    def still_due(self) -> list[int]:
        """After the loop: every client's next issue time in order, including clients whose
        query ended but that the loop had not taken up yet."""
        while True:
            try:
                self.due.append(self.completions.get_nowait() + self.think_ns)
            except queue.Empty:
                break
        return sorted(self.due)
