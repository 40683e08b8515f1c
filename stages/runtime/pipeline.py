"""One pipeline in one process: a thread per stage, queries routed along the graph, every
(query, stage, visit) recorded.

The load generator calls `issue`; stage threads run queries and route them on; the branch that
ends a query records its row. `finish` waits for in-flight queries until the deadline, records
the rest as `timeout`, and joins every thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.runtime.channels import (
    STOP,
    AnyInbox,
    Channel,
    Empty,
    Inbox,
    JoinBuffer,
    JoinInbox,
    PriorityInbox,
)
from stages.runtime.counters import PipelineCounters, Tally
from stages.runtime.graph import StageGraph, StageNode
from stages.runtime.query import DROPPED, ERROR, NOT_ISSUED, OK, TIMEOUT, Query
from stages.runtime.recorder import CHUNK_ROWS, Recorder, RowBuffer
from stages.runtime.registry import StageRegistry, default_registry
from stages.runtime.stage import Stage, StageContext
from stages.spec.models import PipelineSpec

IDLE_WAKE_S = 0.25  # an idle stage thread wakes this often to flush rows and check for stop
JOIN_SWEEP_NS = 100_000_000


@dataclass
class StageErrorRecord:
    stage: str
    error: str
    first_query_id: int
    count: int = 1


class _Node:
    """A stage's runtime state: its instance, inbox and resolved output channels."""

    def __init__(self, node: StageNode, stage: Stage, inbox: Inbox) -> None:
        self.graph_node = node
        self.index = node.index
        self.name = node.id
        self.stage = stage
        self.inbox = inbox
        self.max_visits = node.spec.max_visits
        self.outputs: list[tuple[str, Channel, bool]] = []  # (name, channel, is_back_edge)
        self.output_by_name: dict[str, tuple[str, Channel, bool]] = {}
        self.join: JoinBuffer | None = None
        self.errors: dict[str, StageErrorRecord] = {}
        self.thread: threading.Thread | None = None


def _make_inbox(node: StageNode, graph: StageGraph, capacity: int) -> Inbox:
    if node.spec.input_policy == "priority":
        assert node.spec.priorities is not None
        return PriorityInbox(capacity, [graph.index_of[name] for name in node.spec.priorities])
    if node.spec.input_policy == "join":
        return JoinInbox(capacity)
    return AnyInbox(capacity)


