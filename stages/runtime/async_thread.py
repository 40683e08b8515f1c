"""The thread of an asynchronous stage: one asyncio event loop, up to `max_in_flight` visits.

A taker thread (`stage:<id>:take`) takes queries from the stage's input queue as a synchronous
stage thread does, but only while a visit slot is free (a semaphore of `max_in_flight`), so
queries beyond that wait in the bounded queue (back-pressure and queue wait as for any stage),
and hands each to the loop (`call_soon_threadsafe`). On the loop every visit is a task: visit
count, `started_ns`, `await run_async(query)`, `finished_ns`, one stage row in
`recorder.STAGE_COLUMNS` order, then the route. Routing that could wait on a full downstream
queue runs on a one-thread executor (`stage:<id>:route`), so the loop, whose other visits are
being timed, never blocks on back-pressure. STOP (one per thread) ends the taker; the loop
waits `ASYNC_STOP_GRACE_S` for the visits in flight, then cancels them (a cancelled visit's row
has status `timeout`; its query was already recorded by the drain).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stages.runtime.async_stage import DEFAULT_MAX_IN_FLIGHT, AsyncStage
from stages.runtime.channels import STOP, AnyInbox, Empty
from stages.runtime.completion import FAILED, IDLE_WAKE_S, Completion
from stages.runtime.counters import Tally
from stages.runtime.query import ERROR, OK, TIMEOUT, Query
from stages.runtime.recorder import CHUNK_ROWS, Recorder, RowBuffer
from stages.runtime.stage_thread import VisitLimitError, failure_text
from stages.runtime.wiring import RuntimeNode

ASYNC_STOP_GRACE_S = 1.0
"""After STOP, how long visits still in flight may finish before they are cancelled."""

_NO_OUTCOME = (None, None, None, None, None, None)


class AsyncStageThread:
    """The body of one asynchronous stage thread (`run`): its loop, taker, rows and tally."""

    def __init__(
        self, node: RuntimeNode, stage: AsyncStage[Any], completion: Completion, recorder: Recorder
    ) -> None:
        inbox = node.inbox
        if not isinstance(inbox, AnyInbox):  # the spec checks refuse other input policies
            raise TypeError(f"asynchronous stage {node.name!r} needs input_policy 'any'")
        self.node, self.stage, self.completion, self.recorder = node, stage, completion, recorder
        self.channel = inbox.channel
        self.buffer = recorder.buffer()
        self.tally = completion.new_tally()
        # A config set by hand (`config_model = X`) may lack the field: the default then.
        self.max_in_flight: int = getattr(stage.config, "max_in_flight", DEFAULT_MAX_IN_FLIGHT)
        self.slots = threading.Semaphore(self.max_in_flight)
        self.loop = asyncio.new_event_loop()
        self.tasks: set[asyncio.Task[None]] = set()
        self.in_flight = 0
        self.most_in_flight = 0
        """The most visits this thread ever had in flight at once (tests, diagnostics)."""
        self._stopped: asyncio.Future[None] | None = None
        self._router: ThreadPoolExecutor | None = None
        self._router_buffer: RowBuffer | None = None
        self._router_tally: Tally | None = None

    # ----------------------------------------------------------------- the loop thread

    def run(self) -> None:
        """Serve until STOP; then finish (or cancel) the visits in flight and stop the stage."""
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.loop.close()
            if self._router is not None:
                self._router.shutdown(wait=True)
            if self._router_buffer is not None:
                self._router_buffer.flush()  # its thread has ended: this one may hand it over
            self.buffer.flush()

    async def _serve(self) -> None:
        self._stopped = self.loop.create_future()
        await self._lifecycle_call("start", self.stage.start_async)
        taker = threading.Thread(target=self._take_loop, name=f"stage:{self.node.name}:take")
        taker.daemon = True
        taker.start()
        await self._stopped
        await self._finish_visits()
        await self._lifecycle_call("stop", self.stage.stop_async)
        taker.join(timeout=IDLE_WAKE_S)

    async def _lifecycle_call(self, what: str, call: Any) -> None:
        try:
            await call()
        except Exception as error:
            text = f"{what}: {type(error).__name__}: {error}"
            self.completion.errors.note(self.node.index, -1, text)

    async def _finish_visits(self) -> None:
        if not self.tasks:
            return
        _, pending = await asyncio.wait(set(self.tasks), timeout=ASYNC_STOP_GRACE_S)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=ASYNC_STOP_GRACE_S)

    def _begin(self, query: Query) -> None:
        task = self.loop.create_task(self._visit(query))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _stop(self) -> None:
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)

    def _flush(self) -> None:
        self.buffer.flush()

    # ----------------------------------------------------------------- one visit

    async def _visit(self, query: Query) -> None:
        index = self.node.index
        query.visits[index] = visit = query.visits[index] + 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        started_ns = time.monotonic_ns()
        route: Any
        try:
            route, status = await self._call(query, visit), OK
        except Exception as error:
            self.completion.errors.note(index, query.query_id, failure_text(error))
            route, status = FAILED, ERROR
        except asyncio.CancelledError:  # cut off at shutdown: the drain recorded the query
            route, status = FAILED, TIMEOUT
        finished_ns = time.monotonic_ns()
        self.in_flight -= 1
        try:
            self._record(query, visit, started_ns, finished_ns, status)
            if status != TIMEOUT:
                await self._route(query, route, finished_ns)
        finally:
            self.slots.release()

    def _call(self, query: Query, visit: int) -> Any:
        max_visits = self.node.max_visits
        if max_visits is not None and visit > max_visits:
            raise VisitLimitError(f"visited {visit} times, max_visits {max_visits}")
        return self.stage.run_async(query)

    def _record(
        self, query: Query, visit: int, started_ns: int, finished_ns: int, status: int
    ) -> None:
        """The stage row, in `recorder.STAGE_COLUMNS` order; the outcome fields move from the
        query to the row (the next stage starts with none)."""
        outcome: tuple[Any, ...] = _NO_OUTCOME
        if self.stage.records_outcome:
            outcome = (query.first_token_ns, query.tokens, query.graded, query.correct, query.loss,
                       query.prompt_tokens)  # fmt: skip
            query.first_token_ns = query.tokens = query.graded = query.correct = None
            query.loss = query.prompt_tokens = None
        buffer = self.buffer
        buffer.stage_rows.append((
            query.query_id, self.node.index, visit, query.enqueued_ns, started_ns, finished_ns,
            status, outcome[0], outcome[1], None, outcome[2], outcome[3], outcome[4],
            outcome[5]))  # fmt: skip
        if finished_ns >= buffer.next_flush_ns or len(buffer.stage_rows) >= CHUNK_ROWS:
            buffer.flush()

    async def _route(self, query: Query, route: Any, finished_ns: int) -> None:
        """Route on the loop when no send can wait; otherwise on the router thread."""
        node, completion = self.node, self.completion
        if _sends_without_waiting(node, route):
            completion.route(node, query, route, finished_ns, self.buffer, self.tally)
            return
        router, buffer, tally = self._router_parts()
        await self.loop.run_in_executor(
            router, completion.route, node, query, route, finished_ns, buffer, tally
        )

    def _router_parts(self) -> tuple[ThreadPoolExecutor, RowBuffer, Tally]:
        """The router thread, with its own row buffer (drained by the recorder's writer when
        overdue) and tally, made on first use."""
        if self._router is None or self._router_buffer is None or self._router_tally is None:
            name = f"stage:{self.node.name}:route"
            self._router = ThreadPoolExecutor(1, thread_name_prefix=name)
            self._router_buffer = self.recorder.buffer()
            self._router_tally = self.completion.new_tally()
        return self._router, self._router_buffer, self._router_tally

    # ----------------------------------------------------------------- the taker thread

    def _take_loop(self) -> None:
        """Take a query whenever a visit slot is free and hand it to the loop, until STOP (or
        shutdown while every slot stays busy)."""
        acquire, release = self.slots.acquire, self.slots.release
        channel, stop_event = self.channel, self.completion.stop_event
        call_soon, begin = self.loop.call_soon_threadsafe, self._begin
        while True:
            if not acquire(True, IDLE_WAKE_S):
                if stop_event.is_set():
                    break
                continue
            try:
                query = channel.raw_get(True, IDLE_WAKE_S)
            except Empty:
                release()
                call_soon(self._flush)
                continue
            if query is STOP:
                break
            if channel.waiting_producers:
                channel.wake_producer()
            call_soon(begin, query)
        call_soon(self._stop)


def _sends_without_waiting(node: RuntimeNode, route: Any) -> bool:
    """Whether routing a visit's `route` cannot wait on a full queue: it ends the branch, or
    every target has room (or is a back-edge, sent past the bound)."""
    if route is FAILED:
        return True
    if route is None:
        outputs = node.outputs
    else:
        outputs = [node.output_by_name[name] for name in route if name in node.output_by_name]
    return all(back_edge or not channel.full() for _, channel, back_edge in outputs)
