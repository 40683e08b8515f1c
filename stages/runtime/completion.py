"""Where a query goes after a stage and where it ends: routing (forks, loops), joins, the
in-flight table, the `queries` row of each finished query, stage errors and the error budget.

One `Completion` per pipeline, shared by its stage threads, the issuing thread and the drain.
The common case (one output, or the end at a pipeline output) is inlined in the stage loop
(`stages.runtime.stage_thread`); everything else comes here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stages.runtime.channels import JoinBuffer, Outlet
from stages.runtime.counters import Tally
from stages.runtime.query import ERROR, OK, TIMEOUT, Query
from stages.runtime.recorder import RowBuffer
from stages.runtime.wiring import RuntimeNode

# A producer blocked on a full channel, a join's thread and a priority inbox's thread wake this
# often (to check for a stop, sweep failed branches, flush rows).
IDLE_WAKE_S = 0.25

FAILED: Any = object()
"""The route of a visit whose stage call failed: its branch ends in error."""


class IdleFlag:
    """Whether nothing is in flight: `threading.Event`'s interface, but `set`, `clear` and
    `is_set` take no lock unless a thread is waiting. A one-client closed loop sets and clears
    it once a query each, and an `Event` takes its condition's lock on both (~1 us a query).

    Correct without the lock: a waiter registers (under the lock) before it tests the flag, so
    a `set` either sees the waiter and notifies it under the lock, or happened before the
    waiter's test, which then finds the flag set."""

    __slots__ = ("_condition", "_flag", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters = 0
        self._condition = threading.Condition(threading.Lock())

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        if self._waiters:
            with self._condition:
                self._condition.notify_all()

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the flag is set (True, as `Event.wait`: even if it was cleared again
        since); False if `timeout` seconds passed first."""
        if self._flag:
            return True
        with self._condition:
            self._waiters += 1
            try:
                # Only `set` notifies (a Condition has no spurious wake-ups).
                return self._flag or self._condition.wait(timeout)
            finally:
                self._waiters -= 1


@dataclass
class StageErrorRecord:
    stage: str
    error: str
    first_query_id: int
    count: int = 1


class StageErrors:
    """Distinct errors per stage (text, first query, count): the `errors` table, and the cause
    named when the error budget stops the pipeline. A stage's records are written by its
    threads (several with `concurrency`, or an asynchronous stage's loop and router: hence the
    lock, on the failure path only) and by `finish` once they have ended."""

    def __init__(self, stage_names: list[str]) -> None:
        self._names = stage_names
        self._by_stage: list[dict[str, StageErrorRecord]] = [{} for _ in stage_names]
        self._lock = threading.Lock()

    def note(self, stage_index: int, query_id: int, text: str) -> None:
        records = self._by_stage[stage_index]
        with self._lock:
            record = records.get(text)
            if record is None:
                records[text] = StageErrorRecord(self._names[stage_index], text, query_id)
            else:
                record.count += 1

    def most_frequent(self) -> str:
        """ " (most often <stage>: <error>)" for the most frequent stage error so far, so the
        pipeline's failure names its cause, not only the count ("" when none was noted)."""
        # list() copies each dict in one step under the GIL while stage threads may add to it
        records = [record for records in self._by_stage for record in list(records.values())]
        if not records:
            return ""
        top = max(records, key=lambda record: record.count)
        return f" (most often {top.stage}: {top.error})"

    def rows(self) -> list[dict[str, Any]]:
        """The `errors` table: one row per distinct error, stage by stage."""
        return [
            {
                "stage": record.stage,
                "first_query_id": record.first_query_id,
                "count": record.count,
                "error": record.error,
            }
            for records in self._by_stage
            for record in records.values()
        ]


class Completion:
    """The in-flight table and the ends of queries: whoever removes a query from the table
    records it, exactly once (a stage thread at its end, or the drain as `timeout`)."""

    def __init__(
        self,
        stage_names: list[str],
        error_budget: int | None,
        stop_event: threading.Event,
        stop_issuing: threading.Event,
    ) -> None:
        self.lock = threading.Lock()
        """Guards the tally list and the branch counts of forked queries."""
        self.inflight: dict[int, Query] = {}
        """Issued, unfinished queries by id (dict updates are atomic under the GIL)."""
        self.idle = IdleFlag()
        """Set while nothing is in flight."""
        self.idle.set()
        self.tallies: list[Tally] = []
        self.errors = StageErrors(stage_names)
        self.error_budget = error_budget
        self.failure: str | None = None
        self.stop_event = stop_event
        self.stop_issuing = stop_issuing
        self.on_complete: Callable[[Query], None] | None = None
        """Called with each finished query's root, in the thread that finished it."""

    def new_tally(self) -> Tally:
        """A tally for the calling thread, summed into the pipeline's counters."""
        tally = Tally()
        with self.lock:
            self.tallies.append(tally)
        return tally

    def send(self, channel: Outlet, query: Query) -> None:
        """Put with back-pressure; a full downstream is waited out unless shutting down."""
        if channel.put(query, timeout=IDLE_WAKE_S):
            return
        while not self.stop_event.is_set():
            if channel.put(query, timeout=IDLE_WAKE_S):
                return

    def route(
        self,
        node: RuntimeNode,
        query: Query,
        route: Any,
        now_ns: int,
        buffer: RowBuffer,
        tally: Tally,
    ) -> None:
        """Send a query on after `node` by its stage's `route` (None: every output), forking
        one branch per further target; no target (or `FAILED`) ends this branch."""
        if route is FAILED:
            self.end_branch(query, ERROR, now_ns, buffer, tally)
            return
        if route is None:
            targets = node.outputs
        else:
            try:
                targets = [node.output_by_name[name] for name in route]
            except KeyError as missing:
                text = f"routed to {missing}, not an output of the stage"
                self.errors.note(node.index, query.query_id, text)
                self.end_branch(query, ERROR, now_ns, buffer, tally)
                return
        if not targets:
            self.end_branch(query, OK, now_ns, buffer, tally)
            return
        self._fork(node.index, query, targets, now_ns)

    def _fork(self, source: int, query: Query, targets: list[Any], now_ns: int) -> None:
        if len(targets) > 1:
            with self.lock:
                query.root.outstanding += len(targets) - 1
        for position, (_name, channel, back_edge) in enumerate(targets):
            record = query if position == 0 else query.branch()
            record.source = source
            record.enqueued_ns = now_ns
            if back_edge:
                channel.put_unbounded(record)
            else:
                self.send(channel, record)

    def merge_at_join(self, join: JoinBuffer, branch: Query) -> Query | None:
        """Offer an arriving branch to the join; the merged query once every input gave one."""
        merged = join.offer(branch)
        if merged is not None:
            with self.lock:
                merged.root.outstanding -= len(join.sources) - 1
        return merged

    def sweep_join(self, join: JoinBuffer, buffer: RowBuffer, tally: Tally) -> None:
        """End branches waiting at a join for a sibling that failed."""
        failed = [
            query_id
            for query_id, arrived in join.pending.items()
            if next(iter(arrived.values())).root.status != OK
        ]
        now_ns = time.monotonic_ns()
        for query_id in failed:
            for branch in join.pending.pop(query_id).values():
                self.end_branch(branch, branch.root.status, now_ns, buffer, tally)

    def end_branch(
        self, query: Query, status: int, now_ns: int, buffer: RowBuffer, tally: Tally
    ) -> None:
        """One branch of a query is done; the last one records the query."""
        root = query.root
        if not self._was_last_branch(root, status):
            return
        # Whoever removes the query from the in-flight table records it: this thread, or
        # `finish` recording it as timed out (atomic dict pop under the GIL).
        inflight = self.inflight
        if inflight.pop(root.query_id, None) is None:
            return
        if not inflight:
            self.idle.set()
        root.completed_ns = now_ns
        final = root.status
        buffer.query_rows.append(
            (
                root.query_id,
                root.scheduled_ns,
                root.issued_ns,
                now_ns,
                final,
                root.samples,
                root.warmup,
            )
        )
        tally.last_completed_ns = now_ns
        if final == OK:
            tally.ok += 1
            tally.samples_ok += root.samples
        else:
            tally.errors += 1
            if self.error_budget is not None:
                self.check_error_budget()
        on_complete = self.on_complete
        if on_complete is not None:
            on_complete(root)

    def _was_last_branch(self, root: Query, status: int) -> bool:
        """Count one branch of `root` done (a failure marks the query); True for the last."""
        if root.outstanding == 1:
            # The only live branch: no other thread can touch this root, so no lock.
            root.outstanding = 0
            if status != OK:
                root.status = status
            return True
        with self.lock:
            if status != OK:
                root.status = status
            root.outstanding -= 1
            return root.outstanding <= 0

    def check_error_budget(self) -> None:
        """Stop the load once the failed queries reach the pipeline's error budget."""
        with self.lock:
            failed = sum(tally.errors for tally in self.tallies)
        if self.error_budget is not None and failed >= self.error_budget:
            if self.failure is None:
                cause = self.errors.most_frequent()
                self.failure = f"error budget exhausted: {failed} failed queries{cause}"
            self.stop_issuing.set()

    def time_out_inflight(self, buffer: RowBuffer) -> int:
        """The drain's deadline passed: record every query still in flight as `timeout`;
        returns how many."""
        leftovers = []
        for query_id in list(self.inflight):
            root = self.inflight.pop(query_id, None)
            if root is not None:
                root.status = TIMEOUT
                leftovers.append(root)
        self.idle.set()
        for root in leftovers:
            buffer.query_rows.append(
                (
                    root.query_id,
                    root.scheduled_ns,
                    root.issued_ns,
                    None,
                    TIMEOUT,
                    root.samples,
                    root.warmup,
                )
            )
        return len(leftovers)
