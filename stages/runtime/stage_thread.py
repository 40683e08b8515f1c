"""A stage's thread: take a query from the inbox, run the stage, record the stage row, pass the
query on.

This loop is the per-query cost that a benchmark of small stages measures
(`perf/stage_overhead.py`), so the common case (one FIFO input, the single output or the end at
a pipeline output, no fork) is inlined with local aliases, and every rare case has its own
method: joins and priority inputs (`take`), visit limits and outcome fields (wrappers of the
stage call), failures, forks and loops (`Completion.route`), and the flush between periods.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from stages.contracts.errors import RunFailedError
from stages.runtime.channels import STOP, AnyInbox, Channel, Empty, JoinInbox
from stages.runtime.completion import FAILED, IDLE_WAKE_S, Completion
from stages.runtime.query import ERROR, OK, Query
from stages.runtime.recorder import CHUNK_ROWS, Recorder
from stages.runtime.stage import Route, Stage
from stages.runtime.wiring import RuntimeNode

JOIN_SWEEP_NS = 100_000_000

# Why `_serve_until_flush` returned.
FLUSH_DUE = "flush_due"
IDLE = "idle"  # nothing arrived for IDLE_WAKE_S (inboxes with a timed take)
STOPPED = "stopped"

_NO_PRODUCERS = Channel(1)
"""Stands in for the input channel of an inbox whose `get` wakes producers itself: nothing is
ever put on it, so no producer ever waits on it."""


class VisitLimitError(RunFailedError):
    """A query visited a stage more often than its `max_visits`; the text is the error row."""


def failure_text(error: Exception) -> str:
    """The `errors` row text of a failed visit."""
    if isinstance(error, VisitLimitError):
        return str(error)
    return f"{type(error).__name__}: {error}"


class Outcome:
    """What a stage that `records_outcome` reported for its latest visit (the stage row's
    outcome columns); stays all None for the other stages."""

    __slots__ = ("correct", "first_token_ns", "graded", "loss", "prompt_tokens", "tokens")

    def __init__(self) -> None:
        self.first_token_ns: int | None = None
        self.tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.graded: int | None = None
        self.correct: int | None = None
        self.loss: float | None = None


class StageThread:
    """The body of one stage thread (`run`), with its row buffer and tally; a stage with
    `concurrency: N` has N of them taking from its one inbox, each with its own stage
    instance (unless the type is `thread_safe`), row buffer, tally and outcome."""

    def __init__(
        self,
        node: RuntimeNode,
        completion: Completion,
        recorder: Recorder,
        stage: Stage[Any] | None = None,
    ) -> None:
        """`stage`: the instance this thread runs (one of `node.stages`; default the first)."""
        self.node = node
        self.followers: list[StageThread] = []
        """The bodies of the stages fused into this thread (they have no thread of their own);
        their rows are flushed with this thread's."""
        self.stage = node.stage if stage is None else stage
        self.completion = completion
        self.buffer = recorder.buffer()
        self.tally = completion.new_tally()
        self.outcome = Outcome()
        self.next_sweep_ns = 0
        self.only_output = node.outputs[0][1] if len(node.outputs) == 1 else None
        self.ends_here = not node.outputs  # a pipeline output
        self.joins = node.join is not None
        self.short_rows = not self.joins and not self.stage.records_outcome
        """A stage with no outcome and no join writes the short row (`SHORT_STAGE_ROW`)."""
        # The single output's room check and put as C calls (`Outlet.qsize`, `raw_put`): read
        # here, since a body is built once its outputs are wired (fused hand-offs attached).
        outlet = _NO_PRODUCERS if self.only_output is None else self.only_output
        self.room_taken, self.capacity, self.send = outlet.qsize, outlet.capacity, outlet.raw_put
        self.take, self.fifo = self._taker()
        self.run_stage = self._stage_call()

    def run(self) -> None:
        """Serve queries until STOP, handing the rows to the recorder at the end of every
        flush period and at the end (and, for inboxes that wake when idle, when idle)."""
        buffer, join = self.buffer, self.node.join
        while True:
            ended_by = self._serve_until_flush()
            buffer.flush()
            for follower in self.followers:
                follower.buffer.flush()
            if ended_by == STOPPED:
                return
            if ended_by == IDLE and join is not None:
                self.completion.sweep_join(join, buffer, self.tally)

    def _serve_until_flush(self) -> str:  # noqa: C901 - inlined on purpose
        """The hot loop, for one flush period; returns why it ended (completions count at once)."""
        node, completion, buffer, tally = self.node, self.completion, self.buffer, self.tally
        take, fifo, run, outcome = self.take, self.fifo, self.run_stage, self.outcome
        index, only_output, ends_here = node.index, self.only_output, self.ends_here
        inflight, idle_set, route_on = completion.inflight, completion.idle.set, completion.route
        inflight_pop, monotonic_ns, stage_rows = inflight.pop, time.monotonic_ns, buffer.stage_rows
        append_stage_row, append_query_row = stage_rows.append, buffer.query_rows.append
        joins, short_rows, next_flush_ns = self.joins, self.short_rows, buffer.next_flush_ns
        room_taken, capacity, send = self.room_taken, self.capacity, self.send
        try:
            # `for`, not `while`: 3.11 specializes it at once (a `while` ran 60% slower at first).
            for query in iter(take, STOP):
                if fifo.waiting_producers:
                    fifo.wake_producer()
                joined_ns = monotonic_ns() if joins else None  # a merged query's join wait ends
                query.visits[index] = visit = query.visits[index] + 1
                started_ns = monotonic_ns()
                try:
                    route, status = run(query), OK
                except Exception as error:
                    self._note_failure(query, error)
                    route, status = FAILED, ERROR
                finished_ns = monotonic_ns()
                # The stage row (`recorder.STAGE_COLUMNS`; short: `recorder.SHORT_STAGE_ROW`).
                if short_rows:
                    append_stage_row((query.query_id, index, visit, query.enqueued_ns,
                                      started_ns, finished_ns, status))  # fmt: skip
                else:
                    append_stage_row((
                        query.query_id, index, visit, query.enqueued_ns, started_ns, finished_ns,
                        status, outcome.first_token_ns, outcome.tokens, joined_ns, outcome.graded,
                        outcome.correct, outcome.loss, outcome.prompt_tokens))  # fmt: skip
                if (route is None and ends_here and query.root.outstanding == 1
                        and query.root.status == OK
                        and inflight_pop(query.query_id, None) is not None):  # fmt: skip
                    # Fast path of `Completion.end_branch`: the query's only live branch ends ok.
                    root = query.root
                    root.outstanding = 0
                    if not inflight:
                        idle_set()
                    root.completed_ns = tally.last_completed_ns = finished_ns
                    append_query_row((root.query_id, root.scheduled_ns, root.issued_ns,
                                      finished_ns, OK, root.samples, root.warmup))  # fmt: skip
                    tally.ok += 1
                    tally.samples_ok += root.samples
                    on_complete = completion.on_complete
                    if on_complete is not None:
                        on_complete(root)
                elif route is None and only_output is not None and room_taken() < capacity:
                    query.source = index
                    query.enqueued_ns = finished_ns
                    send(query)
                else:
                    route_on(node, query, route, finished_ns, buffer, tally)
                if finished_ns >= next_flush_ns or len(stage_rows) >= CHUNK_ROWS:
                    return FLUSH_DUE
        except Empty:  # nothing arrived for IDLE_WAKE_S (joins and priority inboxes)
            return IDLE
        return STOPPED

    def serve_one(self, query: Query) -> None:
        """A fused stage's turn for one query, in the thread of the stage before it (called by
        its `FusedHandOff`): the same visit, stage row and routing as `_serve_until_flush`, its
        fast path to a single output included, the rest by `Completion`'s general path."""
        index, outcome = self.node.index, self.outcome
        query.visits[index] = visit = query.visits[index] + 1
        started_ns = time.monotonic_ns()
        try:
            route, status = self.run_stage(query), OK
        except Exception as error:
            self._note_failure(query, error)
            route, status = FAILED, ERROR
        finished_ns = time.monotonic_ns()
        self.buffer.stage_rows.append((
            query.query_id, index, visit, query.enqueued_ns, started_ns, finished_ns, status,
            outcome.first_token_ns, outcome.tokens, None, outcome.graded, outcome.correct,
            outcome.loss, outcome.prompt_tokens))  # fmt: skip
        only_output = self.only_output
        if route is None and only_output is not None and only_output.qsize() < only_output.capacity:
            query.source = index
            query.enqueued_ns = finished_ns
            only_output.raw_put(query)
        elif route is None and self.ends_here:
            self.completion.end_branch(query, OK, finished_ns, self.buffer, self.tally)
        else:
            self.completion.route(self.node, query, route, finished_ns, self.buffer, self.tally)

    def _taker(self) -> tuple[Callable[[], Any], Channel]:
        """How the loop takes its next query (or STOP), `take()`; and the channel whose
        waiting producers it must wake after each take.

        A plain FIFO inbox blocks without a timeout: a timed wait arms a kernel timer on every
        take (~0.25 us a hand-off on these VMs), and nothing needs the wake-up, because the
        tally is updated at each completion and the recorder's writer takes the rows of a
        buffer whose owner is overdue. A join wakes every IDLE_WAKE_S (raising `Empty`) to
        sweep branches whose sibling failed; a priority inbox's `get` takes a timeout too."""
        inbox = self.node.inbox
        if isinstance(inbox, JoinInbox):
            return self._take_merged, _NO_PRODUCERS
        if isinstance(inbox, AnyInbox):
            return inbox.channel.raw_get, inbox.channel
        # Inboxes of several channels (priority): their `get` wakes producers itself.
        return functools.partial(inbox.get, IDLE_WAKE_S), _NO_PRODUCERS

    def _take_merged(self) -> Any:
        """A join's `take`: branches wait in the join buffer until their query's last one
        arrives, returned merged (or STOP); a branch whose query already failed ends here.
        Raises `Empty` as the others do."""
        join, completion, get = self.node.join, self.completion, self.node.inbox.get
        assert join is not None
        while True:
            query = get(IDLE_WAKE_S)
            if query is STOP:
                return query
            if query.root.status != OK:  # a sibling branch failed: this one ends too
                status, now_ns = query.root.status, time.monotonic_ns()
                completion.end_branch(query, status, now_ns, self.buffer, self.tally)
                continue
            merged = completion.merge_at_join(join, query)
            if time.monotonic_ns() > self.next_sweep_ns:
                completion.sweep_join(join, self.buffer, self.tally)
                self.next_sweep_ns = time.monotonic_ns() + JOIN_SWEEP_NS
            if merged is not None:
                # The merged record keeps the first branch's arrival as enqueued_ns, so the
                # wait for the slower sibling (join wait) is recorded, not lost.
                return merged

    def _stage_call(self) -> Callable[[Query], Route]:
        """The stage's `run`, wrapped for the rare features the loop has no branch for."""
        run: Callable[[Query], Route] = self.stage.run
        if self.node.max_visits is not None:
            run = functools.partial(self._run_within_visit_limit, self.node.max_visits, run)
        if self.stage.records_outcome:
            run = functools.partial(self._run_recording_outcome, run)
        return run

    def _run_within_visit_limit(
        self, max_visits: int, run: Callable[[Query], Route], query: Query
    ) -> Route:
        """A loop's guard: a query past the stage's `max_visits` fails instead of running."""
        visit = query.visits[self.node.index]
        if visit > max_visits:
            raise VisitLimitError(f"visited {visit} times, max_visits {max_visits}")
        return run(query)

    def _run_recording_outcome(self, run: Callable[[Query], Route], query: Query) -> Route:
        """Run, then move the outcome fields the stage set from the query to `self.outcome`,
        where the stage row reads them: the next stage starts with none."""
        try:
            return run(query)
        finally:
            outcome = self.outcome
            outcome.first_token_ns, query.first_token_ns = query.first_token_ns, None
            outcome.tokens, query.tokens = query.tokens, None
            outcome.graded, query.graded = query.graded, None
            outcome.correct, query.correct = query.correct, None
            outcome.loss, query.loss = query.loss, None
            outcome.prompt_tokens, query.prompt_tokens = query.prompt_tokens, None

    def _note_failure(self, query: Query, error: Exception) -> None:
        self.completion.errors.note(self.node.index, query.query_id, failure_text(error))