class PipelineRuntime:
    """Builds, runs and tears down one pipeline's stage threads."""

    def __init__(
        self,
        pipeline: PipelineSpec,
        recorder: Recorder,
        *,
        seed: int = 0,
        cache_dir: Path | None = None,
        registry: StageRegistry | None = None,
        on_complete: Callable[[Query], None] | None = None,
    ) -> None:
        registry = registry or default_registry()
        self.spec = pipeline
        self.graph = StageGraph.from_pipeline(pipeline)
        self.recorder = recorder
        self._lock = threading.Lock()
        self.issued = 0
        self.first_issue_ns = 0
        self._tallies: list[Tally] = []
        self.issuer_tally = self.new_tally()
        self.stop_event = threading.Event()
        self.failure: str | None = None
        self.stop_issuing = threading.Event()
        """Set when the pipeline must stop taking load (error budget spent, shutdown)."""
        self.on_complete = on_complete
        """Called with each finished query's root, in the thread that finished it."""
        self._inflight: dict[int, Query] = {}
        self._idle = threading.Event()
        self._idle.set()
        self._error_budget = pipeline.error_budget
        self.leaked_threads: list[str] = []
        capacity = pipeline.loadgen.queue_depth
        back_edges = self._back_edges()

        self.nodes: list[_Node] = []
        for node in self.graph.nodes:
            stage_class = registry.get(node.spec.type)
            config = stage_class.config_model.model_validate(node.spec.config)
            context = StageContext(
                stage_id=node.id,
                stage_index=node.index,
                pipeline=pipeline.name,
                device=pipeline.device,
                seed=seed * 1_000_003 + node.index,
                outputs=tuple(node.spec.outputs),
                stop_event=self.stop_event,
                write_rows=recorder.write_rows,
                **({"cache_dir": cache_dir} if cache_dir else {}),
            )
            inbox = _make_inbox(node, self.graph, capacity)
            self.nodes.append(_Node(node, stage_class(config, context), inbox))
        for runtime_node in self.nodes:
            node = runtime_node.graph_node
            for target in node.outputs:
                target_node = self.nodes[target]
                entry = (
                    target_node.name,
                    target_node.inbox.channel_for(node.index),
                    (node.index, target) in back_edges,
                )
                runtime_node.outputs.append(entry)
                runtime_node.output_by_name[target_node.name] = entry
            if node.spec.input_policy == "join":
                runtime_node.join = JoinBuffer(
                    list(dict.fromkeys(node.inputs)),
                    {index: self.nodes[index].name for index in node.inputs},
                )
        self.entry_channels = [
            self.nodes[index].inbox.channel_for(-1) for index in self.graph.entries
        ]
        self.stage_count = len(self.nodes)

    def _back_edges(self) -> set[tuple[int, int]]:
        """Edges that close a cycle. Sends on them ignore the queue bound: two stages of a loop
        blocking on each other's full queues would otherwise deadlock."""
        edges = set()
        for component in self.graph.cycles():
            members = set(component)
            for source in component:
                for target in self.graph.nodes[source].outputs:
                    if target in members and target <= source:
                        edges.add((source, target))
        return edges

    # ----------------------------------------------------------------- lifecycle

    def prepare(self) -> None:
        """Load models and data in every stage (before the start barrier)."""
        for node in self.nodes:
            node.stage.prepare()

    def start(self) -> None:
        for node in self.nodes:
            node.thread = threading.Thread(
                target=self._stage_loop, args=(node,), name=f"stage:{node.name}", daemon=True
            )
            node.thread.start()

    # ----------------------------------------------------------------- load side

    def new_query(
        self, query_id: int, scheduled_ns: int, samples: int = 1, warmup: bool = False
    ) -> Query:
        return Query(query_id, scheduled_ns, samples, None, warmup, self.stage_count)

    def issue(self, query: Query, block: bool, deadline_ns: int | None = None) -> bool:
        """Send a new query to the entry stages. Without `block`, a full entry queue refuses it
        (the caller records it dropped); with it, waits for room (back-pressure), but not past
        `deadline_ns` nor once the load is stopped: then nothing was sent, False is returned
        and the caller records the query `not_issued`. The issue time is taken when the query
        goes in, so under back-pressure the wait for room is issue delay, not queue wait."""
        channels = self.entry_channels
        if not block and any(channel.full() for channel in channels):
            return False
        if block and not self._room_by(channels[0], deadline_ns):
            return False
        query.outstanding = len(channels)
        self._inflight[query.query_id] = query  # dict updates are atomic under the GIL
        if self._idle.is_set():
            self._idle.clear()
        issued_ns = time.monotonic_ns()
        query.issued_ns = issued_ns
        query.enqueued_ns = issued_ns
        # Branches for further entries are copied before the query is visible to any stage.
        branches = [query.branch() for _ in channels[1:]]
        # Room was there a moment ago and the load generator is the entry's only bounded
        # producer (loop edges into it are unbounded), so this cannot overfill it.
        channels[0].put_unbounded(query)
        for channel, branch in zip(channels[1:], branches, strict=True):
            self._send(channel, branch)
        self.issued += 1
        if not self.first_issue_ns:
            self.first_issue_ns = issued_ns
        return True

    def _room_by(self, channel: Channel, deadline_ns: int | None) -> bool:
        """Wait for room in `channel` until `deadline_ns` (None: no deadline) or a stop of the
        load; False if neither room came."""
        if channel.wait_for_room(0):
            return True
        while not self.stop_issuing.is_set() and not self.stop_event.is_set():
            wait_s = IDLE_WAKE_S
            if deadline_ns is not None:
                wait_s = min(wait_s, (deadline_ns - time.monotonic_ns()) / 1e9)
                if wait_s <= 0:
                    return False
            if channel.wait_for_room(wait_s):
                return True
        return False

    def register_offline(self, queries: list[Query]) -> None:
        """Offline, before the start: enter the queries in the in-flight table, so issuing
        them at the start costs only a timestamp and a queue put each."""
        fan_out = len(self.entry_channels)
        inflight = self._inflight
        for query in queries:
            inflight[query.query_id] = query
            query.outstanding = fan_out
        if queries:
            self._idle.clear()

    def unregister_offline(self, queries: list[Query]) -> None:
        """Offline: take registered queries that will never be issued back out of the
        in-flight table, so the drain neither waits for them nor records them `timeout`."""
        inflight = self._inflight
        for query in queries:
            inflight.pop(query.query_id, None)
        if not inflight:
            self._idle.set()

    def issue_offline(self, queries: list[Query], scheduled_ns: int) -> None:
        """Offline: every query (registered with `register_offline`) is due at `scheduled_ns`
        and enters at once, as MLPerf's Offline scenario issues them."""
        channels = self.entry_channels
        self.issued += len(queries)
        monotonic_ns = time.monotonic_ns
        if not self.first_issue_ns:
            self.first_issue_ns = monotonic_ns()
        if len(channels) == 1:
            put = channels[0].raw_put
            for query in queries:
                query.scheduled_ns = scheduled_ns
                query.issued_ns = query.enqueued_ns = monotonic_ns()
                put(query)
            return
        for query in queries:
            query.scheduled_ns = scheduled_ns
            query.issued_ns = query.enqueued_ns = monotonic_ns()
            for position, channel in enumerate(channels):
                channel.put_unbounded(query if position == 0 else query.branch())

    def record_dropped(self, query: Query, buffer: RowBuffer, refused_ns: int) -> None:
        """A query the entry queue refused: recorded, never silently skipped."""
        buffer.query_rows.append(
            (
                query.query_id,
                query.scheduled_ns,
                refused_ns,
                None,
                DROPPED,
                query.samples,
                query.warmup,
            )
        )
        self.issuer_tally.dropped += 1

    def record_not_issued(
        self, query_id: int, scheduled_ns: int, samples: int, warmup: bool, buffer: RowBuffer
    ) -> None:
        """An arrival that was due inside the window when the load stopped early (timeout,
        pipeline stop): recorded `not_issued`, so it is in a table and not silently lost."""
        buffer.query_rows.append((query_id, scheduled_ns, None, None, NOT_ISSUED, samples, warmup))

    def new_tally(self) -> Tally:
        tally = Tally()
        with self._lock:
            self._tallies.append(tally)
        return tally

    @property
    def counters(self) -> PipelineCounters:
        """Totals summed over the threads' tallies (a consistent-enough live snapshot)."""
        snapshot = PipelineCounters(issued=self.issued, first_issue_ns=self.first_issue_ns)
        with self._lock:
            tallies = list(self._tallies)
        for tally in tallies:
            snapshot.add(tally)
        snapshot.recent_latency_ns = list(self.recorder.recent_latency_ns)
        return snapshot

    # ----------------------------------------------------------------- stage threads

    def _send(self, channel: Channel, query: Query) -> None:
        if channel.put(query, timeout=IDLE_WAKE_S):
            return
        while not self.stop_event.is_set():  # downstream full: keep waiting unless shutting down
            if channel.put(query, timeout=IDLE_WAKE_S):
                return

    def _stage_loop(self, node: _Node) -> None:
        """A stage thread. The common case (one FIFO input, route to the single output or end
        at an exit, no fork) is inlined; forks, joins, errors and loops take helper methods."""
        buffer = self.recorder.buffer()
        tally = self.new_tally()
        inbox = node.inbox
        fifo = inbox.channel if isinstance(inbox, AnyInbox) else None
        fifo_get = fifo.raw_get if fifo is not None else None
        get = inbox.get
        run = node.stage.run
        index = node.index
        max_visits = node.max_visits
        join = node.join
        records_outcome = node.stage.records_outcome
        is_exit = not node.outputs
        only_output = node.outputs[0][1] if len(node.outputs) == 1 else None
        inflight = self._inflight
        inflight_pop = inflight.pop
        monotonic_ns = time.monotonic_ns
        next_sweep_ns = 0
        # Counts and buffer aliases are kept in locals and published / refreshed at each flush.
        ok = samples_ok = last_completed_ns = 0
        stage_rows = buffer.stage_rows
        stage_rows_append = stage_rows.append
        query_rows_append = buffer.query_rows.append
        next_flush_ns = buffer.next_flush_ns
        while True:
            try:
                if fifo_get is not None:
                    query = fifo_get(True, IDLE_WAKE_S)
                    if fifo._waiting_producers:  # type: ignore[union-attr]
                        fifo.wake_producer()  # type: ignore[union-attr]
                else:
                    query = get(IDLE_WAKE_S)
            except Empty:
                tally.ok += ok
                tally.samples_ok += samples_ok
                tally.last_completed_ns = max(tally.last_completed_ns, last_completed_ns)
                ok = samples_ok = 0
                buffer.flush()
                stage_rows = buffer.stage_rows
                stage_rows_append = stage_rows.append
                query_rows_append = buffer.query_rows.append
                next_flush_ns = buffer.next_flush_ns
                if join is not None:
                    self._sweep_join(join, buffer, tally)
                continue
            if query is STOP:
                break
            if join is not None:
                if query.root.status != OK:  # a sibling branch failed: this one ends too
                    self._end_branch(query, query.root.status, monotonic_ns(), buffer, tally)
                    continue
                merged = join.offer(query)
                if monotonic_ns() > next_sweep_ns:
                    self._sweep_join(join, buffer, tally)
                    next_sweep_ns = monotonic_ns() + JOIN_SWEEP_NS
                if merged is None:
                    continue
                with self._lock:
                    merged.root.outstanding -= len(join.sources) - 1
                query = merged
                # The merged record keeps the first branch's arrival as enqueued_ns, so the
                # wait for the slower sibling (join wait) is recorded, not lost.
                joined_ns = monotonic_ns()
            else:
                joined_ns = None
            visit = query.visits[index] + 1
            query.visits[index] = visit
            started_ns = monotonic_ns()
            if max_visits is not None and visit > max_visits:
                route: Any = ()
                status = ERROR
                self._note_error(node, query, f"visited {visit} times, max_visits {max_visits}")
            else:
                try:
                    route = run(query)
                    status = OK
                except Exception as error:
                    route = ()
                    status = ERROR
                    self._note_error(node, query, f"{type(error).__name__}: {error}")
            finished_ns = monotonic_ns()
            if records_outcome:
                stage_rows_append(
                    (
                        query.query_id,
                        index,
                        visit,
                        query.enqueued_ns,
                        started_ns,
                        finished_ns,
                        status,
                        query.first_token_ns,
                        query.tokens,
                        joined_ns,
                        query.graded,
                        query.correct,
                        query.loss,
                    )
                )
                query.first_token_ns = query.tokens = query.graded = query.correct = None
                query.loss = None
            else:
                stage_rows_append(
                    (
                        query.query_id,
                        index,
                        visit,
                        query.enqueued_ns,
                        started_ns,
                        finished_ns,
                        status,
                        None,
                        None,
                        joined_ns,
                        None,
                        None,
                        None,
                    )
                )
            if status != OK:
                self._end_branch(query, ERROR, finished_ns, buffer, tally)
            elif route is None and is_exit and query.root.outstanding == 1:
                # Fast path of `_end_branch`: the query's only live branch ends here.
                root = query.root
                root.outstanding = 0
                if inflight_pop(root.query_id, None) is not None:
                    if not inflight:
                        self._idle.set()
                    root.completed_ns = finished_ns
                    query_rows_append(
                        (
                            root.query_id,
                            root.scheduled_ns,
                            root.issued_ns,
                            finished_ns,
                            root.status,
                            root.samples,
                            root.warmup,
                        )
                    )
                    if root.status == OK:
                        ok += 1
                        samples_ok += root.samples
                    else:
                        tally.errors += 1  # a forked query whose other branch failed
                        if self._error_budget is not None:
                            self._check_error_budget()
                    last_completed_ns = finished_ns
                    on_complete = self.on_complete
                    if on_complete is not None:
                        on_complete(root)
            elif route is None and only_output is not None and not only_output.full():
                query.source = index
                query.enqueued_ns = finished_ns
                only_output.put_unbounded(query)
            else:
                self._route(node, query, route, finished_ns, buffer, tally)
            if finished_ns >= next_flush_ns or len(stage_rows) >= CHUNK_ROWS:
                tally.ok += ok
                tally.samples_ok += samples_ok
                tally.last_completed_ns = max(tally.last_completed_ns, last_completed_ns)
                ok = samples_ok = 0
                buffer.flush()
                stage_rows = buffer.stage_rows
                stage_rows_append = stage_rows.append
                query_rows_append = buffer.query_rows.append
                next_flush_ns = buffer.next_flush_ns
        tally.ok += ok
        tally.samples_ok += samples_ok
        tally.last_completed_ns = max(tally.last_completed_ns, last_completed_ns)
        buffer.flush()

    def _route(
        self, node: _Node, query: Query, route: Any, now_ns: int, buffer: RowBuffer, tally: Tally
    ) -> None:
        if route is None:
            targets = node.outputs
        else:
            try:
                targets = [node.output_by_name[name] for name in route]
            except KeyError as missing:
                self._note_error(node, query, f"routed to {missing}, not an output of the stage")
                self._end_branch(query, ERROR, now_ns, buffer, tally)
                return
        if not targets:
            self._end_branch(query, OK, now_ns, buffer, tally)
            return
        if len(targets) > 1:
            with self._lock:
                query.root.outstanding += len(targets) - 1
        source = node.index
        for position, (_name, channel, back_edge) in enumerate(targets):
            record = query if position == 0 else query.branch()
            record.source = source
            record.enqueued_ns = now_ns
            if back_edge:
                channel.put_unbounded(record)
            else:
                self._send(channel, record)

    def _sweep_join(self, join: JoinBuffer, buffer: RowBuffer, tally: Tally) -> None:
        """End branches waiting at a join for a sibling that failed."""
        failed = [
            query_id
            for query_id, arrived in join.pending.items()
            if next(iter(arrived.values())).root.status != OK
        ]
        now_ns = time.monotonic_ns()
        for query_id in failed:
            for branch in join.pending.pop(query_id).values():
                self._end_branch(branch, branch.root.status, now_ns, buffer, tally)

    def _note_error(self, node: _Node, query: Query, text: str) -> None:
        record = node.errors.get(text)
        if record is None:
            node.errors[text] = StageErrorRecord(node.name, text, query.query_id)
        else:
            record.count += 1

    def _end_branch(
        self, query: Query, status: int, now_ns: int, buffer: RowBuffer, tally: Tally
    ) -> None:
        """One branch of a query is done; the last one records the query."""
        root = query.root
        if root.outstanding == 1:
            # The only live branch: no other thread can touch this root, so no lock.
            root.outstanding = 0
            if status != OK:
                root.status = status
        else:
            with self._lock:
                if status != OK:
                    root.status = status
                root.outstanding -= 1
                if root.outstanding > 0:
                    return
        # Whoever removes the query from the in-flight table records it: this thread, or
        # `finish` recording it as timed out (atomic dict pop under the GIL).
        inflight = self._inflight
        if inflight.pop(root.query_id, None) is None:
            return
        if not inflight:
            self._idle.set()
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
            if self._error_budget is not None:
                self._check_error_budget()
        on_complete = self.on_complete
        if on_complete is not None:
            on_complete(root)

    def _check_error_budget(self) -> None:
        with self._lock:
            failed = sum(tally.errors for tally in self._tallies)
        if self._error_budget is not None and failed >= self._error_budget:
            if self.failure is None:
                self.failure = f"error budget exhausted: {failed} failed queries{self._top_error()}"
            self.stop_issuing.set()

    def _top_error(self) -> str:
        """ " (most often <stage>: <error>)" for the most frequent stage error so far, so the
        pipeline's failure names its cause, not only the count ("" when none was noted)."""
        # list() copies each dict in one step under the GIL while stage threads may add to it
        records = [record for node in self.nodes for record in list(node.errors.values())]
        if not records:
            return ""
        top = max(records, key=lambda record: record.count)
        return f" (most often {top.stage}: {top.error})"

    # ----------------------------------------------------------------- shutdown

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no query is in flight; False if `timeout_s` passed first."""
        return self._idle.wait(max(0.0, timeout_s))

    def finish(self, drain_deadline_ns: int, buffer: RowBuffer) -> bool:
        """Drain until the deadline, record what is left as `timeout`, stop and join every
        stage thread, close the stages. Returns True if everything drained in time."""
        drained = self.wait_idle((drain_deadline_ns - time.monotonic_ns()) / 1e9)
        if not drained:
            leftovers = []
            for query_id in list(self._inflight):
                root = self._inflight.pop(query_id, None)
                if root is not None:
                    root.status = TIMEOUT
                    leftovers.append(root)
            self._idle.set()
            self.issuer_tally.timeouts += len(leftovers)
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
        self.stop_issuing.set()
        self.stop_event.set()  # releases stages waiting on it (sleep-like or hung by design)
        for node in self.nodes:
            node.inbox.stop()
        for node in self.nodes:
            if node.thread is not None:
                node.thread.join(timeout=5.0)
                if node.thread.is_alive():
                    self.leaked_threads.append(node.name)
        for node in self.nodes:
            try:
                node.stage.close()
            except Exception as error:
                self._note_error(node, Query(-1, 0), f"close: {type(error).__name__}: {error}")
        buffer.flush()
        self.recorder.write_errors_table(self.error_rows())
        return drained

    def error_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "stage": record.stage,
                "first_query_id": record.first_query_id,
                "count": record.count,
                "error": record.error,
            }
            for node in self.nodes
            for record in node.errors.values()
        ]
