"""How queries enter a pipeline: one at a time (refused when the entry is full, or waiting for
room under back-pressure), all at once for the offline scenario, and the `queries` rows of
arrivals that never entered (dropped, not issued). Runs in the load generator's thread, or,
for a one-client closed loop, in the thread that completed the previous query (one issue at a
time either way: `stages.runtime.loadgen.closed_loop`)."""

from __future__ import annotations

import time

from stages.runtime.channels import Channel
from stages.runtime.completion import IDLE_WAKE_S, Completion
from stages.runtime.query import DROPPED, NOT_ISSUED, Query
from stages.runtime.recorder import RowBuffer


class Admission:
    """The entry side of one pipeline: counts what was issued and when issuing began."""

    def __init__(self, entry_channels: list[Channel], completion: Completion) -> None:
        self.entry_channels = entry_channels
        self.completion = completion
        self.tally = completion.new_tally()
        """The issuing thread's counts (dropped; timeouts found by the drain)."""
        self.issued = 0
        self.first_issue_ns = 0

    def issue(self, query: Query, block: bool, deadline_ns: int | None = None) -> bool:
        """Send a new query to the entry stages. Without `block`, a full entry queue refuses it
        (the caller records it dropped); with it, waits for room (back-pressure), but not past
        `deadline_ns` nor once the load is stopped: then nothing was sent, False is returned
        and the caller records the query `not_issued`. The issue time is taken when the query
        goes in, so under back-pressure the wait for room is issue delay, not queue wait."""
        channels = self.entry_channels
        if not block and any(channel.full() for channel in channels):
            return False
        entry = channels[0]
        if block and entry.qsize() >= entry.capacity and not self._room_by(entry, deadline_ns):
            return False
        completion = self.completion
        query.outstanding = len(channels)
        completion.inflight[query.query_id] = query  # dict updates are atomic under the GIL
        completion.idle.clear()
        issued_ns = time.monotonic_ns()
        query.issued_ns = issued_ns
        query.enqueued_ns = issued_ns
        self.issued += 1
        if not self.first_issue_ns:
            self.first_issue_ns = issued_ns
        # Room was there a moment ago and the load generator is the entry's only bounded
        # producer (loop edges into it are unbounded), so this cannot overfill it.
        if len(channels) == 1:
            # The put comes last: the stage thread it wakes waits for nothing more of ours.
            entry.raw_put(query)
            return True
        # Branches for further entries are copied before the query is visible to any stage.
        branches = [query.branch() for _ in channels[1:]]
        entry.put_unbounded(query)
        for channel, branch in zip(channels[1:], branches, strict=True):
            completion.send(channel, branch)
        return True

    def _room_by(self, channel: Channel, deadline_ns: int | None) -> bool:
        """Wait for room in `channel` until `deadline_ns` (None: no deadline) or a stop of the
        load; False if neither room came."""
        if channel.wait_for_room(0):
            return True
        completion = self.completion
        while not completion.stop_issuing.is_set() and not completion.stop_event.is_set():
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
        inflight = self.completion.inflight
        for query in queries:
            inflight[query.query_id] = query
            query.outstanding = fan_out
        if queries:
            self.completion.idle.clear()

    def unregister_offline(self, queries: list[Query]) -> None:
        """Offline: take registered queries that will never be issued back out of the
        in-flight table, so the drain neither waits for them nor records them `timeout`."""
        inflight = self.completion.inflight
        for query in queries:
            inflight.pop(query.query_id, None)
        if not inflight:
            self.completion.idle.set()

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
        self.tally.dropped += 1

    def record_not_issued(
        self, query_id: int, scheduled_ns: int, samples: int, warmup: bool, buffer: RowBuffer
    ) -> None:
        """An arrival that was due inside the window when the load stopped early (timeout,
        pipeline stop): recorded `not_issued`, so it is in a table and not silently lost."""
        buffer.query_rows.append((query_id, scheduled_ns, None, None, NOT_ISSUED, samples, warmup))
